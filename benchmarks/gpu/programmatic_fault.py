"""Fault injection for programmatic launch: the programmatic build without
``griddepcontrol.wait`` must fail the chain comparison (`programmatic_chains`) that this tree's
programmatic build passes. Prints, per shape and mode, how many elements of each chain's results
differ from the plain build's.

Usage (GPU machine): cp -r packages/ir-kernels-cuda/csrc /tmp/nowait && sed -i
  's/  asm volatile("griddepcontrol.wait;" ::: "memory");//' /tmp/nowait/device.cuh &&
  python benchmarks/gpu/programmatic_fault.py /tmp/nowait
"""

import sys
import tempfile
from pathlib import Path

import torch
from cuda_ab import build_other

from ir_kernels_cuda.build import PROGRAMMATIC_NAMESPACE, build
from ir_kernels_cuda.testing import programmatic_chains


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="ir-cuda-nowait-"))
    without_wait = build_other(Path(sys.argv[1]), "ir_cuda_nowait", work, programmatic=True)
    build()
    build(programmatic=True)
    real = getattr(torch.ops, PROGRAMMATIC_NAMESPACE)
    for rows, width in [(1, 4096), (16, 8192), (7, 2048), (4096, 4096)]:
        expected = programmatic_chains(torch.ops.ir_cuda, rows, width)
        for graph in (False, True):
            for name, kernels in (("real", real), ("no wait", without_wait)):
                got = programmatic_chains(kernels, rows, width, graph=graph)
                differ = [int((a != b).sum()) for a, b in zip(got, expected, strict=True)]
                print(f"{name:8s} {rows}x{width} graph={graph}: elements differing {differ}")


if __name__ == "__main__":
    main()
