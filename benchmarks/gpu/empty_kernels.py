"""Replayed time of empty kernels launched in different ways, in one process: Triton's, the
``ir_cuda`` one, and those of a small inline extension launched by ``<<<>>>`` (32 and 128
threads, with and without a parameter), ``cudaLaunchKernelEx`` and the driver's
``cuLaunchKernel``, beside torch's fill of one element. Asks whether a CUDA kernel's launch
path costs more than a Triton kernel's at decode sizes (`cuda-kernels-notes-H100.md`, round
16). Run on the GPU machine from the repository root after ``source benchmarks/gpu/env.sh``.
"""

from collections.abc import Callable
from functools import partial

import torch
from torch.utils.cpp_extension import load_inline

from ir_kernels_cuda.build import runtime_link_flags
from ir_stack.bench.kernels import empty_kernel_us, replayed_us

SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda.h>
__global__ void nothing() {}
__global__ void nothing_with(float*) {}
cudaStream_t stream() { return at::cuda::getCurrentCUDAStream(); }
void chevrons_32(torch::Tensor) { nothing<<<1, 32, 0, stream()>>>(); }
void chevrons_128(torch::Tensor) { nothing<<<1, 128, 0, stream()>>>(); }
void with_pointer(torch::Tensor t) { nothing_with<<<1, 128, 0, stream()>>>(t.data_ptr<float>()); }
void launch_ex(torch::Tensor) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(1);
  config.blockDim = dim3(128);
  config.stream = stream();
  cudaLaunchKernelEx(&config, nothing);
}
void driver(torch::Tensor) {
  static CUfunction f = nullptr;
  if (f == nullptr) {
    cudaFunction_t g;
    cudaGetFuncBySymbol(&g, reinterpret_cast<const void*>(nothing));
    f = reinterpret_cast<CUfunction>(g);
  }
  cuLaunchKernel(f, 1, 1, 1, 128, 1, 1, 0, reinterpret_cast<CUstream>(stream()), nullptr, nullptr);
}
"""
LAUNCHERS = ["chevrons_32", "chevrons_128", "with_pointer", "launch_ex", "driver"]


def main() -> None:
    module = load_inline(
        "empty_kernels",
        cpp_sources="".join(f"void {name}(torch::Tensor);" for name in LAUNCHERS),
        cuda_sources=SOURCE,
        functions=LAUNCHERS,
        extra_cuda_cflags=["-O3"],
        extra_ldflags=[*runtime_link_flags(), "-lcuda"],
    )
    t = torch.empty(1, device="cuda")
    candidates: dict[str, Callable[[], object]] = {}
    for name in LAUNCHERS:
        candidates[name] = partial(getattr(module, name), t)
    candidates["torch fill, 1 element"] = lambda: t.fill_(1.0)
    try:
        from ir_kernels_cuda.build import build

        build()
        candidates["ir_cuda.empty_kernel"] = lambda: torch.ops.ir_cuda.empty_kernel(t)
    except Exception as err:  # the comparison still runs without the ir_cuda build
        print("no ir_cuda kernels:", err)
    for fn in candidates.values():
        fn()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {"triton (ir_stack.bench)": []}
    times.update({name: [] for name in candidates})
    for _ in range(5):
        times["triton (ir_stack.bench)"].append(empty_kernel_us())
        for name, fn in candidates.items():
            times[name].append(replayed_us(fn, 50))
    for name, values in times.items():
        values.sort()
        print(f"{name:24s} min {values[0]:.3f} us  median {values[2]:.3f} us")


if __name__ == "__main__":
    main()
