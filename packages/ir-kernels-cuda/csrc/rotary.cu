// rotary_embedding: rotates the first rotary_dim elements of every query and key head by the
// token's position, neox style (the two halves) or interleaved (pairs), in float32 math.
// Out-of-place (elements past rotary_dim copied) or in place (out == in).
//
// A position outside the table (negative, or >= max_position) reads the table's last row in its
// place, and that token's rotated elements come out NaN: checking the positions on the host
// would wait for the GPU, and NaN shows the mistake where reading past the table would have
// given plausible values or a fault. The generic kernel takes NaN for the cos and sin; the
// aligned kernel, the usual path, stores NaN over its results after storing them: nothing then
// waits on the check, where taking NaN per value slows the rate-bound shapes and branching
// before the table's loads slows decode sizes.
#include <ATen/ATen.h>

#include <array>

#include "rotary.cuh"

namespace ir_cuda {
namespace {

template <typename T, typename C>
struct RotaryArgs {
  T* q_out;
  T* k_out;
  const T* q;
  const T* k;
  int q_stride, k_stride, q_out_stride, k_out_stride;  // 32-bit (the host checks)
  const void* positions;
  bool positions64;
  const C* cache;
  int max_position;  // the table's rows (the host checks that they fit)
  int q_heads, k_heads, head_size, rot;
  bool vec;        // whole units of V elements: aligned rows, heads and cache rows
  bool copy_rest;  // out-of-place with rot < head_size: copy the elements past rot
  unsigned blocks_per_token;
};

// Grid: tokens x blocks over the token's work (`flat_grid`). A unit of work is one pair on the
// scalar path,
// V pairs (neox: V from each half) or V elements (interleaved: V / 2 pairs) on the vector path.
template <typename T, typename C, bool NEOX>
__global__ void rotary_kernel(RotaryArgs<T, C> a) {
  await_previous_grid();
  constexpr int V = vec_width<T>();
  const FlatBlock block(a.blocks_per_token);
  const unsigned token_block = block.column;
  const int64_t token = block.row;
  const int64_t pos = a.positions64 ? static_cast<const int64_t*>(a.positions)[token]
                                    : static_cast<const int32_t*>(a.positions)[token];
  const bool in_table = pos >= 0 && pos < a.max_position;
  const int half = a.rot / 2;
  const C* cos = a.cache + (in_table ? pos : a.max_position - 1) * a.rot;
  const C* sin = cos + half;
  const int per_head = a.vec ? (NEOX ? half / V : a.rot / V) : half;
  // a token's work is small (heads x half the rotary width): 32-bit indices, as 64-bit
  // division is a long subroutine on the GPU
  const int total = (a.q_heads + a.k_heads) * per_head;
  const int stride = static_cast<int>(a.blocks_per_token * blockDim.x);
  for (int w = static_cast<int>(token_block * blockDim.x + threadIdx.x); w < total; w += stride) {
    const int head = w / per_head;
    const int u = w - head * per_head;
    const bool is_q = head < a.q_heads;
    const int h = is_q ? head : head - a.q_heads;
    const T* in = (is_q ? a.q + token * a.q_stride : a.k + token * a.k_stride) + h * a.head_size;
    T* out = (is_q ? a.q_out + token * a.q_out_stride : a.k_out + token * a.k_out_stride) +
             h * a.head_size;
    if (a.vec && NEOX) {
      const int i = u * V;
      const auto x1 = *reinterpret_cast<const VecN<T, V>*>(in + i);
      const auto x2 = *reinterpret_cast<const VecN<T, V>*>(in + half + i);
      const auto c = *reinterpret_cast<const VecN<C, V>*>(cos + i);
      const auto s = *reinterpret_cast<const VecN<C, V>*>(sin + i);
      VecN<T, V> o1, o2;
#pragma unroll
      for (int e = 0; e < V; ++e) {
        rotate(float(x1.v[e]), float(x2.v[e]), table_value(c.v[e], in_table), table_value(s.v[e], in_table),
               o1.v[e], o2.v[e]);
      }
      *reinterpret_cast<VecN<T, V>*>(out + i) = o1;
      *reinterpret_cast<VecN<T, V>*>(out + half + i) = o2;
    } else if (a.vec) {
      const int i = u * V;
      const auto xv = *reinterpret_cast<const VecN<T, V>*>(in + i);
      const auto c = *reinterpret_cast<const VecN<C, V / 2>*>(cos + i / 2);
      const auto s = *reinterpret_cast<const VecN<C, V / 2>*>(sin + i / 2);
      VecN<T, V> o;
#pragma unroll
      for (int e = 0; e < V / 2; ++e) {
        rotate(float(xv.v[2 * e]), float(xv.v[2 * e + 1]), table_value(c.v[e], in_table),
               table_value(s.v[e], in_table), o.v[2 * e], o.v[2 * e + 1]);
      }
      *reinterpret_cast<VecN<T, V>*>(out + i) = o;
    } else {
      const int i1 = NEOX ? u : 2 * u;
      const int i2 = NEOX ? u + half : 2 * u + 1;
      rotate(float(in[i1]), float(in[i2]), table_value(cos[u], in_table), table_value(sin[u], in_table),
             out[i1], out[i2]);
    }
  }
  if (a.copy_rest && token_block == 0) {
    const int rest = a.head_size - a.rot;
    const int count = (a.q_heads + a.k_heads) * rest;
    for (int w = static_cast<int>(threadIdx.x); w < count; w += static_cast<int>(blockDim.x)) {
      const int head = w / rest;
      const int e = a.rot + (w - head * rest);
      const bool is_q = head < a.q_heads;
      const int h = is_q ? head : head - a.q_heads;
      const int64_t at = static_cast<int64_t>(h) * a.head_size + e;
      if (is_q) {
        a.q_out[token * a.q_out_stride + at] = a.q[token * a.q_stride + at];
      } else {
        a.k_out[token * a.k_out_stride + at] = a.k[token * a.k_stride + at];
      }
    }
  }
}

// The usual layout on its own path: whole vectors everywhere (`vec`), a power-of-two number of
// units a head, and nothing past rot to copy. Grid: (blocks over a token's units, tokens), one
// unit a thread; the head by a shift instead of the generic kernel's division, 32-bit row
// strides (the host checks), and no loop. The arithmetic is `rotary_kernel`'s.
template <typename T, typename C, bool NEOX>
__global__ void aligned_rotary_kernel(RotaryArgs<T, C> a, int unit_shift) {
  await_previous_grid();
  constexpr int V = vec_width<T>();
  const int token = static_cast<int>(blockIdx.y);
  const int w = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (w >= (a.q_heads + a.k_heads) << unit_shift) return;
  const int head = w >> unit_shift;
  const int i = (w & ((1 << unit_shift) - 1)) * V;  // the unit's first element in its head
  const bool is_q = head < a.q_heads;
  const int h = is_q ? head : head - a.q_heads;
  const int at = h * a.head_size + i;
  const T* in = (is_q ? a.q : a.k) + static_cast<int64_t>(token) * (is_q ? a.q_stride : a.k_stride) + at;
  T* out = (is_q ? a.q_out : a.k_out) + static_cast<int64_t>(token) * (is_q ? a.q_out_stride : a.k_out_stride) + at;
  const int half = a.rot / 2;
  // the activations' loads are issued first (`load_now`): they do not wait for the position,
  // whose load the cache rows' addresses need
  const Words4 x1 = load_now(reinterpret_cast<const Words4*>(in));
  const Words4 x2 = NEOX ? load_now(reinterpret_cast<const Words4*>(in + half)) : x1;
  const int pos = load_position(a.positions, a.positions64, token);
  const int high = load_position_high(a.positions, a.positions64, token);
  // the row read: the position's, or the table's last where the position lies outside it, so
  // that nothing waits on the check, made after the stores
  const unsigned last = static_cast<unsigned>(a.max_position - 1);
  const unsigned row = static_cast<unsigned>(pos) < last ? static_cast<unsigned>(pos) : last;
  const bool in_table = static_cast<unsigned>(pos) == row && high == 0;
  const C* cos = a.cache + static_cast<int64_t>(row) * a.rot;
  const C* sin = cos + half;
  float f1[V], f2[V];
  unpack_words<T>(x1, f1);
  if constexpr (NEOX) {
    unpack_words<T>(x2, f2);
    const auto c = *reinterpret_cast<const VecN<C, V>*>(cos + i);
    const auto s = *reinterpret_cast<const VecN<C, V>*>(sin + i);
    float o1[V], o2[V];
#pragma unroll
    for (int e = 0; e < V; ++e) {
      rotate(f1[e], f2[e], float(c.v[e]), float(s.v[e]), o1[e], o2[e]);
    }
    *reinterpret_cast<Words4*>(out) = pack_words<T>(o1);
    *reinterpret_cast<Words4*>(out + half) = pack_words<T>(o2);
    if (!in_table) {
      // the block's one token lies outside the table (the same branch in every thread)
      *reinterpret_cast<Words4*>(out) = nan_words<T>();
      *reinterpret_cast<Words4*>(out + half) = nan_words<T>();
    }
  } else {
    const auto c = *reinterpret_cast<const VecN<C, V / 2>*>(cos + i / 2);
    const auto s = *reinterpret_cast<const VecN<C, V / 2>*>(sin + i / 2);
    float o[V];
#pragma unroll
    for (int e = 0; e < V / 2; ++e) {
      rotate(f1[2 * e], f1[2 * e + 1], float(c.v[e]), float(s.v[e]), o[2 * e], o[2 * e + 1]);
    }
    *reinterpret_cast<Words4*>(out) = pack_words<T>(o);
    if (!in_table) *reinterpret_cast<Words4*>(out) = nan_words<T>();
  }
}

template <typename T, typename C>
void launch_typed(at::Tensor& q_out, at::Tensor& k_out, const at::Tensor& positions,
                  const at::Tensor& q, const at::Tensor& k, int64_t head_size,
                  const at::Tensor& cache, bool is_neox, cudaStream_t stream) {
  constexpr int V = vec_width<T>();
  RotaryArgs<T, C> a{};
  a.q_out = q_out.data_ptr<T>();
  a.k_out = k_out.data_ptr<T>();
  a.q = q.const_data_ptr<T>();
  a.k = k.const_data_ptr<T>();
  a.q_stride = row_stride(q, "query");
  a.k_stride = row_stride(k, "key");
  a.q_out_stride = row_stride(q_out, "query_out");
  a.k_out_stride = row_stride(k_out, "key_out");
  a.positions = positions.const_data_ptr();
  a.positions64 = positions.scalar_type() == at::kLong;
  a.cache = cache.const_data_ptr<C>();
  a.max_position = static_cast<int>(cache.size(0));
  a.q_heads = static_cast<int>(q.size(1) / head_size);
  a.k_heads = static_cast<int>(k.size(1) / head_size);
  a.head_size = static_cast<int>(head_size);
  a.rot = static_cast<int>(cache.size(1));
  const int64_t vec_bytes = static_cast<int64_t>(sizeof(T)) * V;
  bool vec_rows = head_size % V == 0;
  const std::array<const at::Tensor*, 4> rows{&q, &k, &q_out, &k_out};
  for (const at::Tensor* t : rows) vec_rows = vec_rows && rows_aligned(*t, vec_bytes);
  const int unit = is_neox ? 2 * V : V;
  const int64_t cache_vec = static_cast<int64_t>(sizeof(C)) * (is_neox ? V : V / 2);
  a.vec = vec_rows && a.rot % unit == 0 && aligned_host(a.cache, cache_vec);
  a.copy_rest = a.rot < head_size && q_out.data_ptr() != q.data_ptr();
  const int half = a.rot / 2;
  const int per_head = a.vec ? (is_neox ? half / V : a.rot / V) : half;
  const int64_t total = static_cast<int64_t>(a.q_heads + a.k_heads) * per_head;
  const int64_t tokens = q.size(0);
  if (a.vec && !a.copy_rest && (per_head & (per_head - 1)) == 0 && tokens <= 65535) {
    // one unit a thread; smaller blocks in a decode step, so that it spreads over more SMs
    const int64_t cap =
        tokens <= tuning::kRotaryDecodeTokens ? tuning::kRotaryDecodeThreads : tuning::kRotaryThreads;
    const int64_t blocks = (total + cap - 1) / cap;
    const int64_t threads = ((total + blocks - 1) / blocks + 31) / 32 * 32;
    const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(tokens));
    if (is_neox) {
      launch(aligned_rotary_kernel<T, C, true>, grid, dim3(static_cast<unsigned>(threads)), stream, a,
             log2_of(per_head));
    } else {
      launch(aligned_rotary_kernel<T, C, false>, grid, dim3(static_cast<unsigned>(threads)), stream, a,
             log2_of(per_head));
    }
    return;
  }
  constexpr int kThreads = tuning::kRotaryGenericThreads;
  // several blocks a token, so that a decode step spreads over the chip
  constexpr int64_t kMaxBlocks = tuning::kRotaryGenericBlocksPerToken;
  const int64_t per_token = (total + kThreads - 1) / kThreads;
  a.blocks_per_token = static_cast<unsigned>(per_token < 1 ? 1 : (per_token < kMaxBlocks ? per_token : kMaxBlocks));
  const dim3 grid = flat_grid(q.size(0), a.blocks_per_token);
  if (is_neox) {
    launch(rotary_kernel<T, C, true>, grid, dim3(kThreads), stream, a);
  } else {
    launch(rotary_kernel<T, C, false>, grid, dim3(kThreads), stream, a);
  }
}

template <typename T>
void launch_for_cache(at::Tensor& q_out, at::Tensor& k_out, const at::Tensor& positions,
                      const at::Tensor& q, const at::Tensor& k, int64_t head_size,
                      const at::Tensor& cache, bool is_neox, cudaStream_t stream) {
  switch (cache.scalar_type()) {
    case at::kFloat:
      return launch_typed<T, float>(q_out, k_out, positions, q, k, head_size, cache, is_neox, stream);
    case at::kHalf:
      return launch_typed<T, c10::Half>(q_out, k_out, positions, q, k, head_size, cache, is_neox, stream);
    case at::kBFloat16:
      return launch_typed<T, c10::BFloat16>(q_out, k_out, positions, q, k, head_size, cache, is_neox, stream);
    default:
      TORCH_CHECK(false, "ir_cuda: cos_sin_cache must be float32, float16 or bfloat16, got ",
                  cache.scalar_type());
  }
}

void launch_rotary(at::Tensor& q_out, at::Tensor& k_out, const at::Tensor& positions,
                   const at::Tensor& q, const at::Tensor& k, int64_t head_size,
                   const at::Tensor& cache, bool is_neox) {
  check_rows(q, "query");
  check_rows(k, "key");
  check_same(q_out, "query_out", q);
  check_same(k_out, "key_out", k);
  const int64_t tokens = q.size(0);
  TORCH_CHECK(k.size(0) == tokens && k.scalar_type() == q.scalar_type(),
              "ir_cuda: key must have query's rows and dtype");
  TORCH_CHECK(head_size > 0 && q.size(1) % head_size == 0 && k.size(1) % head_size == 0,
              "ir_cuda: head_size ", head_size, " must divide the query and key widths");
  check_positions_and_table(positions, tokens, cache, head_size);
  TORCH_CHECK(q.size(1) <= std::numeric_limits<int>::max() && k.size(1) <= std::numeric_limits<int>::max(),
              "ir_cuda: query and key rows must have at most 2^31 - 1 elements");
  if (tokens == 0) return;
  const DeviceScope scope(q);
  const cudaStream_t stream = scope.stream;
  switch (q.scalar_type()) {
    case at::kFloat:
      launch_for_cache<float>(q_out, k_out, positions, q, k, head_size, cache, is_neox, stream);
      break;
    case at::kHalf:
      launch_for_cache<c10::Half>(q_out, k_out, positions, q, k, head_size, cache, is_neox, stream);
      break;
    case at::kBFloat16:
      launch_for_cache<c10::BFloat16>(q_out, k_out, positions, q, k, head_size, cache, is_neox, stream);
      break;
    default:
      TORCH_CHECK(false, "ir_cuda: query must be float32, float16 or bfloat16, got ", q.scalar_type());
  }
}

}  // namespace

void rotary_embedding_out(at::Tensor& query_out, at::Tensor& key_out, const at::Tensor& positions,
                          const at::Tensor& query, const at::Tensor& key, int64_t head_size,
                          const at::Tensor& cos_sin_cache, bool is_neox_style) {
  launch_rotary(query_out, key_out, positions, query, key, head_size, cos_sin_cache,
                is_neox_style);
}

void rotary_embedding_inplace(at::Tensor& query, at::Tensor& key, const at::Tensor& positions,
                              int64_t head_size, const at::Tensor& cos_sin_cache,
                              bool is_neox_style) {
  launch_rotary(query, key, positions, query, key, head_size, cos_sin_cache, is_neox_style);
}

}  // namespace ir_cuda
