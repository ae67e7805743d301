"""Builds of the ``cuda`` kernels timed side by side in one process: this tree's and others.

An A/B of a kernel change used to build each source in turn and run the kernel grid after each
(two builds, two grids with their Inductor anchors: most of a device call). Here the other
source (`--old-csrc`, e.g. ``git archive REV packages/ir-kernels-cuda/csrc``) is built as
``torch.ops.ir_cuda_old`` beside this tree's ``torch.ops.ir_cuda``, and each shape times both
and Triton's kernel (the machine's yardstick) by CUDA-graph replay (`do_bench_cudagraph`,
median), in `--rounds` rounds of rotated order; the fastest round is shown, the outputs of the
two builds are compared first (bitwise unless `--close`). bf16, the kernel grid's shapes.
`--anchors` times the grid's anchors of each op too (Inductor, compiled per shape, and
`F.rms_norm` / Liger-Kernel where they apply: `ir_stack.bench.kernels.anchors`).

Usage (GPU machine, the package built): python benchmarks/gpu/cuda_ab.py --old-csrc DIR
  [--ops a,b] [--tokens 1,16,128,1024,4096] [--hidden 2048,4096,8192] [--rounds 3] [--anchors]
  [--json OUT]
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from probe_tools import bf16_inputs, checked_times

from ir_kernels_cuda import build as cuda_build
from ir_stack.bench.kernels import GATED, INTERMEDIATE, anchors, lift_recompile_limits


@functools.cache
def cuda_impls() -> Any:
    """``ir_kernels_cuda.impls``, imported (this tree's kernels built or loaded) on first use:
    after the other build, so that the two can compile at once (``python -m ir_kernels_cuda
    build &`` beside this script)."""
    import ir_kernels_cuda.impls
    import ir_kernels_triton  # noqa: F401  (registers provider triton, the yardstick)

    return ir_kernels_cuda.impls


def build_other(csrc: Path, namespace: str, work: Path, programmatic: bool = False) -> Any:
    """The kernels of `csrc` built in `work` (made, with its parents, by the copy of the sources)
    and loaded as ``torch.ops.<namespace>`` (a build already there and up to date is only
    loaded); `programmatic`: the build whose launches are
    programmatic dependent launches (``IR_CUDA_PROGRAMMATIC``)."""
    from torch.utils import cpp_extension

    source = work / "csrc"
    if not source.exists():
        shutil.copytree(csrc, source)
        ops_cpp = source / "ops.cpp"
        text, count = re.subn(
            r"#define IR_CUDA_LIBRARY ir_cuda(_programmatic)?\n",
            f"#define IR_CUDA_LIBRARY {namespace}\n",
            ops_cpp.read_text(),
        )
        if count == 0:
            raise SystemExit(f"{ops_cpp}: no '#define IR_CUDA_LIBRARY ir_cuda' line to rename")
        ops_cpp.write_text(text)
    defines = ["-DIR_CUDA_PROGRAMMATIC"] if programmatic else []
    with cuda_build._environ("TORCH_CUDA_ARCH_LIST", cuda_build.architecture()):
        cpp_extension.load(
            name=namespace,
            sources=[str(source / name) for name in cuda_build.SOURCES],
            extra_include_paths=[str(source)],
            extra_cflags=["-O3", *defines],
            extra_cuda_cflags=["-O3", "--expt-relaxed-constexpr", *defines],
            build_directory=str(work),
            is_python_module=False,
            extra_ldflags=cuda_build.runtime_link_flags(),
        )
    return getattr(torch.ops, namespace)


def build_all(sources: dict[str, Path]) -> dict[str, Any]:
    """Each source of `sources` (name to csrc folder) built as ``torch.ops.ir_cuda_<name>``: the
    compilations run at once in child processes, then each build is loaded here."""
    root = Path(tempfile.mkdtemp(prefix="ir-cuda-ab-"))
    children = []
    for name, csrc in sources.items():
        (root / name).mkdir()
        command = [
            sys.executable,
            __file__,
            "--build-only",
            f"{name}={csrc}",
            "--build-root",
            str(root),
        ]
        children.append((name, subprocess.Popen(command)))
    for name, child in children:
        if child.wait() != 0:
            raise SystemExit(f"the build of {name} ({sources[name]}) failed")
    return {
        name: build_other(csrc, f"ir_cuda_{name}", root / name) for name, csrc in sources.items()
    }


def named_source(text: str) -> tuple[str, Path]:
    """``NAME=DIR`` as (NAME, DIR); NAME must make an identifier."""
    name, sep, folder = text.partition("=")
    if not sep or not name.isidentifier() or not folder:
        raise argparse.ArgumentTypeError(f"expected NAME=DIR with NAME an identifier, got {text!r}")
    return name, Path(folder)


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


def time_shape(
    name: str,
    tokens: int,
    hidden: int,
    others: dict[str, Any],
    rounds: int,
    close: bool,
    with_anchors: bool = False,
) -> dict[str, list[float]]:
    width = INTERMEDIATE[hidden] if name in GATED else hidden
    op, args = bf16_inputs(name, tokens, width)
    new_fn, triton_fn = op.impls["cuda"].fn, op.impls["triton"].fn

    def run_with(namespace: Any) -> Callable[[], Any]:
        def run() -> Any:
            with kernels(namespace):
                return new_fn(*args)

        return run

    candidates: dict[str, Callable[[], Any]] = {"new": lambda: new_fn(*args)}
    candidates |= {other: run_with(namespace) for other, namespace in others.items()}
    candidates["triton"] = lambda: triton_fn(*args)
    if with_anchors:
        candidates |= anchors(op, args)
    return checked_times(f"{name} {tokens}x{width}", candidates, others, rounds, close)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--old-csrc", type=Path)
    parser.add_argument(
        "--other", type=named_source, action="append", default=[], metavar="NAME=DIR"
    )
    parser.add_argument("--ops", default="rms_norm,fused_add_rms_norm,dynamic_quant_fp8")
    parser.add_argument("--tokens", default="1,16,128,1024,4096")
    parser.add_argument("--hidden", default="2048,4096,8192")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--close", action="store_true", help="outputs close, not bitwise")
    parser.add_argument("--anchors", action="store_true", help="time the grid's anchors too")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--build-only", type=named_source, help=argparse.SUPPRESS)
    parser.add_argument("--build-root", type=Path, help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.build_only:
        name, csrc = a.build_only
        build_other(csrc, f"ir_cuda_{name}", a.build_root / name)
        return
    sources = dict(a.other)
    if a.old_csrc:
        sources = {"old": a.old_csrc} | sources
    if not sources:
        parser.error("give --old-csrc or at least one --other NAME=DIR")
    others = build_all(sources)
    if a.anchors:
        lift_recompile_limits()
    if not cuda_impls().SUPPORTED:
        raise SystemExit(f"provider cuda unavailable: {cuda_impls().REASON}")
    records = []
    for name in a.ops.split(","):
        for tokens in (int(t) for t in a.tokens.split(",")):
            for hidden in (int(h) for h in a.hidden.split(",")):
                times = time_shape(name, tokens, hidden, others, a.rounds, a.close, a.anchors)
                best = {n: min(v) for n, v in times.items()}
                records.append({"op": name, "tokens": tokens, "hidden": hidden, "times_us": times})
                ratios = " ".join(
                    f"{other} {best[other]:.2f} (new/{other} {best['new'] / best[other]:.3f})"
                    for other in others
                )
                yardsticks = " ".join(
                    f"{n} {best[n]:.2f}" for n in best if n != "new" and n not in others
                )
                print(
                    f"{name} {tokens}x{hidden}: new {best['new']:.2f} {ratios} {yardsticks}",
                    flush=True,
                )
    if a.json:
        device = torch.cuda.get_device_name()
        a.json.write_text(json.dumps({"device": device, "records": records}, indent=1))


if __name__ == "__main__":
    main()
