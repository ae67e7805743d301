"""One implementation of an op launched back to back, for Nsight Compute in a steady L2 state.

`cuda_profile.py` launches each kernel once on fresh inputs; an op whose bytes just exceed the
L2 behaves differently when replayed, as the benchmark times it: what the previous launch left
in the L2 (its outputs' dirty lines, evict-first inputs) decides how many bytes go to DRAM.
Here the op runs `--warm` times, then `--launches` more on the same tensors inside a profiler
range (``cudaProfilerStart``/``Stop``); profile those, e.g. (bf16, the benchmark's inputs):

    ncu --profile-from-start off --cache-control none --clock-control none \
        --replay-mode application --launch-skip 20 --launch-count 3 \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
        python benchmarks/gpu/steady_launches.py cuda fused_add_rms_norm 4096x2048

With ``--profile-from-start off`` Nsight Compute sees only the range, so ``--launch-skip``
counts the op's own launches, not the kernels that made its inputs (without it, a skip of 20
can land on those: round 71 of `results/cuda-kernels-notes-H100.md`); ``-k`` still picks one
kernel of an op that launches several.

`provider`: a registered implementation (``cuda``, ``triton``) or ``inductor`` (the native
function under ``torch.compile``, as the benchmark's anchor). Kernel names to filter on:
``row_kernel`` (cuda norms), ``norm`` (Triton's), ``triton_`` (Inductor's).
"""

import argparse

import torch

import ir_kernels_cuda.impls  # noqa: F401  (registers provider cuda)
import ir_kernels_triton  # noqa: F401  (registers provider triton)
from ir_spec import SampleSpec, ops
from ir_spec.testing import sample_inputs


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("provider", help="cuda, triton, ... or inductor")
    parser.add_argument("op", help="a catalog op, e.g. fused_add_rms_norm")
    parser.add_argument("shape", help="TOKENSxHIDDEN, e.g. 4096x2048")
    parser.add_argument("--warm", type=int, default=3)
    parser.add_argument("--launches", type=int, default=30)
    a = parser.parse_args()
    tokens, hidden = (int(v) for v in a.shape.split("x"))
    op = getattr(ops, a.op)
    spec = SampleSpec(
        batch_shape=(tokens,), hidden_size=hidden, dtype=torch.bfloat16, device="cuda"
    )
    args = sample_inputs(op, spec)
    fn = (
        torch.compile(op.native, dynamic=False)
        if a.provider == "inductor"
        else op.impls[a.provider].fn
    )
    for _ in range(a.warm):
        fn(*args)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for _ in range(a.launches):
        fn(*args)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()
