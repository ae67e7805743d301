// A row spread over the blocks of a thread block cluster (Hopper and later), and the reduction
// that gives a row the same bits whether it is spread or not.
//
// At decode sizes a row kernel's time is one SM moving one row: a bf16 row of 8192 with a
// residual is 80 KB through one SM's port to L2. A cluster of CLUSTER blocks splits each row
// into CLUSTER slices on as many SMs. The blocks send their warps' partial sums into each
// other's shared memory with asynchronous stores that count down an mbarrier in the receiving
// block (`st.async`), so no block waits on more than the partials themselves: a cluster barrier
// with release semantics would fence every outstanding global store first.
#pragma once

#include "common.cuh"

namespace ir_cuda {

// Blocks a row of a team of `team` threads may be spread over: the widest teams (bf16 rows of
// 8192, or of 4096 with a residual) over `tuning::kClusterBlocks` blocks; narrower rows stay in
// one block, where spreading them gains nothing.
__host__ __device__ constexpr int cluster_for_team(int team) {
  return team >= tuning::kClusterTeam ? tuning::kClusterBlocks : 1;
}

// The rank of this block in its cluster of CLUSTER blocks (a 1-D grid of 1-D clusters).
template <int CLUSTER>
__device__ __forceinline__ unsigned cluster_rank() {
  return CLUSTER == 1 ? 0u : blockIdx.x & static_cast<unsigned>(CLUSTER - 1);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(IR_CUDA_HOST_EMULATION)
#define IR_CUDA_CLUSTERS 1
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// `local`'s shared address in the block of rank `rank` of the cluster.
__device__ __forceinline__ uint32_t peer_address(uint32_t local, unsigned rank) {
  uint32_t peer;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(peer) : "r"(local), "r"(rank));
  return peer;
}
__device__ __forceinline__ bool mbarrier_done(uint32_t barrier) {
  uint32_t done;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], 0;\n\t"
      "selp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(done)
      : "r"(barrier)
      : "memory");
  return done != 0;
}
#endif

// The reductions over a row's team of TEAM threads, up to REDUCTIONS of them, where the team is
// held by CLUSTER blocks of TEAM / CLUSTER threads. Teams that may be spread
// (`cluster_for_team`) exchange their warps' partials as below; the others reduce by
// `team_reduce`. Every thread of the cluster calls `begin` once the row's loads are issued (with
// CLUSTER > 1 it sets up the mbarriers and arrives at the cluster barrier that publishes them,
// so that barrier completes while the loads are in flight), then each reduction in the same
// order.
template <int TEAM, int CLUSTER, int REDUCTIONS>
struct RowExchange {
  static constexpr bool kSpreadable = cluster_for_team(TEAM) > 1;
  static_assert(!kSpreadable || (TEAM % (32 * CLUSTER) == 0 && TEAM <= 1024),
                "RowExchange: whole warps in each block");
  static_assert(kSpreadable || CLUSTER == 1, "RowExchange: this team is never spread");
  static constexpr int kWarps = kSpreadable ? TEAM / 32 : 1;

  __device__ static float* partials(int k) {
    alignas(16) __shared__ float partial[REDUCTIONS][kWarps];
    return partial[k];
  }

#if defined(IR_CUDA_CLUSTERS)
  __device__ static uint64_t* barriers() {
    __shared__ uint64_t barrier[REDUCTIONS];
    return barrier;
  }
#endif

  __device__ __forceinline__ void begin() {
#if defined(IR_CUDA_CLUSTERS)
    if constexpr (CLUSTER > 1) {
      if (threadIdx.x == 0) {
#pragma unroll
        for (int k = 0; k < REDUCTIONS; ++k) {
          asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(barriers() + k)) : "memory");
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
      }
      asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    }
#elif defined(__CUDA_ARCH__) && !defined(IR_CUDA_HOST_EMULATION)
    if constexpr (CLUSTER > 1) __trap();  // the host launches clusters on compute capability 9.0+ only
#endif
  }

  // Reductions k, k + 1, ... of the values over the row, at once (their shuffles interleave and
  // one exchange, one wait, serves them all); every thread gets the results. Each warp reduces
  // by shuffles, then every block receives every warp's partial and combines them in one tree
  // over the warp index (neighbours first): the same operations in the same order for any
  // CLUSTER, so a row's result does not depend on whether it was spread (which follows the batch
  // size), nor on which values were reduced with it.
  template <typename... Op>
  __device__ __forceinline__ void reduce(int k, Reducing<Op>... r) {
    if constexpr (!kSpreadable) {
      team_reduce<TEAM>(r...);
    } else {
      exchange(k, r...);
    }
  }

  // Reduction k of `v` by `op`, as above.
  template <typename Op>
  __device__ __forceinline__ float reduce(float v, Op op, int k) {
    reduce(k, reducing(v, op));
    return v;
  }

 private:
  template <typename... Op>
  __device__ __forceinline__ void exchange(int k, Reducing<Op>... r) {
    constexpr int kCount = sizeof...(Op);
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) (r.with_lane(offset), ...);
    const unsigned warp = cluster_rank<CLUSTER>() * (kWarps / CLUSTER) + (threadIdx.x >> 5);
#if defined(IR_CUDA_CLUSTERS)
    if constexpr (CLUSTER > 1) {
      // all the partials count down reduction k's mbarrier
      const uint32_t barrier = shared_address(barriers() + k);
      // the first exchange waits until every block's mbarriers are set up
      if (k == 0) asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
      if (threadIdx.x == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(barrier),
                     "r"(static_cast<uint32_t>(kCount * kWarps * sizeof(float)))
                     : "memory");
      }
      // every lane holds the warp's partials: lane r sends them to block r
      const unsigned rank = threadIdx.x & 31;
      if (rank < CLUSTER) {
        const uint32_t peer_barrier = peer_address(barrier, rank);
        int j = k;
        (send_async(peer_address(shared_address(partials(j++) + warp), rank), r.value, peer_barrier), ...);
      }
      while (!mbarrier_done(barrier)) {
      }
      // the trees from shared memory: a few wide loads, shorter than a chain of shuffles
      float w[kCount][kWarps];
#pragma unroll
      for (int i = 0; i < kWarps; ++i) {
#pragma unroll
        for (int c = 0; c < kCount; ++c) w[c][i] = partials(k + c)[i];
      }
      int c = 0;
      ((r.value = tree_reduce<kWarps>(w[c++], r.op)), ...);
      return;
    }
#endif
    // One block (an emulated cluster's blocks are one pool of threads sharing the partials): the
    // same trees by shuffles, lane i starting from warp i's partial. Each thread reading every
    // partial instead slows wide rows at large batches (shared-memory bandwidth).
    if ((threadIdx.x & 31) == 0) {
      int j = k;
      ((partials(j++)[warp] = r.value), ...);
    }
    __syncthreads();
    int j = k;
    ((r.value = partials(j++)[threadIdx.x & (kWarps - 1)]), ...);
#pragma unroll
    for (int offset = 1; offset < kWarps; offset <<= 1) (r.with_lane(offset), ...);
  }

#if defined(IR_CUDA_CLUSTERS)
  __device__ static __forceinline__ void send_async(uint32_t peer, float v, uint32_t peer_barrier) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(peer),
                 "r"(__float_as_uint(v)), "r"(peer_barrier)
                 : "memory");
  }
#endif
};

}  // namespace ir_cuda
