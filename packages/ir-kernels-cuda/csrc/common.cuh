// Shared helpers of the ir_cuda kernels: 16-byte vectors, float conversion, block reductions.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cstdint>
#include <cuda_runtime.h>

namespace ir_cuda {

// A 16-byte vector of T: one global load or store instruction.
template <typename T>
struct alignas(16) Vec16 {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the block; every thread gets the total. Call at most once per kernel.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < warps ? partial[lane] : 0.f;
  return warp_sum(v);
}

// Threads per block for a row of `elements` processed `per_thread` at a time.
inline int threads_for(int64_t elements, int per_thread) {
  int64_t needed = (elements + per_thread - 1) / per_thread;
  int threads = 32;
  while (threads < needed && threads < 1024) threads *= 2;
  return threads;
}

}  // namespace ir_cuda
