// The ops over a token's heads: qk_norm_rotary_embedding (the RMSNorm of every query and key
// head, then the rotary embedding), rotary_embedding_write_kv_cache (the rotary embedding, then
// the rotated key and the value stored in their slots of a paged KV cache) and write_kv_cache
// (keys and values stored by slot).
//
// Each head is read once and written once (a key once more into its cache slot): a team of
// threads holds the head in registers, sums its squares with warp shuffles over the team (the
// norm's reduction covers one head, so a team never leaves its warp), normalizes it, rounds it to
// the activations' dtype as the unfused norm hands it on, and rotates it in float32 math (neox:
// an element and its partner in the other half, held by the same thread or exchanged by a
// shuffle; interleaved: pairs inside a vector). The fused ops so move half the bytes of their
// unfused forms (two norms then the rotary embedding; the rotary embedding then the cache write).
//
// A position outside the table gives its token's rotated elements NaN, as rotary_embedding does
// (rotary.cuh); a slot that is negative (padding) or past the cache stores nothing.
#include <ATen/ATen.h>

#include <optional>
#include <type_traits>

#include "rotary.cuh"

namespace ir_cuda {
namespace {

enum HeadOp : int { kQkNorm = 0, kRopeCache = 1 };

// The arguments of the head kernels. Row strides are 32-bit (the host checks); a cache slot's
// offset is 64-bit (slots * slot stride may pass 2^31 elements).
template <typename T, typename C>
struct HeadArgs {
  const T* q;
  const T* k;
  T* q_out;
  T* k_out;
  const void* positions;
  const C* cache;
  const T* q_weight;  // kQkNorm: the heads' weights (null: ones)
  const T* k_weight;
  const T* v;  // kRopeCache: the values and the caches their slots index
  T* k_cache;
  T* v_cache;
  const void* slots;
  int64_t k_slot_stride;
  int64_t v_slot_stride;
  int64_t slot_count;
  int q_stride, k_stride, v_stride, q_out_stride, k_out_stride;
  int max_position;
  int q_heads, k_heads;
  int heads;  // work items a token: the query and key heads, then (kRopeCache) the value heads
  int items;  // tokens * heads
  int head_size, rot, v_head_size;
  int lane_shift;    // the aligned kernel's lanes a head, log2
  int half_vectors;  // the aligned neox kernel's vectors in half the rotary width (a power of two)
  float eps, inv_head_size;
  bool positions64, slots64;
  bool write_rest;  // store the elements past rot too (not where they are already in place)
};

// A token's slot in the KV cache (negative: a padding token, which stores nothing).
__device__ __forceinline__ int64_t load_slot(const void* slots, bool is64, int token) {
  return is64 ? static_cast<const int64_t*>(slots)[token] : static_cast<const int32_t*>(slots)[token];
}

// The usual layout: every head a power of two of 16-byte vectors (2 to 64), held by a team of
// `lanes` = vectors / 2 threads of two vectors each, vector lane + s * lanes in slot s; rows,
// weights, the cache rows and (kRopeCache) the KV cache slots aligned to vectors; the rotary
// width whole vectors, and in neox style its half a power of two of them (`half_vectors`).
// Neox partners lie in the thread's other slot where half the rotary width is a team's slot (the
// whole head rotates), else a shuffle `half_vectors` lanes away brings them. Grid: a flat run of
// teams over tokens x heads, `blockDim.x / lanes` teams a block; every thread of a block takes
// part in the shuffles, teams past the last only computing.
template <typename T, typename C, bool NEOX, int OP>
__global__ void __launch_bounds__(tuning::kHeadThreads) aligned_head_kernel(HeadArgs<T, C> a) {
  await_previous_grid();
  using W = Words<T>;
  constexpr int V = vec_width<T>();
  constexpr bool kNorm = OP == kQkNorm;
  constexpr bool kCache = OP == kRopeCache;
  const int lanes = 1 << a.lane_shift;
  const int lane = static_cast<int>(threadIdx.x) & (lanes - 1);
  const int item = static_cast<int>(blockIdx.x * (blockDim.x >> a.lane_shift) + (threadIdx.x >> a.lane_shift));
  const bool active = item < a.items;
  const int token = item / a.heads;
  const int head = item - token * a.heads;
  const bool is_q = head < a.q_heads;
  const bool is_k = !is_q && head < a.q_heads + a.k_heads;
  const bool rotates = is_q || is_k;  // else a value head, stored as it is
  const int h = is_q ? head : (is_k ? head - a.q_heads : head - a.q_heads - a.k_heads);
  const int64_t at = static_cast<int64_t>(h) * a.head_size;
  const T* in = (is_q   ? a.q + static_cast<int64_t>(token) * a.q_stride
                 : is_k ? a.k + static_cast<int64_t>(token) * a.k_stride
                        : a.v + static_cast<int64_t>(token) * a.v_stride) +
                at;
  const T* weight = kNorm ? (is_q ? a.q_weight : a.k_weight) : nullptr;

  // every load first: the head, its weight, the position and the table's row, the slot
  Words4 x[2] = {fill4(0u), fill4(0u)};
  Words4 w[2] = {fill4(W::kOnes), fill4(W::kOnes)};
  int pos = 0, high = 0;
  int64_t slot = -1;
  if (active) {
    x[0] = load_now(reinterpret_cast<const Words4*>(in) + lane);
    x[1] = load_now(reinterpret_cast<const Words4*>(in) + lane + lanes);
    if (kNorm && weight != nullptr) {
      w[0] = load_now(reinterpret_cast<const Words4*>(weight) + lane);
      w[1] = load_now(reinterpret_cast<const Words4*>(weight) + lane + lanes);
    }
    pos = load_position(a.positions, a.positions64, token);
    high = load_position_high(a.positions, a.positions64, token);
    if constexpr (kCache) slot = load_slot(a.slots, a.slots64, token);
  }
  const unsigned last = static_cast<unsigned>(a.max_position - 1);
  const unsigned row = static_cast<unsigned>(pos) < last ? static_cast<unsigned>(pos) : last;
  const bool in_table = static_cast<unsigned>(pos) == row && high == 0;
  const C* cos = a.cache + static_cast<int64_t>(row) * a.rot;
  const C* sin = cos + a.rot / 2;
  // Which of the thread's two vectors rotate, and their cos and sin, loaded before the norm's
  // arithmetic (they wait on the position's load), so that the reduction hides them. Neox: the
  // rotary width's halves are vectors [0, hv) and [hv, 2 hv); vector `lane` and its partner
  // share a cos and sin, and where hv is a team's slot (`in_thread`) the thread's second vector
  // is that partner.
  const int hv = a.half_vectors;
  const bool in_thread = NEOX && hv == lanes;  // the same for every thread of the launch
  bool rotated[2];
  using Table = VecN<C, NEOX ? V : V / 2>;
  Table c[NEOX ? 1 : 2] = {}, s[NEOX ? 1 : 2] = {};
  if constexpr (NEOX) {
    rotated[0] = active && rotates && lane < 2 * hv;
    rotated[1] = active && rotates && in_thread;
    if (rotated[0]) {
      const int i = (lane & (hv - 1)) * V;
      c[0] = *reinterpret_cast<const Table*>(cos + i);
      s[0] = *reinterpret_cast<const Table*>(sin + i);
    }
  } else {
#pragma unroll
    for (int sl = 0; sl < 2; ++sl) {
      const int u = lane + sl * lanes;
      rotated[sl] = active && rotates && u * V < a.rot;
      if (rotated[sl]) {
        c[sl] = *reinterpret_cast<const Table*>(cos + u * V / 2);
        s[sl] = *reinterpret_cast<const Table*>(sin + u * V / 2);
      }
    }
  }

  float y[2][V];
  unpack_words<T>(x[0], y[0]);
  unpack_words<T>(x[1], y[1]);
  if constexpr (kNorm) {
    // the head's sum of squares: four chains a thread, then the team's shuffles (neighbours
    // first); every thread of the warp shuffles alike
    float chain[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int sl = 0; sl < 2; ++sl) {
#pragma unroll
      for (int e = 0; e < V; ++e) chain[e % 4] = fmaf(y[sl][e], y[sl][e], chain[e % 4]);
    }
    float sum = tree_reduce<4>(chain, SumOp{});
    for (int offset = 1; offset < lanes; offset <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    const float inv_rms = rsqrtf(sum * a.inv_head_size + a.eps);
#pragma unroll
    for (int sl = 0; sl < 2; ++sl) {
      float ws[V];
      unpack_words<T>(w[sl], ws);
#pragma unroll
      for (int e = 0; e < V; ++e) y[sl][e] = (y[sl][e] * inv_rms) * ws[e];
      // rounded to T, as the norm hands the head to the rotary embedding
      x[sl] = pack_words<T>(y[sl]);
      unpack_words<T>(x[sl], y[sl]);
    }
  }

  // the rotation (o: the stored words)
  Words4 o[2] = {x[0], x[1]};
  if constexpr (NEOX) {
    Words4 partner = x[1];
    if (!in_thread) {  // every thread of the warp shuffles alike
#pragma unroll
      for (int k = 0; k < 4; ++k) partner.v[k] = __shfl_xor_sync(0xffffffffu, x[0].v[k], hv);
    }
    float p[V], r[V];
    unpack_words<T>(partner, p);
    const bool first_half = (lane & hv) == 0;
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const float ce = float(c[0].v[e]), se = float(s[0].v[e]);
      // x1 * c - x2 * s in the first half, x2 * c + x1 * s in the second (`rotate`)
      r[e] = first_half ? y[0][e] * ce - p[e] * se : y[0][e] * ce + p[e] * se;
    }
    if (rotated[0]) o[0] = pack_words<T>(r);
    if (rotated[1]) {
#pragma unroll
      for (int e = 0; e < V; ++e) r[e] = y[1][e] * float(c[0].v[e]) + y[0][e] * float(s[0].v[e]);
      o[1] = pack_words<T>(r);
    }
  } else {
#pragma unroll
    for (int sl = 0; sl < 2; ++sl) {
      if (!rotated[sl]) continue;
      float r[V];
#pragma unroll
      for (int e = 0; e < V / 2; ++e) {
        rotate(y[sl][2 * e], y[sl][2 * e + 1], float(c[sl].v[e]), float(s[sl].v[e]), r[2 * e], r[2 * e + 1]);
      }
      o[sl] = pack_words<T>(r);
    }
  }
  if (!active) return;  // no shuffles follow
#pragma unroll
  for (int sl = 0; sl < 2; ++sl) {
    // the block's tokens outside the table: NaN over what rotates (a branch taken by few)
    if (rotated[sl] && !in_table) o[sl] = nan_words<T>();
  }

  const int u0 = lane, u1 = lane + lanes;
  if (rotates) {
    T* out = (is_q ? a.q_out + static_cast<int64_t>(token) * a.q_out_stride
                   : a.k_out + static_cast<int64_t>(token) * a.k_out_stride) +
             at;
    if (rotated[0] || a.write_rest) reinterpret_cast<Words4*>(out)[u0] = o[0];
    if (rotated[1] || a.write_rest) reinterpret_cast<Words4*>(out)[u1] = o[1];
  }
  if constexpr (kCache) {
    if (slot >= 0 && slot < a.slot_count && !is_q) {
      T* cached = (is_k ? a.k_cache + slot * a.k_slot_stride : a.v_cache + slot * a.v_slot_stride) + at;
      reinterpret_cast<Words4*>(cached)[u0] = o[0];
      reinterpret_cast<Words4*>(cached)[u1] = o[1];
    }
  }
}

// Every other layout (unaligned rows, heads of any size, any rotary width): a warp a head, whose
// lanes stride over its elements: the sum of squares, then the pairs (each read, normalized and
// rotated by one lane, so an in-place call reads every element before it is overwritten), then
// the elements past the rotary width. The arithmetic is the aligned kernel's, element by element.
template <typename T, typename C, int OP>
__global__ void __launch_bounds__(tuning::kHeadGenericThreads) generic_head_kernel(HeadArgs<T, C> a, bool neox) {
  await_previous_grid();
  constexpr bool kNorm = OP == kQkNorm;
  constexpr bool kCache = OP == kRopeCache;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int item = static_cast<int>(blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5));
  const bool active = item < a.items;
  const int token = item / a.heads;
  const int head = item - token * a.heads;
  const bool is_q = head < a.q_heads;
  const bool is_k = !is_q && head < a.q_heads + a.k_heads;
  const bool rotates = is_q || is_k;
  const int h = is_q ? head : (is_k ? head - a.q_heads : head - a.q_heads - a.k_heads);
  const int width = rotates ? a.head_size : a.v_head_size;
  const T* in = (is_q   ? a.q + static_cast<int64_t>(token) * a.q_stride
                 : is_k ? a.k + static_cast<int64_t>(token) * a.k_stride
                        : a.v + static_cast<int64_t>(token) * a.v_stride) +
                static_cast<int64_t>(h) * width;
  float inv_rms = 1.f;
  if constexpr (kNorm) {
    float sum = 0.f;
    if (active) {
      for (int i = lane; i < width; i += 32) {
        const float f = float(in[i]);
        sum = fmaf(f, f, sum);
      }
    }
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    inv_rms = rsqrtf(sum * a.inv_head_size + a.eps);
  }
  if (!active) return;  // no shuffles follow
  const T* weight = kNorm ? (is_q ? a.q_weight : a.k_weight) : nullptr;
  // element i of the head as the rotation takes it: normalized and rounded to T (kQkNorm)
  auto value = [&](int i) -> float {
    if constexpr (kNorm) {
      const float y = float(in[i]) * inv_rms;
      return Words<T>::round(weight != nullptr ? y * float(weight[i]) : y);
    } else {
      return float(in[i]);
    }
  };
  T* cached = nullptr;
  if constexpr (kCache) {
    const int64_t slot = load_slot(a.slots, a.slots64, token);
    if (slot >= 0 && slot < a.slot_count && !is_q) {
      cached = (is_k ? a.k_cache + slot * a.k_slot_stride : a.v_cache + slot * a.v_slot_stride) +
               static_cast<int64_t>(h) * width;
    }
  }
  if (!rotates) {  // a value head: into its slot
    if (cached != nullptr) {
      for (int i = lane; i < width; i += 32) cached[i] = in[i];
    }
    return;
  }
  T* out = (is_q ? a.q_out + static_cast<int64_t>(token) * a.q_out_stride
                 : a.k_out + static_cast<int64_t>(token) * a.k_out_stride) +
           static_cast<int64_t>(h) * width;
  const int64_t pos = a.positions64 ? static_cast<const int64_t*>(a.positions)[token]
                                    : static_cast<const int32_t*>(a.positions)[token];
  const bool in_table = pos >= 0 && pos < a.max_position;
  const int half = a.rot / 2;
  const C* cos = a.cache + (in_table ? pos : a.max_position - 1) * a.rot;
  const C* sin = cos + half;
  for (int p = lane; p < half; p += 32) {
    const int i1 = neox ? p : 2 * p;
    const int i2 = neox ? p + half : 2 * p + 1;
    T o1, o2;
    rotate(value(i1), value(i2), table_value(cos[p], in_table), table_value(sin[p], in_table), o1, o2);
    out[i1] = o1;
    out[i2] = o2;
    if (cached != nullptr) {
      cached[i1] = o1;
      cached[i2] = o2;
    }
  }
  for (int i = a.rot + lane; i < width; i += 32) {
    const T v = static_cast<T>(value(i));
    if (a.write_rest) out[i] = v;
    if (cached != nullptr) cached[i] = v;
  }
}

// The tensors of a head op's call.
struct HeadTensors {
  at::Tensor* q_out = nullptr;
  at::Tensor* k_out = nullptr;
  const at::Tensor* positions = nullptr;
  const at::Tensor* q = nullptr;
  const at::Tensor* k = nullptr;
  const at::Tensor* cache = nullptr;
  const at::Tensor* q_weight = nullptr;
  const at::Tensor* k_weight = nullptr;
  const at::Tensor* v = nullptr;
  at::Tensor* k_cache = nullptr;
  at::Tensor* v_cache = nullptr;
  const at::Tensor* slots = nullptr;
  int64_t head_size = 0;
  double epsilon = 0.0;
  bool neox = true;
};

// Host side: a [blocks, block_size, kv_heads, head_size] cache of `rows`' dtype and device whose
// slots are one stride apart and whose heads are contiguous, `rows`' width a slot's; its slot
// stride in elements.
int64_t check_kv_cache(const at::Tensor& cache, const char* name, const at::Tensor& rows, const char* rows_name) {
  TORCH_CHECK(on_kernel_device(cache) && cache.dim() == 4 && cache.scalar_type() == rows.scalar_type(),
              "ir_cuda: ", name, " must be a 4-D [blocks, block_size, kv_heads, head_size] ", kDeviceName,
              " tensor of dtype ", rows.scalar_type(), ", got ", cache.scalar_type(), " ", cache.sizes(), " on ",
              cache.device());
  TORCH_CHECK(cache.size(2) * cache.size(3) == rows.size(1), "ir_cuda: ", name, "'s kv_heads x head_size ",
              cache.size(2), " x ", cache.size(3), " must be ", rows_name, "'s width ", rows.size(1));
  TORCH_CHECK((cache.size(3) <= 1 || cache.stride(3) == 1) && (cache.size(2) <= 1 || cache.stride(2) == cache.size(3)) &&
                  (cache.size(1) <= 1 || cache.stride(0) == cache.size(1) * cache.stride(1)),
              "ir_cuda: ", name, " must have contiguous heads and slots one stride apart, got strides ",
              cache.strides());
  return cache.size(1) > 1 ? cache.stride(1) : cache.stride(0);
}

// Host side: slot_mapping, contiguous int64 or int32, one a token.
void check_slots(const at::Tensor& slots, int64_t tokens) {
  TORCH_CHECK(on_kernel_device(slots) && slots.is_contiguous() && slots.numel() == tokens &&
                  (slots.scalar_type() == at::kLong || slots.scalar_type() == at::kInt),
              "ir_cuda: slot_mapping must be a contiguous int64 or int32 ", kDeviceName, " tensor of ", tokens,
              " elements, got ", slots.scalar_type(), " ", slots.sizes(), " on ", slots.device());
}

// Host side: a head's weight (or none): contiguous, head_size elements of the rows' dtype.
void check_head_weight(const at::Tensor* weight, const char* name, const at::Tensor& x, int64_t head_size) {
  if (weight == nullptr) return;
  TORCH_CHECK(on_kernel_device(*weight) && weight->is_contiguous() && weight->numel() == head_size &&
                  weight->scalar_type() == x.scalar_type(),
              "ir_cuda: ", name, " must be contiguous, of head_size ", head_size, " elements and dtype ",
              x.scalar_type(), ", got ", weight->scalar_type(), " ", weight->sizes());
}

// Whether every row of `t` and its base are aligned to 16 bytes (a null tensor is).
bool vec_rows(const at::Tensor* t) { return t == nullptr || rows_aligned(*t, 16); }

template <typename T, typename C, int OP>
void launch_heads_typed(const HeadTensors& t, cudaStream_t stream) {
  constexpr int V = vec_width<T>();
  const at::Tensor& q = *t.q;
  const at::Tensor& k = *t.k;
  const int64_t tokens = q.size(0);
  HeadArgs<T, C> a{};
  a.q = q.const_data_ptr<T>();
  a.k = k.const_data_ptr<T>();
  a.q_out = t.q_out->data_ptr<T>();
  a.k_out = t.k_out->data_ptr<T>();
  a.q_stride = row_stride(q, "x_query");
  a.k_stride = row_stride(k, "x_key");
  a.q_out_stride = row_stride(*t.q_out, "query_out");
  a.k_out_stride = row_stride(*t.k_out, "key_out");
  a.positions = t.positions->const_data_ptr();
  a.positions64 = t.positions->scalar_type() == at::kLong;
  a.cache = t.cache->const_data_ptr<C>();
  a.max_position = static_cast<int>(t.cache->size(0));
  a.head_size = static_cast<int>(t.head_size);
  a.rot = static_cast<int>(t.cache->size(1));
  a.q_heads = static_cast<int>(q.size(1) / t.head_size);
  a.k_heads = static_cast<int>(k.size(1) / t.head_size);
  a.heads = a.q_heads + a.k_heads;
  a.v_head_size = a.head_size;
  a.write_rest = OP == kQkNorm || t.q_out->data_ptr() != q.data_ptr();
  a.eps = static_cast<float>(t.epsilon);
  a.inv_head_size = 1.f / static_cast<float>(t.head_size);
  if constexpr (OP == kQkNorm) {
    a.q_weight = t.q_weight != nullptr ? t.q_weight->const_data_ptr<T>() : nullptr;
    a.k_weight = t.k_weight != nullptr ? t.k_weight->const_data_ptr<T>() : nullptr;
  } else {
    a.v = t.v->const_data_ptr<T>();
    a.v_stride = row_stride(*t.v, "value");
    a.k_cache = t.k_cache->data_ptr<T>();
    a.v_cache = t.v_cache->data_ptr<T>();
    a.k_slot_stride = t.k_cache->size(1) > 1 ? t.k_cache->stride(1) : t.k_cache->stride(0);
    a.v_slot_stride = t.v_cache->size(1) > 1 ? t.v_cache->stride(1) : t.v_cache->stride(0);
    a.slot_count = t.k_cache->size(0) * t.k_cache->size(1);
    a.slots = t.slots->const_data_ptr();
    a.slots64 = t.slots->scalar_type() == at::kLong;
    a.v_head_size = static_cast<int>(t.v_cache->size(3));
    a.heads += static_cast<int>(t.v_cache->size(2));
  }
  // (a block's teams past the last stay within 32 bits)
  TORCH_CHECK(tokens * a.heads <= std::numeric_limits<int>::max() - tuning::kHeadThreads, "ir_cuda: ", tokens,
              " tokens of ", a.heads, " heads are more heads than the kernels address (2^31 - 1 - ",
              tuning::kHeadThreads, ")");
  a.items = static_cast<int>(tokens * a.heads);

  // the aligned kernel's layout (see `aligned_head_kernel`)
  const int64_t vectors = t.head_size / V;
  const int64_t rot_vectors = a.rot / V;
  const int64_t half_vectors = rot_vectors / 2;
  bool aligned = t.head_size % V == 0 && vectors >= 2 && vectors <= 64 && (vectors & (vectors - 1)) == 0 &&
                 a.rot % V == 0 && vec_rows(t.q) && vec_rows(t.k) && vec_rows(t.q_out) && vec_rows(t.k_out) &&
                 aligned_host(a.cache, static_cast<int64_t>(sizeof(C)) * (t.neox ? V : V / 2));
  if (t.neox) aligned = aligned && a.rot % (2 * V) == 0 && (half_vectors & (half_vectors - 1)) == 0;
  for (const at::Tensor* weight : {t.q_weight, t.k_weight}) {
    aligned = aligned && (weight == nullptr || aligned_host(weight->data_ptr(), 16));
  }
  if constexpr (OP == kRopeCache) {
    aligned = aligned && a.v_head_size == a.head_size && vec_rows(t.v) && aligned_host(a.k_cache, 16) &&
              aligned_host(a.v_cache, 16) && (a.k_slot_stride * static_cast<int64_t>(sizeof(T))) % 16 == 0 &&
              (a.v_slot_stride * static_cast<int64_t>(sizeof(T))) % 16 == 0;
  }
  if (aligned) {
    const int lanes = static_cast<int>(vectors / 2);
    a.lane_shift = log2_of(lanes);
    a.half_vectors = static_cast<int>(half_vectors);
    // smaller blocks in a decode step, so that it spreads over more SMs
    const int threads = tokens <= tuning::kHeadDecodeTokens ? tuning::kHeadDecodeThreads : tuning::kHeadThreads;
    const int64_t teams = threads / lanes;
    const dim3 grid(static_cast<unsigned>((a.items + teams - 1) / teams));
    if (t.neox) {
      launch(aligned_head_kernel<T, C, true, OP>, grid, dim3(threads), stream, a);
    } else {
      launch(aligned_head_kernel<T, C, false, OP>, grid, dim3(threads), stream, a);
    }
    return;
  }
  constexpr int kThreads = tuning::kHeadGenericThreads;
  constexpr int kWarps = kThreads / 32;
  const dim3 grid(static_cast<unsigned>((a.items + kWarps - 1) / kWarps));
  launch(generic_head_kernel<T, C, OP>, grid, dim3(kThreads), stream, a, t.neox);
}

template <typename T, int OP>
void launch_heads_for_cache(const HeadTensors& t, cudaStream_t stream) {
  switch (t.cache->scalar_type()) {
    case at::kFloat:
      return launch_heads_typed<T, float, OP>(t, stream);
    case at::kHalf:
      return launch_heads_typed<T, c10::Half, OP>(t, stream);
    case at::kBFloat16:
      return launch_heads_typed<T, c10::BFloat16, OP>(t, stream);
    default:
      TORCH_CHECK(false, "ir_cuda: cos_sin_cache must be float32, float16 or bfloat16, got ", t.cache->scalar_type());
  }
}

template <int OP>
void launch_heads(const HeadTensors& t) {
  const at::Tensor& q = *t.q;
  const at::Tensor& k = *t.k;
  check_rows(q, "x_query");
  check_rows(k, "x_key");
  check_same(*t.q_out, "query_out", q);
  check_same(*t.k_out, "key_out", k);
  const int64_t tokens = q.size(0);
  TORCH_CHECK(k.size(0) == tokens && k.scalar_type() == q.scalar_type(), "ir_cuda: x_key must have x_query's ",
              tokens, " rows and dtype ", q.scalar_type(), ", got ", k.sizes(), " ", k.scalar_type());
  TORCH_CHECK(t.head_size > 0 && q.size(1) % t.head_size == 0 && k.size(1) % t.head_size == 0,
              "ir_cuda: head_size ", t.head_size, " must divide the widths of x_query (", q.size(1), ") and x_key (",
              k.size(1), ")");
  TORCH_CHECK(q.size(1) <= std::numeric_limits<int>::max() && k.size(1) <= std::numeric_limits<int>::max(),
              "ir_cuda: x_query and x_key rows must have at most 2^31 - 1 elements");
  check_positions_and_table(*t.positions, tokens, *t.cache, t.head_size);
  if constexpr (OP == kQkNorm) {
    check_head_weight(t.q_weight, "q_weight", q, t.head_size);
    check_head_weight(t.k_weight, "k_weight", q, t.head_size);
  } else {
    const at::Tensor& v = *t.v;
    check_rows(v, "value");
    TORCH_CHECK(v.size(0) == tokens && v.scalar_type() == q.scalar_type(), "ir_cuda: value must have x_query's ",
                tokens, " rows and dtype ", q.scalar_type(), ", got ", v.sizes(), " ", v.scalar_type());
    check_kv_cache(*t.k_cache, "key_cache", k, "x_key");
    check_kv_cache(*t.v_cache, "value_cache", v, "value");
    TORCH_CHECK(t.k_cache->size(3) == t.head_size, "ir_cuda: key_cache's head size ", t.k_cache->size(3),
                " must be head_size ", t.head_size);
    TORCH_CHECK(t.v_cache->sizes().slice(0, 3) == t.k_cache->sizes().slice(0, 3),
                "ir_cuda: value_cache must have key_cache's blocks, block size and heads ",
                t.k_cache->sizes().slice(0, 3), ", got ", t.v_cache->sizes());
    check_slots(*t.slots, tokens);
  }
  if (tokens == 0) return;
  const DeviceScope scope(q);
  const cudaStream_t stream = scope.stream;
  IR_CUDA_DISPATCH_FLOAT(q.scalar_type(), "heads", [&] { launch_heads_for_cache<scalar_t, OP>(t, stream); });
}

// write_kv_cache: a flat run of units over tokens x (the key's units, then the value's); a unit
// is a 16-byte vector where every row, cache base and slot stride is aligned to one (VEC), else
// one element. Elements are moved as their bits (BYTES wide): the copy does not depend on the
// float type.
template <int BYTES>
struct Bits;
template <>
struct Bits<2> {
  using type = uint16_t;
};
template <>
struct Bits<4> {
  using type = uint32_t;
};

struct CacheWriteArgs {
  const char* k;
  const char* v;
  char* k_cache;
  char* v_cache;
  const void* slots;
  int64_t k_slot_bytes, v_slot_bytes, slot_count;
  int64_t k_row_bytes, v_row_bytes;
  int k_units, units;  // a token's key units, and all of its units
  int items;           // tokens * units
  bool slots64;
};

template <int BYTES, bool VEC>
__global__ void __launch_bounds__(tuning::kCacheWriteThreads) cache_write_kernel(CacheWriteArgs a) {
  await_previous_grid();
  using Unit = std::conditional_t<VEC, Words4, typename Bits<BYTES>::type>;
  const int w = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (w >= a.items) return;
  const int token = w / a.units;
  const int u = w - token * a.units;
  const int64_t slot = load_slot(a.slots, a.slots64, token);
  if (slot < 0 || slot >= a.slot_count) return;
  const bool is_k = u < a.k_units;
  const int i = is_k ? u : u - a.k_units;
  const auto* from = reinterpret_cast<const Unit*>(is_k ? a.k + token * a.k_row_bytes : a.v + token * a.v_row_bytes);
  auto* to = reinterpret_cast<Unit*>(is_k ? a.k_cache + slot * a.k_slot_bytes : a.v_cache + slot * a.v_slot_bytes);
  to[i] = from[i];
}

void launch_cache_write(const at::Tensor& k, const at::Tensor& v, at::Tensor& k_cache, at::Tensor& v_cache,
                        const at::Tensor& slots) {
  check_rows(k, "key");
  check_rows(v, "value");
  const int64_t tokens = k.size(0);
  TORCH_CHECK(v.size(0) == tokens && v.scalar_type() == k.scalar_type(), "ir_cuda: value must have key's ", tokens,
              " rows and dtype ", k.scalar_type(), ", got ", v.sizes(), " ", v.scalar_type());
  const int64_t k_slot = check_kv_cache(k_cache, "key_cache", k, "key");
  const int64_t v_slot = check_kv_cache(v_cache, "value_cache", v, "value");
  TORCH_CHECK(v_cache.sizes().slice(0, 3) == k_cache.sizes().slice(0, 3),
              "ir_cuda: value_cache must have key_cache's blocks, block size and heads ", k_cache.sizes().slice(0, 3),
              ", got ", v_cache.sizes());
  check_slots(slots, tokens);
  TORCH_CHECK(k.scalar_type() == at::kFloat || k.scalar_type() == at::kHalf || k.scalar_type() == at::kBFloat16,
              "ir_cuda: key must be float32, float16 or bfloat16, got ", k.scalar_type());
  if (tokens == 0 || (k.size(1) == 0 && v.size(1) == 0)) return;
  const int64_t bytes = k.element_size();
  CacheWriteArgs a{};
  a.k = static_cast<const char*>(k.const_data_ptr());
  a.v = static_cast<const char*>(v.const_data_ptr());
  a.k_cache = static_cast<char*>(k_cache.data_ptr());
  a.v_cache = static_cast<char*>(v_cache.data_ptr());
  a.slots = slots.const_data_ptr();
  a.slots64 = slots.scalar_type() == at::kLong;
  a.k_slot_bytes = k_slot * bytes;
  a.v_slot_bytes = v_slot * bytes;
  a.slot_count = k_cache.size(0) * k_cache.size(1);
  a.k_row_bytes = (tokens > 1 ? k.stride(0) : k.size(1)) * bytes;
  a.v_row_bytes = (tokens > 1 ? v.stride(0) : v.size(1)) * bytes;
  const bool vec = (k.size(1) * bytes) % 16 == 0 && (v.size(1) * bytes) % 16 == 0 && rows_aligned(k, 16) &&
                   rows_aligned(v, 16) && aligned_host(a.k_cache, 16) && aligned_host(a.v_cache, 16) &&
                   a.k_slot_bytes % 16 == 0 && a.v_slot_bytes % 16 == 0;
  const int64_t per_unit = vec ? 16 / bytes : 1;
  a.k_units = static_cast<int>(k.size(1) / per_unit);
  const int64_t units = a.k_units + v.size(1) / per_unit;
  // (the last block's threads past the last unit stay within 32 bits)
  TORCH_CHECK(tokens * units <= std::numeric_limits<int>::max() - tuning::kCacheWriteThreads, "ir_cuda: ", tokens,
              " tokens of ", units, " units are more than the cache write addresses (2^31 - 1 - ",
              tuning::kCacheWriteThreads, ")");
  a.units = static_cast<int>(units);
  a.items = static_cast<int>(tokens * units);
  const DeviceScope scope(k);
  constexpr int kThreads = tuning::kCacheWriteThreads;
  const dim3 grid(static_cast<unsigned>((a.items + kThreads - 1) / kThreads));
  auto run = [&](auto kernel) { launch(kernel, grid, dim3(kThreads), scope.stream, a); };
  if (bytes == 2) {
    vec ? run(cache_write_kernel<2, true>) : run(cache_write_kernel<2, false>);
  } else {
    vec ? run(cache_write_kernel<4, true>) : run(cache_write_kernel<4, false>);
  }
}

}  // namespace

void qk_norm_rotary_embedding_out(at::Tensor& query_out, at::Tensor& key_out, const at::Tensor& positions,
                                  const at::Tensor& query, const at::Tensor& key,
                                  const std::optional<at::Tensor>& q_weight,
                                  const std::optional<at::Tensor>& k_weight, double epsilon, int64_t head_size,
                                  const at::Tensor& cos_sin_cache, bool is_neox_style) {
  HeadTensors t;
  t.q_out = &query_out;
  t.k_out = &key_out;
  t.positions = &positions;
  t.q = &query;
  t.k = &key;
  t.cache = &cos_sin_cache;
  t.q_weight = q_weight.has_value() ? &*q_weight : nullptr;
  t.k_weight = k_weight.has_value() ? &*k_weight : nullptr;
  t.head_size = head_size;
  t.epsilon = epsilon;
  t.neox = is_neox_style;
  launch_heads<kQkNorm>(t);
}

void rotary_embedding_write_kv_cache_out(at::Tensor& query_out, at::Tensor& key_out, const at::Tensor& positions,
                                         const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                                         int64_t head_size, const at::Tensor& cos_sin_cache, bool is_neox_style,
                                         at::Tensor& key_cache, at::Tensor& value_cache,
                                         const at::Tensor& slot_mapping) {
  HeadTensors t;
  t.q_out = &query_out;
  t.k_out = &key_out;
  t.positions = &positions;
  t.q = &query;
  t.k = &key;
  t.cache = &cos_sin_cache;
  t.v = &value;
  t.k_cache = &key_cache;
  t.v_cache = &value_cache;
  t.slots = &slot_mapping;
  t.head_size = head_size;
  t.neox = is_neox_style;
  launch_heads<kRopeCache>(t);
}

void qk_norm_rotary_embedding_inplace(at::Tensor& query, at::Tensor& key, const at::Tensor& positions,
                                      const std::optional<at::Tensor>& q_weight,
                                      const std::optional<at::Tensor>& k_weight, double epsilon, int64_t head_size,
                                      const at::Tensor& cos_sin_cache, bool is_neox_style) {
  qk_norm_rotary_embedding_out(query, key, positions, query, key, q_weight, k_weight, epsilon, head_size,
                               cos_sin_cache, is_neox_style);
}

void rotary_embedding_write_kv_cache_inplace(at::Tensor& query, at::Tensor& key, const at::Tensor& positions,
                                             const at::Tensor& value, int64_t head_size,
                                             const at::Tensor& cos_sin_cache, bool is_neox_style,
                                             at::Tensor& key_cache, at::Tensor& value_cache,
                                             const at::Tensor& slot_mapping) {
  rotary_embedding_write_kv_cache_out(query, key, positions, query, key, value, head_size, cos_sin_cache,
                                      is_neox_style, key_cache, value_cache, slot_mapping);
}

void write_kv_cache(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache, at::Tensor& value_cache,
                    const at::Tensor& slot_mapping) {
  launch_cache_write(key, value, key_cache, value_cache, slot_mapping);
}

}  // namespace ir_cuda
