// Host emulation of the CUDA execution model the ir_cuda kernels use, so that the kernels'
// own source runs on the CPU (tests on machines without a GPU; see tests/test_emulated.py).
//
// Built with -DIR_CUDA_HOST_EMULATION by a host compiler: every CUDA thread of a block is a
// std::thread; blocks run one after another, so function-local statics stand in for shared
// memory; __syncthreads and __shfl_xor_sync are barriers over the block and the warp. The blocks
// of a thread block cluster run together as one pool of threads, whose __syncthreads is then a
// barrier over the cluster (`cluster.cuh`). Only what the kernels use is here: 1-D blocks and
// clusters, 2-D grids, float shuffles, full-warp masks.
#pragma once

#include <barrier>
#include <cmath>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

// dim3, cudaStream_t and the fp8 conversions (host code in the toolkit's headers); included
// before the macros below, which would otherwise rename their parameters
#include <cuda_fp8.h>

#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __launch_bounds__
#undef __shared__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

namespace ir_cuda::emu {

struct Warp {
  explicit Warp(int lanes) : sync(lanes) {}
  std::barrier<> sync;
  float values[32] = {};
};

struct Block {
  explicit Block(int threads) : sync(threads) {}
  std::barrier<> sync;
  std::vector<std::unique_ptr<Warp>> warps;
};

inline thread_local dim3 thread_idx, block_idx, block_dim, grid_dim;
inline thread_local Block* block = nullptr;  // the block, or the cluster's pool of blocks
inline thread_local int pool_thread = 0;     // the thread's index in that pool

}  // namespace ir_cuda::emu

#define threadIdx (::ir_cuda::emu::thread_idx)
#define blockIdx (::ir_cuda::emu::block_idx)
#define blockDim (::ir_cuda::emu::block_dim)
#define gridDim (::ir_cuda::emu::grid_dim)

inline float rsqrtf(float v) { return 1.f / std::sqrt(v); }
inline float __expf(float v) { return std::exp(v); }
inline int __ffs(int v) { return __builtin_ffs(v); }
inline float __fdividef(float a, float b) { return a / b; }

inline void __syncthreads() { ::ir_cuda::emu::block->sync.arrive_and_wait(); }

inline float __shfl_xor_sync(unsigned /*mask: always the full warp*/, float v, int offset) {
  auto& warp = *::ir_cuda::emu::block->warps[::ir_cuda::emu::pool_thread / 32];
  const unsigned lane = threadIdx.x % 32;
  warp.values[lane] = v;
  warp.sync.arrive_and_wait();
  const float other = warp.values[lane ^ static_cast<unsigned>(offset)];
  warp.sync.arrive_and_wait();  // nobody overwrites values[] before every lane has read
  return other;
}

namespace ir_cuda {

// Runs kernel<<<grid, block>>>(args...) in clusters of `cluster` blocks along x on host threads,
// one cluster at a time, the blocks of a cluster together.
template <typename... Params, typename... Args>
void launch_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, unsigned cluster,
                    cudaStream_t /*stream*/, Args... args) {
  const int threads = static_cast<int>(block.x);
  const int warps = (threads + 31) / 32;  // a block's last warp may be partial
  const int pool_threads = threads * static_cast<int>(cluster);
  for (unsigned by = 0; by < grid.y; ++by) {
    for (unsigned first = 0; first < grid.x; first += cluster) {
      emu::Block state(pool_threads);
      for (unsigned b = 0; b < cluster; ++b) {
        for (int w = 0; w < warps; ++w) {
          state.warps.push_back(std::make_unique<emu::Warp>(threads - 32 * w < 32 ? threads - 32 * w : 32));
        }
      }
      std::vector<std::thread> pool;
      pool.reserve(pool_threads);
      for (int t = 0; t < pool_threads; ++t) {
        pool.emplace_back([&, t] {
          emu::thread_idx = dim3(static_cast<unsigned>(t % threads));
          emu::block_idx = dim3(first + static_cast<unsigned>(t / threads), by);
          emu::block_dim = block;
          emu::grid_dim = grid;
          emu::block = &state;
          emu::pool_thread = t / threads * warps * 32 + t % threads;  // warps numbered block by block
          kernel(static_cast<Params>(args)...);
        });
      }
      for (auto& thread : pool) thread.join();
    }
  }
}

// Runs kernel<<<grid, block>>>(args...) on host threads, one block at a time.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, Args... args) {
  launch_cluster(kernel, grid, block, 1u, stream, args...);
}

// SMs that run thread block clusters: an H100's count, so that emulated launches take the
// paths an H100 would.
inline int cluster_sms() { return 132; }

// Every cluster fits: the host runs a cluster's blocks as one pool of threads.
template <auto KERNEL>
bool cluster_fits(unsigned /*block*/, unsigned /*cluster*/) {
  return true;
}

// An H100's residency: 132 SMs of 2048 threads (threads bind first there for kernels of at most
// 32 registers, as the ones that ask are).
template <auto KERNEL>
int resident_blocks(unsigned block) {
  return 132 * static_cast<int>(2048 / block);
}

}  // namespace ir_cuda
