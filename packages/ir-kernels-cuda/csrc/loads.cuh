// Loads whose place and cache policy the kernels choose: issued where written (`load_now`),
// prefetched into L1, or with an L2 eviction policy.
#pragma once

#include "words.cuh"

namespace ir_cuda {

// A load of N words that stays where it is written in the PTX. NVVM otherwise sinks a load next
// to its first use to save registers: after the gate's erf in gelu_and_mul, the up half's load
// waited for that math and cost a second memory round trip. ptxas still schedules it: it too
// issues a load shortly before its first use (see the row kernels' x * w).
template <int N>
__device__ __forceinline__ WordsN<N> load_now(const WordsN<N>* p) {
#if defined(__CUDA_ARCH__)
  WordsN<N> v;
  if constexpr (N == 4) {
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.v[0]), "=r"(v.v[1]), "=r"(v.v[2]), "=r"(v.v[3])
                 : "l"(p));
  } else if constexpr (N == 2) {
    asm volatile("ld.global.v2.u32 {%0, %1}, [%2];" : "=r"(v.v[0]), "=r"(v.v[1]) : "l"(p));
  } else {
    static_assert(N == 1, "load_now: 1, 2 or 4 words");
    asm volatile("ld.global.u32 %0, [%1];" : "=r"(v.v[0]) : "l"(p));
  }
  return v;
#else
  return *p;
#endif
}

// A float loaded where it is written (`load_now`): a scale the row's end needs. Its own asm
// rather than a one-word `load_now`, which allocates registers differently in some of the
// kernels.
__device__ __forceinline__ float load_now(const float* p) {
#if defined(__CUDA_ARCH__)
  float v;
  asm volatile("ld.global.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
#else
  return *p;
#endif
}

// Asks for `p`'s line in L1 now. ptxas schedules a load just before its first use, and a
// scale first used after a row's reduction was loaded there: a round trip to L2 between the
// reduction and the first store. Prefetched at the start, that load finds the line in L1.
__device__ __forceinline__ void prefetch_l1(const void* p) {
#if defined(__CUDA_ARCH__)
  asm volatile("prefetch.global.L1 [%0];" : : "l"(p));
#else
  (void)p;
#endif
}

// A 16-byte load where `in_row` (else zeros) with an L2 eviction policy on the access (and the
// same hint in L1), as Triton's `eviction_policy`. Evict-first: for rows read once by an op
// whose bytes just exceed the L2, so that they do not push out the lines the next call reads.
// Evict-last: for rows read again from L2 after their reduction (`RELOAD` in
// norm_kernels.cuh), so that the lines stay until then. Predicated inside the asm, as the
// compiler predicates a plain load (it branches around an asm). The "memory" clobber keeps it
// ahead of the stores that follow it in the program (an in-place op writes over what it
// loaded).
template <bool EVICT_LAST>
__device__ __forceinline__ Words4 load_with_eviction(const Words4* p, bool in_row) {
#if defined(__CUDA_ARCH__)
  Words4 v{};
  uint64_t policy;
  // the hint is part of each instruction's text: one asm pair per policy
#define IR_CUDA_LOAD_WITH_EVICTION(HINT)                                                    \
  asm volatile("createpolicy.fractional.L2::" HINT ".b64 %0, 1.0;" : "=l"(policy));         \
  asm volatile(                                                                            \
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %6, 0;\n\t"                                     \
      "@p ld.global.L1::" HINT ".L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n\t}"   \
      : "+r"(v.v[0]), "+r"(v.v[1]), "+r"(v.v[2]), "+r"(v.v[3])                             \
      : "l"(p), "l"(policy), "r"(static_cast<int>(in_row))                                  \
      : "memory")
  if constexpr (EVICT_LAST) {
    IR_CUDA_LOAD_WITH_EVICTION("evict_last");
  } else {
    IR_CUDA_LOAD_WITH_EVICTION("evict_first");
  }
#undef IR_CUDA_LOAD_WITH_EVICTION
  return v;
#else
  return in_row ? *p : Words4{};
#endif
}

__device__ __forceinline__ Words4 load_evict_first(const Words4* p, bool in_row) {
  return load_with_eviction<false>(p, in_row);
}

__device__ __forceinline__ Words4 load_evict_last(const Words4* p, bool in_row) {
  return load_with_eviction<true>(p, in_row);
}

__device__ __forceinline__ Words4 fill4(uint32_t word) {
  Words4 v;
#pragma unroll
  for (int w = 0; w < 4; ++w) v.v[w] = word;
  return v;
}

}  // namespace ir_cuda
