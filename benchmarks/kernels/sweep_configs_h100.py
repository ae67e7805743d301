# ruff: noqa: B023  (each lambda is timed before the loop moves on)
"""H100 sweeps behind the rotary head blocks, the norm warps and the group-quant configs
(`benchmarks/results/triton-tuning-H100.log`, section 3).

``python sweep_configs_h100.py rotary,norm,group``: each configuration beside our default and
Inductor's kernel, CUDA-graph replays in µs, fastest first.
"""

import sys
from collections.abc import Callable
from typing import Any

import torch
import triton
from triton.testing import do_bench_cudagraph

import ir_kernels_triton  # noqa
from ir_kernels_triton import dynamic_quant_kernels as dq
from ir_kernels_triton import norm_kernels as nk
from ir_kernels_triton import norm_rules as nr
from ir_kernels_triton.rotary_kernels import launch_rotary
from ir_spec import SampleSpec, ops
from ir_spec.testing import sample_inputs
from ir_stack.bench import kernels as bk

bk.lift_recompile_limits()
FP8 = torch.float8_e4m3fn


def us(fn: Callable[[], Any], rep: int = 10) -> float:
    fn()
    torch.cuda.synchronize()
    return float(do_bench_cudagraph(fn, rep=rep)) * 1e3


def show(label: str, res: list[tuple[float, str]], top: int = 7) -> None:
    res.sort()
    print(f"{label}: " + " ".join(f"{u:.2f}:{n}" for u, n in res[:top]), flush=True)


def spec(t: int, h: int, seed: int = 0) -> SampleSpec:
    return SampleSpec(
        batch_shape=(t,), hidden_size=h, dtype=torch.bfloat16, device="cuda", seed=seed
    )


def part_rotary() -> None:
    for h in (2048, 4096, 8192):
        for t in (1, 16, 128, 1024, 4096):
            args = sample_inputs(ops.rotary_embedding, spec(t, h))
            pos, q, k, hs, cache, neox = args
            qo, ko = torch.empty_like(q), torch.empty_like(k)
            heads = h // hs
            ind = bk.anchors(ops.rotary_embedding, args)["inductor"]
            res = [
                (us(ind), "inductor"),
                (us(lambda: ops.rotary_embedding.impls["triton"].fn(*args)), "ours"),
            ]
            hb = 1
            while hb <= triton.next_power_of_2(heads):
                for w in (1, 2, 4, 8):
                    res.append(
                        (
                            us(
                                lambda: launch_rotary(
                                    pos, q, k, hs, cache, neox, qo, ko, head_block=hb, num_warps=w
                                )
                            ),
                            f"hb{hb}w{w}",
                        )
                    )
                hb *= 2
            show(
                f"rotary t={t} h={h} heads={heads} (ind {res[0][0]:.2f} ours {res[1][0]:.2f})", res
            )


def part_norm() -> None:
    scale = torch.full((1,), 0.05, device="cuda")
    variants = {
        "rms_norm": (False, nr.QUANT_NONE),
        "fused_add": (True, nr.QUANT_NONE),
        "rms_static": (False, nr.QUANT_STATIC),
        "rms_dynamic": (False, nr.QUANT_DYNAMIC),
        "fused_add_static": (True, nr.QUANT_STATIC),
    }
    for h, warps in ((8192, (8, 16, 32)), (4096, (4, 8, 16))):
        for name, (resid, quant) in variants.items():
            if h == 4096 and name != "fused_add_static":
                continue
            for t in (1, 16, 128, 1024, 4096, 16384):
                x = torch.randn(t, h, device="cuda", dtype=torch.bfloat16)
                r = torch.randn_like(x)
                w = torch.randn(h, device="cuda", dtype=torch.bfloat16)
                out = torch.empty(t, h, device="cuda", dtype=FP8 if quant else torch.bfloat16)
                res_out = torch.empty_like(x)
                s_out = torch.empty(t, 1, device="cuda")
                kw: dict[str, Any] = dict(
                    quant=quant,
                    scale=scale if quant == 1 else None,
                    scale_out=s_out if quant == 2 else None,
                )
                if resid:
                    kw.update(residual=r, residual_out=res_out)
                res = [(us(lambda: nk.launch_norm(x, w, 1e-6, None, out, **kw)), "default")]
                for wp in warps:
                    res.append(
                        (
                            us(
                                lambda: nk.launch_norm(
                                    x, w, 1e-6, None, out, num_warps=wp, early_weight=True, **kw
                                )
                            ),
                            f"w{wp}e",
                        )
                    )
                    if quant:
                        res.append(
                            (
                                us(
                                    lambda: nk.launch_norm(
                                        x,
                                        w,
                                        1e-6,
                                        None,
                                        out,
                                        num_warps=wp,
                                        early_weight=False,
                                        **kw,
                                    )
                                ),
                                f"w{wp}",
                            )
                        )
                show(f"{name} t={t} h={h} (default {res[0][0]:.2f})", res)


def part_group() -> None:
    for t in (1, 16, 128, 1024):
        for h in (2048, 4096, 8192):
            args = sample_inputs(ops.group_quant_fp8, spec(t, h))
            x = args[0]
            q = torch.empty(t, h, device="cuda", dtype=FP8)
            s = torch.empty(t, h // 128, device="cuda")
            ind = bk.anchors(ops.group_quant_fp8, args)["inductor"]
            res = [(us(ind), "inductor"), (us(lambda: dq.launch_group_quant(x, 128, q, s)), "ours")]
            for per in (1, 2, 4, 8, 16, 32):
                if per > h // 128:
                    continue
                for w in (1, 2, 4, 8):
                    res.append(
                        (
                            us(
                                lambda: dq.launch_group_quant(
                                    x, 128, q, s, per_program=per, num_warps=w
                                )
                            ),
                            f"p{per}w{w}",
                        )
                    )
            show(f"group t={t} h={h} (ind {res[0][0]:.2f} ours {res[1][0]:.2f})", res)


if __name__ == "__main__":
    for part in sys.argv[1].split(","):
        parts: dict[str, Callable[[], None]] = {
            "rotary": part_rotary,
            "norm": part_norm,
            "group": part_group,
        }
        parts[part]()
