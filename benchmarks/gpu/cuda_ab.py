"""Two builds of the ``cuda`` kernels timed side by side in one process: this tree's and another.

An A/B of a kernel change used to build each source in turn and run the kernel grid after each
(two builds, two grids with their Inductor anchors: most of a device call). Here the other
source (`--old-csrc`, e.g. ``git archive REV packages/ir-kernels-cuda/csrc``) is built as
``torch.ops.ir_cuda_old`` beside this tree's ``torch.ops.ir_cuda``, and each shape times both
and Triton's kernel (the machine's yardstick) by CUDA-graph replay (`do_bench_cudagraph`,
median), in `--rounds` rounds of rotated order; the fastest round is shown, the outputs of the
two builds are compared first (bitwise unless `--close`). bf16, the kernel grid's shapes.

Usage (GPU machine, the package built): python benchmarks/gpu/cuda_ab.py --old-csrc DIR
  [--ops a,b] [--tokens 1,16,128,1024,4096] [--hidden 2048,4096,8192] [--rounds 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from probe_tools import time_rotated

from ir_kernels_cuda import build as cuda_build
from ir_spec import SampleSpec, ops
from ir_spec.testing import sample_inputs
from ir_stack.bench.kernels import GATED, INTERMEDIATE

OLD_NAMESPACE = "ir_cuda_old"


@functools.cache
def cuda_impls() -> Any:
    """``ir_kernels_cuda.impls``, imported (this tree's kernels built or loaded) on first use:
    after the other build, so that the two can compile at once (``python -m ir_kernels_cuda
    build &`` beside this script)."""
    import ir_kernels_cuda.impls
    import ir_kernels_triton  # noqa: F401  (registers provider triton, the yardstick)

    return ir_kernels_cuda.impls


def build_old(csrc: Path) -> Any:
    """The kernels of `csrc` built and loaded as ``torch.ops.ir_cuda_old``."""
    from torch.utils import cpp_extension

    work = Path(tempfile.mkdtemp(prefix="ir-cuda-old-"))
    source = work / "csrc"
    shutil.copytree(csrc, source)
    ops_cpp = source / "ops.cpp"
    text, count = re.subn(
        r"#define IR_CUDA_LIBRARY ir_cuda\n",
        f"#define IR_CUDA_LIBRARY {OLD_NAMESPACE}\n",
        ops_cpp.read_text(),
    )
    if count != 1:
        raise SystemExit(f"{ops_cpp}: no '#define IR_CUDA_LIBRARY ir_cuda' line to rename")
    ops_cpp.write_text(text)
    with cuda_build._arch_list(cuda_build.architecture()):
        cpp_extension.load(
            name=OLD_NAMESPACE,
            sources=[str(source / name) for name in cuda_build.SOURCES],
            extra_include_paths=[str(source)],
            extra_cflags=["-O3"],
            extra_cuda_cflags=["-O3", "--expt-relaxed-constexpr"],
            build_directory=str(work),
            is_python_module=False,
        )
    return getattr(torch.ops, OLD_NAMESPACE)


@contextmanager
def kernels(namespace: Any) -> Iterator[None]:
    """The cuda implementations calling `namespace` inside the block."""
    impls = cuda_impls()
    saved = impls.KERNELS
    impls.KERNELS = namespace
    try:
        yield
    finally:
        impls.KERNELS = saved


def outputs(result: Any) -> list[torch.Tensor]:
    items = result if isinstance(result, tuple | list) else (result,)
    return [t for t in items if isinstance(t, torch.Tensor)]


def same(a: list[torch.Tensor], b: list[torch.Tensor], close: bool) -> bool:
    for x, y in zip(a, b, strict=True):
        if x.dtype == torch.float8_e4m3fn:
            x, y = x.view(torch.uint8), y.view(torch.uint8)
        if close and x.is_floating_point():
            if not torch.allclose(x.float(), y.float(), rtol=1e-2, atol=1e-2):
                return False
        elif not torch.equal(x, y):
            return False
    return True


def time_shape(
    name: str, tokens: int, hidden: int, old: Any, rounds: int, close: bool
) -> dict[str, list[float]]:
    op = getattr(ops, name)
    width = INTERMEDIATE[hidden] if name in GATED else hidden
    spec = SampleSpec(batch_shape=(tokens,), hidden_size=width, dtype=torch.bfloat16, device="cuda")
    args = sample_inputs(op, spec)
    new_fn, triton_fn = op.impls["cuda"].fn, op.impls["triton"].fn

    def run_old() -> Any:
        with kernels(old):
            return new_fn(*args)

    candidates: dict[str, Callable[[], Any]] = {
        "new": lambda: new_fn(*args),
        "old": run_old,
        "triton": lambda: triton_fn(*args),
    }
    if not same(outputs(candidates["new"]()), outputs(run_old()), close):
        raise SystemExit(f"{name} {tokens}x{width}: the two builds' outputs differ")
    return time_rotated(candidates, rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--old-csrc", type=Path, required=True)
    parser.add_argument("--ops", default="rms_norm,fused_add_rms_norm,dynamic_quant_fp8")
    parser.add_argument("--tokens", default="1,16,128,1024,4096")
    parser.add_argument("--hidden", default="2048,4096,8192")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--close", action="store_true", help="outputs within 1e-2, not bitwise")
    parser.add_argument("--json", type=Path)
    a = parser.parse_args()
    old = build_old(a.old_csrc)
    if not cuda_impls().SUPPORTED:
        raise SystemExit(f"provider cuda unavailable: {cuda_impls().REASON}")
    records = []
    for name in a.ops.split(","):
        for tokens in (int(t) for t in a.tokens.split(",")):
            for hidden in (int(h) for h in a.hidden.split(",")):
                times = time_shape(name, tokens, hidden, old, a.rounds, a.close)
                best = {n: min(v) for n, v in times.items()}
                records.append({"op": name, "tokens": tokens, "hidden": hidden, "times_us": times})
                print(
                    f"{name} {tokens}x{hidden}: new {best['new']:.2f} old {best['old']:.2f} "
                    f"(new/old {best['new'] / best['old']:.3f}) triton {best['triton']:.2f}",
                    flush=True,
                )
    if a.json:
        device = torch.cuda.get_device_name()
        a.json.write_text(json.dumps({"device": device, "records": records}, indent=1))


if __name__ == "__main__":
    main()
