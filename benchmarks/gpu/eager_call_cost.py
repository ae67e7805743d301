"""What an eager call of an op costs the host, per provider, at a decode size (16 rows of a 1B
model's width): µs a call over 3000 calls issued back to back (the kernels are too small to
keep the GPU busy, so the host sets the pace), through the op (``ir_spec.ops``, dispatch
included) and calling the provider's function directly; the Triton provider also with its
launch plans turned off (``ir_kernels_triton.launch_plans``: every call through its
configuration rules and Triton's own launch path). Then the in-place providers through
``maybe_inplace`` (outside and inside inference mode: outside, the call bumps the written
arguments' version counters) and directly. Run on the GPU machine from the repository root
after ``source benchmarks/gpu/env.sh``."""

from collections.abc import Callable
from typing import Any

import torch
from timing import per_call_us  # benchmarks/gpu/timing.py

import ir_dispatch
from ir_kernels_triton import launch_plans
from ir_spec import ops
from ir_stack.bench.kernels import import_providers

PROVIDERS = ("native", "triton", "cuda")


def bound(fn: Callable[..., Any], args: tuple[Any, ...]) -> Callable[[], Any]:
    """`fn` on `args`, as a lambda (the per-call cost timed includes one Python call, as the
    plain ``x.mul(1)`` line's does)."""
    return lambda: fn(*args)


def main() -> None:
    import_providers()  # run from source, the packages have no entry points
    torch.manual_seed(0)
    cuda, bf16 = "cuda", torch.bfloat16
    x = torch.randn(16, 2048, device=cuda, dtype=bf16)
    weight = torch.rand(2048, device=cuda, dtype=bf16)
    cases: dict[str, tuple[Any, ...]] = {
        "rms_norm": (x, weight, 1e-5),
        "fused_add_rms_norm": (x, torch.randn_like(x), weight, 1e-5),
        "silu_and_mul": (torch.randn(16, 16384, device=cuda, dtype=bf16),),
        "rotary_embedding": (
            torch.arange(16, device=cuda),
            torch.randn(16, 2048, device=cuda, dtype=bf16),
            torch.randn(16, 512, device=cuda, dtype=bf16),
            64,
            torch.randn(4096, 64, device=cuda),
            True,
        ),
    }
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}")
    print(f"a one-kernel torch op (x.mul(1)): {per_call_us(lambda: x.mul(1)):.1f} µs a call")
    for name, args in cases.items():
        op = getattr(ops, name)
        cells = []
        for provider in PROVIDERS:
            if provider != "native" and provider not in op.impls:
                cells.append(f"{provider}: not registered")
                continue
            with ir_dispatch.priority(**{name: [provider]}):
                selected = ir_dispatch.select(name, *args).provider
                through_op = per_call_us(bound(op, args))
            fn = op.native if provider == "native" else op.impls[provider].fn
            direct = per_call_us(bound(fn, args))
            cells.append(
                f"{provider} (selected {selected}): op {through_op:.1f}, direct {direct:.1f}"
            )
            if provider == "triton":
                with launch_plans(False), ir_dispatch.priority(**{name: [provider]}):
                    through_op = per_call_us(bound(op, args))
                    direct = per_call_us(bound(fn, args))
                cells.append(f"triton, plans off: op {through_op:.1f}, direct {direct:.1f}")
        print(f"{name}: " + " | ".join(cells))
    for name in ("fused_add_rms_norm", "rotary_embedding"):
        op, args = getattr(ops, name), cases[name]
        cells = []
        for provider in ("triton_inplace", "cuda_inplace"):
            if provider not in op.impls:
                cells.append(f"{provider}: not registered")
                continue
            fn = op.impls[provider].fn
            with ir_dispatch.priority(**{name: [provider]}):
                no_grad = per_call_us(bound(op.maybe_inplace, args))
                with torch.inference_mode():
                    inference = per_call_us(bound(op.maybe_inplace, args))
            direct = per_call_us(bound(fn, args))
            cells.append(
                f"{provider}: maybe_inplace {no_grad:.1f} (inference mode {inference:.1f}), "
                f"direct {direct:.1f}"
            )
        print(f"{name}.maybe_inplace: " + " | ".join(cells))


if __name__ == "__main__":
    main()
