// Reductions over a thread's values and over a team of threads (warp shuffles, then warp
// partials through shared memory), several at once, each to the same bits as alone.
#pragma once

#include "device.cuh"
#include "numerics.cuh"

namespace ir_cuda {

struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
// a maximum that keeps a NaN (`max_keeping_nan`): the absmax of the dynamic scales
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return max_keeping_nan(a, b); }
};

// v[0] op v[1] op ... op v[N - 1] as a tree: log2(N) dependent steps where a running
// accumulator takes N. At decode sizes a row's time is its chain of dependent instructions
// between the loads and the first store, and each thread's sum or absmax was the longest link
// of it. `v` is overwritten.
template <int N, typename Op>
__device__ __forceinline__ float tree_reduce(float* v, Op op) {
#pragma unroll
  for (int step = 1; step < N; step *= 2) {
#pragma unroll
    for (int i = 0; i + step < N; i += 2 * step) v[i] = op(v[i], v[i + step]);
  }
  return v[0];
}

// log2 of a power of two, at compile time where `v` is a constant.
__host__ __device__ constexpr int log2_of(int v) { return v <= 1 ? 0 : 1 + log2_of(v / 2); }

// One value of a reduction and the operation that combines it: `reducing(acc, SumOp{})`. The
// reductions below take several of these at once, so their shuffle trees interleave and one
// barrier or exchange serves them all; each value gets the same steps, so the same bits, as
// when reduced alone.
template <typename Op>
struct Reducing {
  float& value;
  Op op;
  // combines the value with that of the lane `offset` away
  __device__ __forceinline__ void with_lane(int offset) {
    value = op(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
};
template <typename Op>
__device__ __forceinline__ Reducing<Op> reducing(float& value, Op op) {
  return Reducing<Op>{value, op};
}

// The first N partials at `p` (shared memory) combined by `op` in one tree, neighbours first:
// the order of a shuffle tree over N lanes, so the same bits.
template <int N, typename Op>
__device__ __forceinline__ float combine_partials(const float* p, Op op) {
  float w[N];
#pragma unroll
  for (int i = 0; i < N; ++i) w[i] = p[i];
  return tree_reduce<N>(w, op);
}

// Reduces each value over a team of `team` consecutive threads (a power of two up to 512,
// dividing the block); every member gets the results. Every thread of the block must call it.
// Each list of `Op`s has its own shared array, and a kernel reduces with each list once, so no
// barrier is needed before the partials are written. `team_reduce<TEAM>` below is the same
// reduction, to the bit, for a team known at compile time.
template <typename... Op>
__device__ __forceinline__ void team_reduce(int team, Reducing<Op>... r) {
  __shared__ float partial[sizeof...(Op)][32];
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    if (offset < team) (r.with_lane(offset), ...);
  }
  if (team <= 32) return;
  if ((threadIdx.x & 31) == 0) {
    int k = 0;
    ((partial[k++][threadIdx.x >> 5] = r.value), ...);
  }
  __syncthreads();
  // the team's warp partials, one per lane (repeated across the warp), reduced by shuffles:
  // five steps at most instead of a chain of shared-memory reads; neighbours first, as
  // `RowExchange` combines a spread row's warps, so a team's sum is its two halves' sums added
  const int warps = team >> 5;
  const int first = static_cast<int>(threadIdx.x & ~(team - 1)) >> 5;
  const int i = first + (static_cast<int>(threadIdx.x) & (warps - 1));
  int k = 0;
  ((r.value = partial[k++][i]), ...);
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    if (offset < warps) (r.with_lane(offset), ...);
  }
}

// `team_reduce` for a team of TEAM threads: the same trees, but after the barrier every thread
// reads its team's warp partials of a single reduction in wide loads (a warp's lanes the same
// words, one broadcast a load) and combines them itself, instead of by shuffles, which wait on
// each other. That is faster for a single reduction; two reductions at once (the dynamic norm's
// sum and absmax) and the teams `RowExchange` serves are slower so, and keep the shuffles.
template <int TEAM, typename... Op>
__device__ __forceinline__ void team_reduce(Reducing<Op>... r) {
  constexpr int kWarps = TEAM / 32;
  if constexpr (kWarps <= 1 || sizeof...(Op) > 1) {
    team_reduce(TEAM, r...);
  } else {
    alignas(16) __shared__ float partial[32];
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) (r.with_lane(offset), ...);
    if ((threadIdx.x & 31) == 0) ((partial[threadIdx.x >> 5] = r.value), ...);
    __syncthreads();
    const int first = static_cast<int>(threadIdx.x & ~(TEAM - 1)) >> 5;
    ((r.value = combine_partials<kWarps>(partial + first, r.op)), ...);
  }
}

// `v` back after a barrier of the whole block, through shared memory so that the barrier
// waits on it: no thread goes on before every thread of the block has computed its `v` (a bare
// __syncthreads does not depend on the loads `v` comes from, and ptxas may issue it first).
// Every thread of the block must call it, once per kernel.
template <int THREADS>
__device__ __forceinline__ float after_block_barrier(float v) {
  __shared__ float staged[THREADS];
  staged[threadIdx.x] = v;
  __syncthreads();
  return staged[threadIdx.x];
}

// `v` reduced by `op` over the team, as above.
template <typename Op>
__device__ __forceinline__ float team_reduce(float v, int team, Op op) {
  team_reduce(team, reducing(v, op));
  return v;
}

}  // namespace ir_cuda
