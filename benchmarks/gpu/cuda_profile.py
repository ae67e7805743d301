"""Launch each ``cuda`` (and ``triton``) implementation once per shape, for Nsight Compute.

Run under ``ncu`` (see ``cuda_session.sh profile``): the timings of the kernel benchmark say how
far a kernel is from the copy ceiling; the counters say why (instructions issued against bytes
moved, occupancy, memory throughput). bf16, the benchmark's activation sizes.
"""

import argparse

import torch

import ir_kernels_cuda.impls  # noqa: F401  (registers provider cuda)
import ir_kernels_triton  # noqa: F401  (registers provider triton, the comparison)
from ir_spec import SampleSpec, ops
from ir_spec.testing import sample_inputs
from ir_stack.bench.kernels import GATED, INTERMEDIATE


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--ops", default=",".join(o.name for o in ops))
    parser.add_argument("--shapes", default="1x4096,16384x8192")
    parser.add_argument("--providers", default="cuda,triton")
    a = parser.parse_args()
    pairs = [(p, s) for p in a.providers.split(",") for s in a.shapes.split(",")]
    for name in a.ops.split(","):
        op = getattr(ops, name)
        for provider, shape in pairs:
            impl = op.impls[provider]
            tokens, hidden = (int(v) for v in shape.split("x"))
            width = INTERMEDIATE[hidden] if name in GATED else hidden
            spec = SampleSpec(
                batch_shape=(tokens,), hidden_size=width, dtype=torch.bfloat16, device="cuda"
            )
            args = sample_inputs(op, spec)
            impl.fn(*args)
            torch.cuda.synchronize()
            print(f"{provider} {name} {tokens}x{width}", flush=True)


if __name__ == "__main__":
    main()
