"""Sweep launch configurations of the Triton norm and gated kernels on the GPU (bf16).

Prints, per shape, microseconds (CUDA-graph replay) and fraction of copy bandwidth for each
configuration, to choose the defaults in ir_kernels_triton. Usage: python tune_triton.py
"""

import sys
from collections.abc import Callable

import torch
from triton.testing import do_bench, do_bench_cudagraph

import ir_kernels_triton  # noqa: F401  (registers the provider)
from ir_kernels_triton import norm_kernels as nk
from ir_kernels_triton import norm_rules as nr
from ir_kernels_triton import pointwise_kernels as pk
from ir_spec import SampleSpec, ops
from ir_spec.testing import sample_inputs


def copy_gbps() -> float:
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=50, rep=300)
    return 2 * (1 << 30) / (float(ms) * 1e-3) / 1e9


def report(label: str, fn: Callable[[], None], traffic: int, copy: float) -> None:
    us = float(do_bench_cudagraph(fn, rep=15)) * 1e3
    print(f"    {label:40s} {us:9.2f} us  {traffic / (us * 1e-6) / 1e9 / copy:.3f}", flush=True)


def norm_runner(
    x: torch.Tensor,
    w: torch.Tensor,
    eps: float,
    out: torch.Tensor,
    quant: int,
    scale: torch.Tensor,
    single: bool,
    block: int | None,
    warps: int,
) -> Callable[[], None]:
    def run() -> None:
        nk.launch_norm(
            x,
            w,
            eps,
            None,
            out,
            quant=quant,
            scale_out=scale,
            single_pass=single,
            block=block,
            num_warps=warps,
        )

    return run


def gated_runner(
    x: torch.Tensor, out: torch.Tensor, act: int, block: int, warps: int
) -> Callable[[], None]:
    def run() -> None:
        pk.launch_gated(x, out, act, block=block, num_warps=warps)

    return run


def quant_sweep(copy: float) -> None:
    """Weight load before / after the reduction for the quantizing norms, and configurations of
    the gated + static quant kernel."""
    ones = torch.ones(1, device="cuda")
    for quant, name in ((nr.QUANT_STATIC, "rms_norm_static"), (nr.QUANT_DYNAMIC, "rms_norm_dyn")):
        for t, h in ((1, 8192), (4096, 8192), (16384, 4096), (16384, 8192)):
            x, w, eps, _ = sample_inputs(
                ops.rms_norm,
                SampleSpec(batch_shape=(t,), hidden_size=h, dtype=torch.bfloat16, device="cuda"),
            )
            out = torch.empty(t, h, device="cuda", dtype=torch.float8_e4m3fn)
            scale = torch.empty(t, 1, device="cuda")
            traffic = x.numel() * 2 + h * 2 + out.numel()
            print(f"  {name} t={t} h={h}")
            for early in (False, True):
                for warps in (4, 8, 16):

                    def run(
                        early: bool = early,
                        warps: int = warps,
                        x: torch.Tensor = x,
                        w: torch.Tensor = w,
                        eps: float = eps,
                        out: torch.Tensor = out,
                        q: int = quant,
                        scale: torch.Tensor = scale,
                    ) -> None:
                        nk.launch_norm(
                            x,
                            w,
                            eps,
                            None,
                            out,
                            quant=q,
                            scale=ones,
                            scale_out=scale,
                            num_warps=warps,
                            early_weight=early,
                        )

                    report(f"early_weight={early} warps={warps}", run, traffic, copy)
    for t, d in ((1, 14336), (4096, 28672), (16384, 5632), (16384, 14336)):
        x = torch.randn(t, 2 * d, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(t, d, device="cuda", dtype=torch.float8_e4m3fn)
        traffic = x.numel() * 2 + out.numel()
        print(f"  silu_static t={t} d={d}")
        for block, warps in ((512, 4), (1024, 4), (2048, 4), (2048, 8), (4096, 8)):

            def run_gated(
                b: int = block, wp: int = warps, x: torch.Tensor = x, out: torch.Tensor = out
            ) -> None:
                pk.launch_gated(x, out, pk.ACT_SILU, ones, block=b, num_warps=wp)

            report(f"block={block} warps={warps}", run_gated, traffic, copy)


def main() -> None:
    copy = copy_gbps()
    print(f"copy {copy:.0f} GB/s")
    if "--quant" in sys.argv:
        quant_sweep(copy)
        return
    # Sweeps on an H200 (Nov 2026) also tried the looped kernel (blocks 1024-4096: always
    # slower below MAX_SINGLE_PASS) and evict_first loads (3-5 % slower at large sizes).
    norm_configs = [(True, None, w) for w in (4, 8, 16)]
    for quant, name in ((nr.QUANT_NONE, "rms_norm"), (nr.QUANT_DYNAMIC, "rms_norm_dynamic")):
        for t, h in ((1, 8192), (4096, 4096), (4096, 8192), (16384, 4096), (16384, 8192)):
            x, w, eps, _ = sample_inputs(
                ops.rms_norm,
                SampleSpec(batch_shape=(t,), hidden_size=h, dtype=torch.bfloat16, device="cuda"),
            )
            out = torch.empty(
                t, h, device="cuda", dtype=torch.bfloat16 if quant == 0 else torch.float8_e4m3fn
            )
            scale = torch.empty(t, 1, device="cuda")
            traffic = x.numel() * 2 + h * 2 + out.numel() * out.element_size()
            print(f"  {name} t={t} h={h}")
            for single, block, warps in norm_configs:
                run = norm_runner(x, w, eps, out, quant, scale, single, block, warps)
                report(f"single={single} block={block} warps={warps}", run, traffic, copy)
    for name, act in (("silu", pk.ACT_SILU), ("gelu", pk.ACT_GELU)):
        for t, d in ((1, 14336), (4096, 14336), (16384, 5632), (16384, 28672)):
            x = torch.randn(t, 2 * d, device="cuda", dtype=torch.bfloat16)
            out = torch.empty(t, d, device="cuda", dtype=torch.bfloat16)
            traffic = x.numel() * 2 + out.numel() * 2
            print(f"  {name} t={t} d={d}")
            for block, warps in ((512, 4), (1024, 4), (2048, 2), (2048, 8)):
                run = gated_runner(x, out, act, block, warps)
                report(f"block={block} warps={warps}", run, traffic, copy)


if __name__ == "__main__":
    main()
