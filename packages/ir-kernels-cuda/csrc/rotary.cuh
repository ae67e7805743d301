// The rotary embedding's arithmetic and its reads of positions and the cos / sin table, which
// the rotary kernels (rotary.cu) and the kernels over a token's heads (heads.cu) share.
//
// A position outside the table (negative, or >= max_position) reads the table's last row in its
// place, and that token's rotated elements come out NaN (see rotary.cu).
#pragma once

#include "common.cuh"

namespace ir_cuda {

// What a position outside the table makes of its token's rotated elements.
__device__ __forceinline__ float quiet_nan() { return bits_to_float(0x7fc00000u); }

// A cos or sin from the table as float; NaN where the token's position lies outside it.
template <typename C>
__device__ __forceinline__ float table_value(C v, bool in_table) {
  return in_table ? float(v) : quiet_nan();
}

template <typename T>
__device__ __forceinline__ void rotate(float x1, float x2, float c, float s, T& o1, T& o2) {
  o1 = static_cast<T>(x1 * c - x2 * s);
  o2 = static_cast<T>(x2 * c + x1 * s);
}

// A token's position from int64 or int32 positions as one 32-bit load: an int64 position's
// low word (little-endian; positions index a cache, far below 2^31). One load and no select
// between widths before the cache row's address.
__device__ __forceinline__ int load_position(const void* positions, bool is64, int token) {
  return static_cast<const int32_t*>(positions)[is64 ? 2 * token : token];
}

// An int64 position's high word (0 for int32 positions): loaded apart from the low word, as
// only the check that the position lies in the table waits for it, not the cache row's address.
__device__ __forceinline__ int load_position_high(const void* positions, bool is64, int token) {
  return is64 ? static_cast<const int32_t*>(positions)[2 * token + 1] : 0;
}

// A vector of NaN elements of T (a unit of a token whose position lies outside the table).
template <typename T>
__device__ __forceinline__ Words4 nan_words() {
  float nan[vec_width<T>()];
#pragma unroll
  for (int e = 0; e < vec_width<T>(); ++e) nan[e] = quiet_nan();
  return pack_words<T>(nan);
}

// Host side: `positions` (contiguous int64 or int32, one a token) and `cache` (a contiguous
// [max_position, rotary_dim] table of 1 to 2^31 - 1 rows, an even rotary_dim <= head_size).
inline void check_positions_and_table(const at::Tensor& positions, int64_t tokens, const at::Tensor& cache,
                                      int64_t head_size) {
  TORCH_CHECK(on_kernel_device(positions) && positions.is_contiguous() && positions.numel() == tokens &&
                  (positions.scalar_type() == at::kLong || positions.scalar_type() == at::kInt),
              "ir_cuda: positions must be a contiguous int64 or int32 ", kDeviceName, " tensor of ", tokens,
              " elements, got ", positions.scalar_type(), " ", positions.sizes(), " on ", positions.device());
  TORCH_CHECK(on_kernel_device(cache) && cache.dim() == 2 && cache.is_contiguous() &&
                  cache.size(1) % 2 == 0 && cache.size(1) <= head_size && cache.size(1) > 0,
              "ir_cuda: cos_sin_cache must be a contiguous [max_position, rotary_dim] tensor with "
              "an even rotary_dim <= head_size ", head_size, ", got sizes ", cache.sizes());
  TORCH_CHECK(cache.size(0) > 0 && cache.size(0) <= std::numeric_limits<int>::max(),
              "ir_cuda: cos_sin_cache must have 1 to 2^31 - 1 rows (positions), got ", cache.size(0));
}

}  // namespace ir_cuda
