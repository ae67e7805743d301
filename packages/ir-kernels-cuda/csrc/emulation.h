// Host emulation of the CUDA execution model the ir_cuda kernels use, so that the kernels'
// own source runs on the CPU (tests on machines without a GPU; see tests/test_emulated.py).
//
// Built with -DIR_CUDA_HOST_EMULATION by a host compiler: every CUDA thread of a block is a
// fiber (a ucontext with a stack of its own) on the launching host thread; blocks run one after
// another, so function-local statics stand in for shared memory; __syncthreads and
// __shfl_xor_sync are barriers over the block and the warp, where a fiber yields until the
// last one arrives. The blocks of a thread block cluster run together as one pool of fibers,
// whose __syncthreads is then a barrier over the cluster (`cluster.cuh`). Only what the kernels
// use is here: 1-D blocks and clusters, 2-D grids, shuffles of 32-bit values, full-warp masks.
//
// Fibers, not host threads: a block's threads then cost no thread creation and no futex wake
// per barrier (a host thread a CUDA thread makes the emulated tests several times slower), and
// they run in one fixed order, so a run is reproducible.
#pragma once

#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

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

constexpr size_t kFiberStackBytes = size_t{256} << 10;

// AddressSanitizer's notes of a switch between stacks, so that it checks each fiber against its
// own stack (no-ops without it): before the switch, the stack switched to; after it, the one left.
inline void before_switch(void** fake_stack, const void* bottom, size_t size) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(fake_stack, bottom, size);
#endif
}
inline void after_switch(void* fake_stack, const void** bottom, size_t* size) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake_stack, bottom, size);
#endif
}

// One emulated CUDA thread: its context, stack and built-in indices.
struct Fiber {
  ucontext_t context{};
  char* stack = nullptr;
  dim3 thread_idx, block_idx;
  int pool_thread = 0;
  bool done = false;
};

// The running pool: the launching thread's context, the fiber on the CPU and the kernel call.
struct Scheduler {
  ucontext_t context{};
  const void* stack_bottom = nullptr;  // the launching thread's stack, for AddressSanitizer
  size_t stack_size = 0;
  Fiber* current = nullptr;
  std::function<void()> body;
};

inline thread_local Scheduler* scheduler = nullptr;

// Gives the CPU back to the scheduler, which resumes the next fiber of the pool.
inline void yield() {
  void* fake_stack = nullptr;
  before_switch(&fake_stack, scheduler->stack_bottom, scheduler->stack_size);
  if (swapcontext(&scheduler->current->context, &scheduler->context) != 0) std::abort();
  after_switch(fake_stack, &scheduler->stack_bottom, &scheduler->stack_size);
}

// A barrier over `count` fibers: each arrival counts; the last one opens it, and the others
// see the new generation when next resumed.
struct Barrier {
  explicit Barrier(int count) : count(count) {}
  void arrive_and_wait() {
    if (++arrived == count) {
      arrived = 0;
      ++generation;
      return;
    }
    const unsigned waiting_for = generation;
    while (generation == waiting_for) yield();
  }
  int count;
  int arrived = 0;
  unsigned generation = 0;
};

struct Warp {
  explicit Warp(int lanes) : sync(lanes) {}
  Barrier sync;
  float values[32] = {};
};

struct Block {
  explicit Block(int threads) : sync(threads) {}
  Barrier sync;
  std::vector<std::unique_ptr<Warp>> warps;
};

inline thread_local dim3 thread_idx, block_idx, block_dim, grid_dim;
inline thread_local Block* block = nullptr;  // the block, or the cluster's pool of blocks
inline thread_local int pool_thread = 0;     // the thread's index in that pool

// Where each fiber starts: the pool's kernel call, then back to the scheduler (uc_link).
inline void fiber_main() {
  after_switch(nullptr, &scheduler->stack_bottom, &scheduler->stack_size);
  scheduler->body();
  scheduler->current->done = true;
  before_switch(nullptr, scheduler->stack_bottom, scheduler->stack_size);  // this stack's last switch
}

// Stacks for the fibers, kept between launches (untouched pages cost no memory).
inline char* fiber_stack(int index) {
  static thread_local std::vector<std::unique_ptr<char[]>> stacks;
  while (static_cast<int>(stacks.size()) <= index) stacks.emplace_back(new char[kFiberStackBytes]);
  return stacks[static_cast<size_t>(index)].get();
}

// Runs `body` as fibers[0..n) on this thread, round robin, until every one has returned.
inline void run_fibers(std::vector<Fiber>& fibers, std::function<void()> body) {
  Scheduler pool;
  pool.body = std::move(body);
  Scheduler* const outer = scheduler;
  scheduler = &pool;
  for (size_t i = 0; i < fibers.size(); ++i) {
    Fiber& f = fibers[i];
    f.stack = fiber_stack(static_cast<int>(i));
    if (getcontext(&f.context) != 0) std::abort();
    f.context.uc_stack.ss_sp = f.stack;
    f.context.uc_stack.ss_size = kFiberStackBytes;
    f.context.uc_link = &pool.context;
    makecontext(&f.context, fiber_main, 0);
  }
  for (size_t left = fibers.size(); left > 0;) {
    for (Fiber& f : fibers) {
      if (f.done) continue;
      thread_idx = f.thread_idx;
      block_idx = f.block_idx;
      pool_thread = f.pool_thread;
      pool.current = &f;
      void* fake_stack = nullptr;
      before_switch(&fake_stack, f.stack, kFiberStackBytes);
      if (swapcontext(&pool.context, &f.context) != 0) std::abort();
      after_switch(fake_stack, nullptr, nullptr);
      if (f.done) --left;
    }
  }
  scheduler = outer;
}

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

// The 32 bits of `v` from the lane `offset` away (a packed word of 16-bit elements), through the
// float shuffle above: a copy, never arithmetic, so every bit pattern arrives as it left.
inline unsigned __shfl_xor_sync(unsigned mask, unsigned v, int offset) {
  float bits;
  std::memcpy(&bits, &v, sizeof(bits));
  bits = __shfl_xor_sync(mask, bits, offset);
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}

namespace ir_cuda {

// Runs kernel<<<grid, block>>>(args...) in clusters of `cluster` blocks along x as fibers on
// this thread, one cluster at a time, the blocks of a cluster together.
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
      std::vector<emu::Fiber> pool(static_cast<size_t>(pool_threads));
      for (int t = 0; t < pool_threads; ++t) {
        emu::Fiber& f = pool[static_cast<size_t>(t)];
        f.thread_idx = dim3(static_cast<unsigned>(t % threads));
        f.block_idx = dim3(first + static_cast<unsigned>(t / threads), by);
        f.pool_thread = t / threads * warps * 32 + t % threads;  // warps numbered block by block
      }
      emu::block_dim = block;
      emu::grid_dim = grid;
      emu::block = &state;
      emu::run_fibers(pool, [&] { kernel(static_cast<Params>(args)...); });
    }
  }
}

// Runs kernel<<<grid, block>>>(args...) as fibers on this thread, one block at a time.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, Args... args) {
  launch_cluster(kernel, grid, block, 1u, stream, args...);
}

// A launch held to two blocks an SM on the GPU (`device.cuh`); blocks run one at a time here.
template <typename... Params, typename... Args>
void launch_two_blocks_an_sm(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream,
                             Args... args) {
  launch(kernel, grid, block, stream, args...);
}

// SMs that run thread block clusters: the emulated card's 132 (`l2_cache_bytes` in device.cuh:
// the shallow-loads class's card), so that emulated launches take the paths it would.
inline int cluster_sms() { return 132; }

// Every cluster fits: the host runs a cluster's blocks as one pool of threads.
template <auto KERNEL>
bool cluster_fits(unsigned /*block*/, unsigned /*cluster*/) {
  return true;
}

// The emulated card's residency: 132 SMs of 2048 threads (threads bind first there for kernels of
// at most 32 registers, as the ones that ask are).
template <auto KERNEL>
int resident_blocks(unsigned block) {
  return 132 * static_cast<int>(2048 / block);
}

}  // namespace ir_cuda
