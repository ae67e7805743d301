"""H100 probe: programs per decode-size norm row (`norm_rules.split_for`) and the evict-first
hint at footprints of 1.28 x the L2 size (`benchmarks/results/triton-tuning-H100.log`,
section 11). Each configuration is checked bitwise against one program a row, then timed by
CUDA-graph replay, three rounds in turn. Run from the repository root with the packages on
`PYTHONPATH` (`source benchmarks/gpu/env.sh`).
"""

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from types import ModuleType
from typing import Any, TypeVar

import torch
from triton.testing import do_bench_cudagraph

from ir_kernels_triton import norm_kernels as nk
from ir_kernels_triton import norm_rules as nr
from ir_stack.bench.kernels import empty_kernel_us

FP8 = torch.float8_e4m3fn
VARIANTS = {
    "rms_norm": (False, nr.QUANT_NONE),
    "fused_add": (True, nr.QUANT_NONE),
    "static_fp8": (False, nr.QUANT_STATIC),
    "fused_add_static_fp8": (True, nr.QUANT_STATIC),
    "dynamic_fp8": (False, nr.QUANT_DYNAMIC),
}


def make_case(
    rows: int, hidden: int, residual: bool, quant: int, module: ModuleType = nk
) -> tuple[Callable[..., None], Callable[[], list[torch.Tensor]]]:
    """A launcher taking `launch_norm`'s knobs, and a snapshot of its outputs (`module`: a
    copy of `norm_kernels` from another tree, for a comparison; the inputs are the same)."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16, generator=gen)
    r = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16, generator=gen)
    w = torch.randn(hidden, device="cuda", dtype=torch.bfloat16, generator=gen)
    out = torch.empty(rows, hidden, device="cuda", dtype=FP8 if quant else x.dtype)
    res_out = torch.empty_like(x) if residual else None
    scale = torch.full((1,), 0.02, device="cuda")
    scales = torch.empty(rows, device="cuda") if quant == nr.QUANT_DYNAMIC else None

    def run(**knobs: Any) -> None:
        module.launch_norm(
            x, w, 1e-6, None, out, residual=r if residual else None, residual_out=res_out,
            quant=quant, scale=scale if quant == nr.QUANT_STATIC else None, scale_out=scales,
            **knobs,
        )  # fmt: skip

    def outputs() -> list[torch.Tensor]:
        return [t.clone().view(torch.uint8) for t in (out, res_out, scales) if t is not None]

    return run, outputs


Key = TypeVar("Key")


def fastest_of_rounds(fns: Mapping[Key, Callable[[], object]], rounds: int = 3) -> dict[Key, float]:
    """The fastest of `rounds` CUDA-graph timings of each function, in µs. Each round starts at
    another function: timed first in every round, a launch ran up to 4 % slower than the same
    launch timed later (`triton-tuning-H200.log` round 4)."""
    times: dict[Key, list[float]] = {k: [] for k in fns}
    keys = list(fns)
    for round_ in range(rounds):
        start = round_ * len(keys) // max(rounds, 1)
        for key in keys[start:] + keys[:start]:
            times[key].append(do_bench_cudagraph(fns[key], rep=20) * 1e3)
    return {k: min(v) for k, v in times.items()}


def split_sweep(batches: tuple[int, ...], names: Sequence[str] = tuple(VARIANTS)) -> None:
    """The variants `names` (the dynamic scale too, since section 14), 4096 and 8192 wide: the
    time of 1, 2 and 4 programs a row, and whether 2 and 4 give bitwise the outputs of 1."""
    for name in names:
        residual, quant = VARIANTS[name]
        for hidden in (4096, 8192):
            for rows in batches:
                run, outputs = make_case(rows, hidden, residual, quant)
                run(split=1)
                expected = outputs()
                bitwise = True
                for split in (2, 4):
                    run(split=split)
                    bitwise &= all(map(torch.equal, outputs(), expected))
                best = fastest_of_rounds({s: partial(run, split=s) for s in (1, 2, 4)})
                cells = " ".join(f"s{s}={t:.2f}" for s, t in best.items())
                print(f"   {name} {rows}x{hidden}: {cells} bitwise={bitwise}", flush=True)


def main() -> None:
    print(f"empty triton kernel: {empty_kernel_us():.2f} us")
    split_sweep((1, 4, 16, 32))
    for name, rows, hidden in (
        ("rms_norm", 4096, 4096),
        ("fused_add", 4096, 2048),
        ("fused_add", 1024, 8192),
    ):
        run, _ = make_case(rows, hidden, *VARIANTS[name])
        best = fastest_of_rounds({e: partial(run, evict_first=e) for e in (False, True)})
        print(f"   {name} {rows}x{hidden}: evict_first off {best[False]:.2f} on {best[True]:.2f}")


if __name__ == "__main__":
    main()
