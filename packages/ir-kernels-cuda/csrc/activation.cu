// Elementwise kernels: silu_and_mul and gelu_and_mul (out[r, i] = act(x[r, i]) * x[r, d + i]),
// optionally followed by static fp8 quantization, and static fp8 quantization alone; and
// silu_and_mul followed by group fp8 quantization, whose kernels give each group a team.
// Float32 math; a gated result is rounded to the input dtype before it is quantized, as the
// unfused ops would.
#include <ATen/ATen.h>

#include <type_traits>
#include <utility>

#include "common.cuh"

namespace ir_cuda {
namespace {

enum Activation : int { kIdentity = 0, kSilu = 1, kGelu = 2, kGeluTanh = 3 };

// Outputs up to which an elementwise launch counts as decode-sized (latency-bound).
constexpr int64_t kDecodeOutputs = tuning::kDecodeOutputs;
// Batches under this many rows count as few: the elementwise launches take smaller blocks for
// them, and the gated ops keep their shorter chains a thread up to more outputs (below).
constexpr int64_t kFewElementwiseRows = tuning::kFewElementwiseRows;

// 32-bit words a thread for `elements` elements of T a thread, at most a 16-byte vector.
template <typename T>
constexpr int words_for(int elements) {
  return (elements < vec_width<T>() ? elements : vec_width<T>()) / Words<T>::kPerWord;
}

// Every block of `aligned_elementwise_kernel` fits its launch bounds.
constexpr bool fits_aligned_bounds(int threads) { return threads <= tuning::kAlignedGateMaxThreads; }
static_assert(fits_aligned_bounds(tuning::kDecodeThreads) && fits_aligned_bounds(tuning::kSiluFewRowsThreads) &&
                  fits_aligned_bounds(tuning::kGeluFewRowsThreads) && fits_aligned_bounds(tuning::kStaticL2Threads) &&
                  fits_aligned_bounds(tuning::kGateFewRowsThreads) && fits_aligned_bounds(tuning::kGateThreads) &&
                  fits_aligned_bounds(tuning::kStreamedSiluThreads[kShallowLoads]) &&
                  fits_aligned_bounds(tuning::kStreamedSiluThreads[kDeepLoads]) &&
                  fits_aligned_bounds(tuning::kStreamedGelu16Threads[kShallowLoads]) &&
                  fits_aligned_bounds(tuning::kStreamedGelu16Threads[kDeepLoads]),
              "tuning.cuh: a block of the aligned elementwise kernel past its launch bounds");

// Phi(v), the standard normal distribution function, from its smaller tail
// Phi(-|v|) = exp(-v^2 / 2) * t * P(t), t = 1 / (1 + 0.253 |v|), as Triton's
// `pointwise_kernels._normal_cdf` (coefficients fitted by `benchmarks/kernels/gelu_tail_fit.py`):
// relative error in float32 under 1e-6 for v >= -4, where the erf form cancels, in two
// special-function instructions and seven multiply-adds with constant operands (erff selects
// each of its coefficients per element).
template <bool FAST>
__device__ __forceinline__ float normal_cdf(float v) {
  const float y = 1.f + 0.253f * fabsf(v);
  const float t = FAST ? reciprocal_ftz(y) : 1.f / y;
  float p = fmaf(-0.08910422795873038f, t, 0.3189987511370202f);
  p = fmaf(p, t, -0.2372794613111226f);
  p = fmaf(p, t, 0.2639313266235591f);
  p = fmaf(p, t, 0.03027961429555079f);
  p = fmaf(p, t, 0.11323821113610145f);
  p = fmaf(p, t, 0.09993581694921742f);
  // exp(-v^2 / 2) = 2^(-v^2 / (2 ln 2))
  const float x = v * v * -0.7213475204444817f;
  const float tail = t * p * (FAST ? exp2_ftz(x) : exp2f(x));
  return v >= 0.f ? 1.f - tail : tail;
}

// FAST: the hardware's approximate exponential and division, for 16-bit inputs, whose rounding
// (2^-8 or 2^-11 relative) is far coarser than the approximation's few float32 ulps.
template <int ACT, bool FAST>
__device__ __forceinline__ float activate(float v) {
  if constexpr (ACT == kSilu) {
    if constexpr (FAST) return __fdividef(v, 1.f + exp2_ftz(v * -1.4426950408889634f));
    return v / (1.f + expf(-v));
  } else if constexpr (ACT == kGelu) {
    return v * normal_cdf<FAST>(v);
  } else if constexpr (ACT == kGeluTanh) {
    const float inner = 0.79788456080286536f * (v + 0.044715f * v * v * v);
    return 0.5f * v * (1.f + tanhf(inner));
  } else {
    return v;
  }
}

template <typename T, int ACT, bool QUANT>
struct Elementwise {
  static constexpr bool kGated = ACT != kIdentity;

  // The output value of one element (a T value, or fp8 bits when quantizing).
  static constexpr bool kFast = sizeof(T) == 2;

  // Output vector j of a row `row_offset` elements into `out`, from the thread's gate and up
  // words (N words: V = N * kPerWord elements; u is unused without a gate).
  template <int N>
  __device__ __forceinline__ static void store(void* out, int64_t row_offset, int j, const WordsN<N>& g,
                                               const WordsN<N>& u, float inv_scale) {
    constexpr int V = N * Words<T>::kPerWord;
    float y[V];
    unpack_words<T>(g, y);
    if constexpr (kGated) {
      float upv[V];
      unpack_words<T>(u, upv);
#pragma unroll
      for (int e = 0; e < V; ++e) y[e] = activate<ACT, kFast>(y[e]) * upv[e];
    }
    if constexpr (QUANT) {
      static_assert(V % 2 == 0, "fp8 values are converted in pairs");
      using Pairs = VecN<uint16_t, V / 2>;
      Pairs q;
      // a gated result rounded to T first, as the unfused ops would pass it on (x alone is
      // already a T value)
      if constexpr (kGated) round_pairs<T, V>(y);
      to_fp8_pairs<V>(y, inv_scale, q.v);
      reinterpret_cast<Pairs*>(static_cast<uint8_t*>(out) + row_offset)[j] = q;
    } else {
      reinterpret_cast<WordsN<N>*>(static_cast<T*>(out) + row_offset)[j] = pack_words<T, N>(y);
    }
  }

  // inv_scale: 1 / scale of the static quantization
  __device__ __forceinline__ static auto apply(T g, T u, float inv_scale) {
    float y = kGated ? activate<ACT, kFast>(float(g)) * float(u) : float(g);
    if constexpr (QUANT) {
      if constexpr (kGated) y = Words<T>::round(y);  // x alone is already a T value
      return to_fp8(y * inv_scale);
    } else {
      return static_cast<T>(y);
    }
  }
};

// Grid: rows x column blocks (`flat_grid`). On the vector path each thread handles one 16-byte
// vector, the first block of a row also its scalar head and tail; otherwise V coalesced scalars.
template <typename T, int ACT, bool QUANT>
__global__ void elementwise_kernel(void* out, int64_t out_stride, const T* x, int64_t x_stride,
                                   int64_t d, const float* scale, unsigned blocks_per_row) {
  await_previous_grid();
  using E = Elementwise<T, ACT, QUANT>;
  using OutT = std::conditional_t<QUANT, uint8_t, T>;
  constexpr int V = vec_width<T>();
  const FlatBlock block(blocks_per_row);
  const unsigned column_block = block.column;
  const int64_t row = block.row;
  const T* gate = x + row * x_stride;
  const T* up = E::kGated ? gate + d : nullptr;
  OutT* orow = static_cast<OutT*>(out) + row * out_stride;
  const float s = QUANT ? fast_reciprocal(*scale) : 1.f;
  const RowPlan p = PlanBuilder<V>(gate, d).also(up).also(orow).done();
  const int64_t first = static_cast<int64_t>(column_block) * blockDim.x;
  auto scalar = [&](int64_t i) { orow[i] = E::apply(gate[i], E::kGated ? up[i] : T(0.f), s); };
  if (p.vec) {
    const int64_t j = first + threadIdx.x;
    if (j < p.nvec) {
      const auto g = reinterpret_cast<const VecN<T, V>*>(gate + p.head)[j];
      VecN<T, V> u;
      if constexpr (E::kGated) u = reinterpret_cast<const VecN<T, V>*>(up + p.head)[j];
      VecN<OutT, V> o;
#pragma unroll
      for (int k = 0; k < V; ++k) o.v[k] = E::apply(g.v[k], E::kGated ? u.v[k] : T(0.f), s);
      reinterpret_cast<VecN<OutT, V>*>(orow + p.head)[j] = o;
    }
    if (column_block == 0 && threadIdx.x < p.head) scalar(threadIdx.x);
    if (column_block == 0 && threadIdx.x < p.tail) scalar(p.head + p.nvec * V + threadIdx.x);
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int64_t i = first * V + static_cast<int64_t>(k) * blockDim.x + threadIdx.x;
      if (i < d) scalar(i);
    }
  }
}

// The usual layout on its own path: every row of x and out aligned to whole vectors and d a
// whole number of them (the host checks). Grid: (column blocks, rows), so a row's blocks are
// adjacent as in the flat grid, without a division per block or a per-row plan; VECS accesses
// of N words a thread (N = 4: a 16-byte vector), blockDim.x apart so that each access of a warp
// is coalesced, unpacked a word at a time (`Words`). The arithmetic is `elementwise_kernel`'s.
// Every load is issued before any math (`load_now`), and the scale's reciprocal is taken after
// them (`fast_reciprocal`; an IEEE division there branched on the scale and held the loads
// back one round trip). Row strides are 32-bit (the host checks).
template <typename T, int ACT, bool QUANT, int N, int VECS>
__global__ void __launch_bounds__(tuning::kAlignedGateMaxThreads, tuning::kAlignedGateMinBlocks)
    aligned_elementwise_kernel(void* out, int out_stride, const T* x, int x_stride, int d, const float* scale) {
  await_previous_grid();
  using E = Elementwise<T, ACT, QUANT>;
  using W = Words<T>;
  using Vec = WordsN<N>;
  constexpr int V = N * W::kPerWord;  // elements an access
  static_assert(!QUANT || V % 2 == 0, "fp8 values are converted in pairs");
  const int first = static_cast<int>(blockIdx.x * blockDim.x * VECS + threadIdx.x);
  if (first * V >= d) return;
  const int row = static_cast<int>(blockIdx.y);
  const auto* gate = reinterpret_cast<const Vec*>(x + static_cast<int64_t>(row) * x_stride);
  const auto* up = reinterpret_cast<const Vec*>(x + static_cast<int64_t>(row) * x_stride + d);
  Vec g[VECS], u[VECS];
#pragma unroll
  for (int k = 0; k < VECS; ++k) {
    const int j = first + k * static_cast<int>(blockDim.x);
    if (k == 0 || j * V < d) {
      g[k] = load_now(gate + j);
      if constexpr (E::kGated) u[k] = load_now(up + j);
    }
  }
  const float inv_scale = QUANT ? fast_reciprocal(*scale) : 1.f;
#pragma unroll
  for (int k = 0; k < VECS; ++k) {
    const int j = first + k * static_cast<int>(blockDim.x);
    if (k > 0 && j * V >= d) break;
    E::template store<N>(out, static_cast<int64_t>(row) * out_stride, j, g[k], u[k], inv_scale);
  }
}

// Decode-size launches: as Triton's flat kernel, a block size known at compile time and the scale's
// load first, so a thread's first load waits on no index arithmetic (faster at decode sizes than
// `aligned_elementwise_kernel`'s form), and static quant streamed from DRAM. N words a thread: by
// default `tuning::kDecodeElements` elements' (one word, two for float32), four (a vector) for the
// streamed static quant; the arithmetic is `aligned_elementwise_kernel`'s. Without ROWS the outputs
// form one contiguous run (the rows of `static_quant_fp8` when x and out are contiguous, or the one
// row of a gated op) and the grid is 1-D; with ROWS each row is one of grid y, at `x_stride` and
// `out_stride` (elements; x's offsets fit 32 bits, the host checks: one multiply where 64-bit row
// offsets took four more instructions before the first load). `count`: outputs in the run or row, a
// multiple of the thread's N words of elements; `d`: elements from a gate to its up value (a gated
// row's width). EVEN: the blocks tile `count` exactly, so no thread is outside it and nothing is
// predicated (with a predicate, ptxas exits the threads outside before the loads, and every
// thread's first load then waits for that branch, as Triton's unmasked kernels do not).
template <typename T, int ACT, bool QUANT, int THREADS, bool ROWS, bool EVEN, int N>
__global__ void __launch_bounds__(THREADS)
    flat_elementwise_kernel(void* out, int out_stride, const T* x, int x_stride, int count, int d,
                            const float* scale) {
  await_previous_grid();
  using E = Elementwise<T, ACT, QUANT>;
  using Vec = WordsN<N>;
  constexpr int kElements = N * Words<T>::kPerWord;  // a thread's
  const float s = QUANT ? load_now(scale) : 1.f;
  const int j = static_cast<int>(blockIdx.x) * THREADS + static_cast<int>(threadIdx.x);
  const bool in_run = EVEN || j * kElements < count;
  const int row = ROWS ? static_cast<int>(blockIdx.y) : 0;
  const int at = row * x_stride + kElements * j;  // x's element of the thread's gate (or value)
  Vec g{}, u{};
  if (in_run) {
    g = load_now(reinterpret_cast<const Vec*>(x + at));
    if constexpr (E::kGated) u = load_now(reinterpret_cast<const Vec*>(x + at + d));
  }
  const float inv_scale = QUANT ? fast_reciprocal(s) : 1.f;
  if (in_run) E::template store<N>(out, static_cast<int64_t>(row) * out_stride, j, g, u, inv_scale);
}

// `flat_elementwise_kernel` over `count` outputs in each of `rows` grid rows, N words a thread,
// unpredicated (EVEN) where its blocks tile them exactly.
template <typename T, int ACT, bool QUANT, int THREADS, bool ROWS, int N = words_for<T>(tuning::kDecodeElements)>
void launch_flat(unsigned rows, int count, void* out, int out_stride, const T* x, int x_stride, int d,
                 const float* scale, cudaStream_t stream) {
  constexpr int kPerBlock = THREADS * N * Words<T>::kPerWord;
  const dim3 grid(static_cast<unsigned>((static_cast<int64_t>(count) + kPerBlock - 1) / kPerBlock), rows);
  if (count % kPerBlock == 0) {
    launch(flat_elementwise_kernel<T, ACT, QUANT, THREADS, ROWS, true, N>, grid, dim3(THREADS), stream, out,
           out_stride, x, x_stride, count, d, scale);
  } else {
    launch(flat_elementwise_kernel<T, ACT, QUANT, THREADS, ROWS, false, N>, grid, dim3(THREADS), stream, out,
           out_stride, x, x_stride, count, d, scale);
  }
}

template <int ACT, bool QUANT>
void launch_elementwise(at::Tensor& out, const at::Tensor& x, const at::Tensor* scale) {
  constexpr bool kGated = ACT != kIdentity;
  check_rows(x, "x");
  const int64_t rows = x.size(0);
  TORCH_CHECK(!kGated || x.size(1) % 2 == 0, "ir_cuda: x must have rows of even width, got ",
              x.size(1));
  const int64_t d = kGated ? x.size(1) / 2 : x.size(1);
  if constexpr (QUANT) {
    check_fp8(out, "out", {rows, d});
    check_scale(*scale, "scale", x);
  } else {
    check_rows(out, "out");
    TORCH_CHECK(out.size(0) == rows && out.size(1) == d && out.scalar_type() == x.scalar_type(),
                "ir_cuda: out must be [", rows, ", ", d, "] of dtype ", x.scalar_type(),
                ", got ", out.sizes(), " ", out.scalar_type());
  }
  if (rows == 0 || d == 0) return;
  const DeviceScope scope(x);
  const cudaStream_t stream = scope.stream;
  IR_CUDA_DISPATCH_FLOAT(x.scalar_type(), "elementwise", [&] {
    using T = scalar_t;
    constexpr int V = vec_width<T>();
    // threads per block and blocks per row for `per_thread` elements a thread in blocks of at
    // most `threads` (fewer where a row has fewer elements)
    auto shape = [&](int64_t per_thread, int threads) {
      const int64_t units = (d + per_thread - 1) / per_thread;
      while (threads > 32 && (threads / 2) >= units) threads /= 2;
      return std::make_pair(threads, (units + threads - 1) / threads);
    };
    // whole vectors everywhere: x's gate and up halves and out (T: 16 bytes, fp8: V bytes)
    const bool aligned = d % V == 0 && rows_aligned(x, 16) && rows_aligned(out, QUANT ? V : 16) &&
                         rows <= 65535 && d <= std::numeric_limits<int>::max() - V;
    if (aligned) {
      // `per_thread` elements a thread, in VECS accesses
      auto run = [&](auto kernel, int64_t per_thread, int max_threads) {
        const auto [threads, blocks] = shape(per_thread, max_threads);
        launch(kernel, dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(rows)),
               dim3(static_cast<unsigned>(threads)), stream, out.data_ptr(), row_stride(out, "out"),
               x.const_data_ptr<T>(), row_stride(x, "x"), static_cast<int>(d),
               QUANT ? scale->const_data_ptr<float>() : nullptr);
      };
      // Elements a thread and threads a block (`tuning.cuh`): a launch of at most
      // kDecodeOutputs outputs is bound by each thread's chain of unpacking, math and
      // conversion, so short chains win there; gelu's distribution function makes its chain the
      // longest; past that, more bytes a thread keep more loads in flight. Any split gives the
      // same values: each element is computed alone.
      constexpr bool kLongChain = ACT == kGelu || ACT == kGeluTanh;
      const int64_t outputs = rows * d;
      // an aligned gate's block otherwise
      const int gate_threads = rows < kFewElementwiseRows ? tuning::kGateFewRowsThreads : tuning::kGateThreads;
      // whether the op's bytes stream from DRAM (asked only past decode sizes: a device query)
      auto streams = [&] {
        return tensor_bytes(x) + tensor_bytes(out) > l2_cache_bytes();
      };
      // Gated rows without quantization keep the decode form further while few rows (the
      // quantizing silu is level there, and keeps its form).
      const bool decode_form =
          outputs <= kDecodeOutputs ||
          (kGated && !QUANT && rows < kFewElementwiseRows && outputs <= tuning::kGateFewRowsDecodeOutputs);
      if (decode_form) {
        // `tuning::kDecodeElements` outputs a thread in blocks of `kDecodeThreads`
        // (`flat_elementwise_kernel`): as one run where the outputs are contiguous (a gated
        // op's single row, or contiguous rows), else, without quantization, a row a grid row
        // (the quantizing silu's rows keep the aligned form, where they are faster)
        constexpr int kThreads = tuning::kDecodeThreads;
        const bool one_run = kGated ? rows == 1 : x.stride(0) == d && out.stride(0) == d;
        const float* scale_ptr = QUANT ? scale->const_data_ptr<float>() : nullptr;
        if (one_run) {
          launch_flat<T, ACT, QUANT, kThreads, false>(1, static_cast<int>(outputs), out.data_ptr(), 0,
                                                      x.const_data_ptr<T>(), 0, static_cast<int>(d), scale_ptr,
                                                      stream);
          return;
        }
        if constexpr (!QUANT) {
          // (the kernel takes x's offsets in 32 bits)
          if ((rows - 1) * x.stride(0) + x.size(1) <= std::numeric_limits<int>::max()) {
            launch_flat<T, ACT, QUANT, kThreads, true>(static_cast<unsigned>(rows), static_cast<int>(d),
                                                       out.data_ptr(), row_stride(out, "out"),
                                                       x.const_data_ptr<T>(), row_stride(x, "x"),
                                                       static_cast<int>(d), scale_ptr, stream);
            return;
          }
        }
        constexpr int kElements = tuning::kDecodeElements;
        run(aligned_elementwise_kernel<T, ACT, QUANT, words_for<T>(kElements), 1>, kElements, kThreads);
        return;
      }
      if constexpr (ACT == kSilu) {
        // Past the decode form, in few rows: more elements a thread than the decode form's, fewer
        // than a vector (both slower at these shapes), as the Triton provider's silu launch.
        if (rows < kFewElementwiseRows && outputs <= tuning::kSiluFewRowsOutputs) {
          constexpr int kElements = tuning::kSiluFewRowsElements;
          run(aligned_elementwise_kernel<T, ACT, QUANT, words_for<T>(kElements), 1>, kElements,
              tuning::kSiluFewRowsThreads);
          return;
        }
      }
      if constexpr (kLongChain) {
        if (rows < kFewElementwiseRows && outputs <= tuning::kGeluFewRowsOutputs) {
          constexpr int kElements = tuning::kGeluFewRowsElements;
          run(aligned_elementwise_kernel<T, ACT, QUANT, words_for<T>(kElements), 1>, kElements,
              tuning::kGeluFewRowsThreads);
          return;
        }
      }
      if constexpr (ACT == kIdentity) {
        if (outputs > tuning::kStaticL2Outputs && !streams()) {
          constexpr int kVectors = tuning::kStaticL2Vectors;
          run(aligned_elementwise_kernel<T, ACT, QUANT, 4, kVectors>, kVectors * V, tuning::kStaticL2Threads);
          return;
        }
        // streamed from DRAM, contiguous rows as one flat run of a vector a thread, as Triton's
        // flat kernel (the row grid of `aligned_elementwise_kernel` moves the same vectors a
        // block, but slower)
        constexpr int kStreamThreads = tuning::kStaticStreamedThreads;
        // (the kernel indexes in 32 bits, up to a block past the run's end)
        if (x.stride(0) == d && out.stride(0) == d &&
            outputs <= std::numeric_limits<int>::max() - kStreamThreads * V && streams()) {
          launch_flat<T, ACT, QUANT, kStreamThreads, false, 4>(1, static_cast<int>(outputs), out.data_ptr(), 0,
                                                               x.const_data_ptr<T>(), 0, static_cast<int>(d),
                                                               scale->const_data_ptr<float>(), stream);
          return;
        }
      }
      if constexpr ((ACT == kSilu || ACT == kGelu) && !QUANT) {
        // Gates streamed from DRAM: as their device class's table says (a card with deeper
        // loads keeps more bytes in flight a thread, or more blocks an SM).
        if (streams()) {
          const DeviceClass c = device_class();
          if constexpr (ACT == kSilu) {
            auto streamed = [&](auto cls) {
              constexpr DeviceClass C = decltype(cls)::value;
              constexpr int kElements = words_for<T>(tuning::kStreamedSiluElements[C]) * Words<T>::kPerWord;
              constexpr int kThreads = tuning::kStreamedSiluThreads[C];
              run(aligned_elementwise_kernel<T, ACT, QUANT, words_for<T>(kElements), 1>, kElements,
                  kThreads != 0 ? kThreads : gate_threads);
            };
            if (c == kDeepLoads) {
              streamed(std::integral_constant<DeviceClass, kDeepLoads>{});
            } else {
              streamed(std::integral_constant<DeviceClass, kShallowLoads>{});
            }
            return;
          } else if constexpr (sizeof(T) == 2) {
            const int threads = tuning::kStreamedGelu16Threads[c];
            run(aligned_elementwise_kernel<T, ACT, QUANT, 4, 1>, V, threads != 0 ? threads : gate_threads);
            return;
          }
        }
      }
      run(aligned_elementwise_kernel<T, ACT, QUANT, 4, 1>, V, gate_threads);
      return;
    }
    const auto [threads, blocks_per_row] =
        shape(V, rows < kFewElementwiseRows ? tuning::kUnalignedFewRowsThreads : tuning::kUnalignedThreads);
    launch(elementwise_kernel<T, ACT, QUANT>, flat_grid(rows, blocks_per_row),
           dim3(static_cast<unsigned>(threads)), stream, out.data_ptr(), out.stride(0),
           x.const_data_ptr<T>(), x.stride(0), d, QUANT ? scale->const_data_ptr<float>() : nullptr,
           static_cast<unsigned>(blocks_per_row));
  });
}

// silu_and_mul followed by group quantization: a group of a row's outputs to a team.
template <typename T>
struct GroupGateArgs {
  const T* x;
  void* out;  // fp8 bits
  float* scale_out;
  int x_stride, out_stride;  // 32-bit (the host checks)
  int scale_token_stride, scale_group_stride;
  int d;            // a row's outputs (the gate's width)
  int groups;       // a row's groups
  int group_size;   // elements a group
  int teams;        // rows * groups
  int lane_shift;   // the aligned kernel's lanes a group (a vector each), log2
};

// A gated value of silu_and_mul rounded to T, as the unfused op hands it to the quantizer.
template <typename T>
__device__ __forceinline__ float silu_gate(float g, float u) {
  return Words<T>::round(activate<kSilu, sizeof(T) == 2>(g) * u);
}

// Aligned rows, groups of a power of two of 16-byte vectors up to a warp's lanes (the host
// checks): a lane a vector of the gate and of the up half. Each lane forms its V outputs and
// their peak, the group's lanes reduce the peaks by shuffles, and every lane quantizes its own
// outputs with the group's scale; the group's first lane stores the scale. Grid: a flat run of
// teams over rows x groups; every thread of a block takes part in the shuffles.
template <typename T>
__global__ void __launch_bounds__(tuning::kGroupGateThreads) aligned_silu_group_kernel(GroupGateArgs<T> a) {
  await_previous_grid();
  constexpr int V = vec_width<T>();
  const int lanes = 1 << a.lane_shift;
  const int lane = static_cast<int>(threadIdx.x) & (lanes - 1);
  const int team = static_cast<int>(blockIdx.x * (blockDim.x >> a.lane_shift) + (threadIdx.x >> a.lane_shift));
  const bool active = team < a.teams;
  const int row = team / a.groups;
  const int group = team - row * a.groups;
  const int j = group * lanes + lane;  // the lane's vector of the row's outputs
  const auto* gate = reinterpret_cast<const Words4*>(a.x + static_cast<int64_t>(row) * a.x_stride);
  const auto* up = reinterpret_cast<const Words4*>(a.x + static_cast<int64_t>(row) * a.x_stride + a.d);
  Words4 g = fill4(0u), u = fill4(0u);
  if (active) {
    g = load_now(gate + j);
    u = load_now(up + j);
  }
  float y[V], upv[V], m[V];
  unpack_words<T>(g, y);
  unpack_words<T>(u, upv);
#pragma unroll
  for (int e = 0; e < V; ++e) {
    y[e] = activate<kSilu, sizeof(T) == 2>(y[e]) * upv[e];
  }
  round_pairs<T, V>(y);
#pragma unroll
  for (int e = 0; e < V; ++e) m[e] = fabsf(y[e]);
  float peak = tree_reduce<V>(m, MaxOp{});
  for (int offset = 1; offset < lanes; offset <<= 1) {
    peak = max_keeping_nan(peak, __shfl_xor_sync(0xffffffffu, peak, offset));
  }
  if (!active) return;  // no shuffles follow
  const float scale = scale_of_absmax(peak);
  using Pairs = VecN<uint16_t, V / 2>;
  Pairs q;
  to_fp8_pairs<V>(y, fast_reciprocal(scale), q.v);
  reinterpret_cast<Pairs*>(static_cast<uint8_t*>(a.out) + static_cast<int64_t>(row) * a.out_stride)[j] = q;
  if (lane == 0) {
    a.scale_out[static_cast<int64_t>(row) * a.scale_token_stride + static_cast<int64_t>(group) * a.scale_group_stride] =
        scale;
  }
}

// Every other layout and group size: a warp a group, whose lanes stride over its outputs twice
// (their peak, then their fp8 values). The arithmetic is the aligned kernel's.
template <typename T>
__global__ void __launch_bounds__(tuning::kGroupGateGenericThreads) silu_group_kernel(GroupGateArgs<T> a) {
  await_previous_grid();
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int team = static_cast<int>(blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5));
  const bool active = team < a.teams;
  const int row = team / a.groups;
  const int group = team - row * a.groups;
  const T* gate = a.x + static_cast<int64_t>(row) * a.x_stride;
  const T* up = gate + a.d;
  const int first = group * a.group_size, end = first + a.group_size;
  float peak = 0.f;
  if (active) {
    for (int i = first + lane; i < end; i += 32) peak = max_keeping_nan(peak, fabsf(silu_gate<T>(float(gate[i]), float(up[i]))));
  }
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) peak = max_keeping_nan(peak, __shfl_xor_sync(0xffffffffu, peak, offset));
  if (!active) return;  // no shuffles follow
  const float scale = scale_of_absmax(peak);
  const float inv_scale = fast_reciprocal(scale);
  uint8_t* out = static_cast<uint8_t*>(a.out) + static_cast<int64_t>(row) * a.out_stride;
  for (int i = first + lane; i < end; i += 32) out[i] = to_fp8(silu_gate<T>(float(gate[i]), float(up[i])) * inv_scale);
  if (lane == 0) {
    a.scale_out[static_cast<int64_t>(row) * a.scale_token_stride + static_cast<int64_t>(group) * a.scale_group_stride] =
        scale;
  }
}

void launch_silu_group(at::Tensor& out, at::Tensor& scale_out, const at::Tensor& x, int64_t group_size) {
  check_rows(x, "x");
  const int64_t rows = x.size(0);
  TORCH_CHECK(x.size(1) % 2 == 0, "ir_cuda: x must have rows of even width, got ", x.size(1));
  const int64_t d = x.size(1) / 2;
  TORCH_CHECK(group_size > 0 && d % group_size == 0 && group_size <= std::numeric_limits<int>::max(),
              "ir_cuda: group_size must be positive and divide half the row width ", d, ", got ", group_size);
  const int64_t groups = d / group_size;
  check_fp8(out, "out", {rows, d});
  TORCH_CHECK(on_kernel_device(scale_out) && scale_out.scalar_type() == at::kFloat && scale_out.dim() == 2 &&
                  scale_out.size(0) == rows && scale_out.size(1) == groups,
              "ir_cuda: scale_out must be float32 of sizes [", rows, ", ", groups, "], got ", scale_out.scalar_type(),
              " ", scale_out.sizes());
  // (a block's teams past the last stay within 32 bits)
  TORCH_CHECK(rows * groups <= std::numeric_limits<int>::max() - tuning::kGroupGateThreads, "ir_cuda: ", rows,
              " rows of ", groups, " groups are more groups than the kernels address (2^31 - 1 - ",
              tuning::kGroupGateThreads, ")");
  if (rows == 0 || d == 0) return;
  const DeviceScope scope(x);
  IR_CUDA_DISPATCH_FLOAT(x.scalar_type(), "silu_group", [&] {
    using T = scalar_t;
    constexpr int V = vec_width<T>();
    GroupGateArgs<T> a{};
    a.x = x.const_data_ptr<T>();
    a.out = out.data_ptr();
    a.scale_out = scale_out.data_ptr<float>();
    a.x_stride = row_stride(x, "x");
    a.out_stride = row_stride(out, "out");
    a.scale_token_stride = stride_32(scale_out.stride(0), "scale_out's token stride");
    a.scale_group_stride = stride_32(scale_out.stride(1), "scale_out's group stride");
    a.d = static_cast<int>(d);
    a.groups = static_cast<int>(groups);
    a.group_size = static_cast<int>(group_size);
    a.teams = static_cast<int>(rows * groups);
    const int64_t lanes = group_size / V;
    const bool aligned = group_size % V == 0 && lanes <= 32 && (lanes & (lanes - 1)) == 0 && rows_aligned(x, 16) &&
                         rows_aligned(out, V);
    if (aligned) {
      a.lane_shift = log2_of(static_cast<int>(lanes));
      constexpr int kThreads = tuning::kGroupGateThreads;
      const int64_t teams_a_block = kThreads / lanes;
      launch(aligned_silu_group_kernel<T>, dim3(static_cast<unsigned>((a.teams + teams_a_block - 1) / teams_a_block)),
             dim3(kThreads), scope.stream, a);
      return;
    }
    constexpr int kThreads = tuning::kGroupGateGenericThreads;
    launch(silu_group_kernel<T>, dim3(static_cast<unsigned>((a.teams + kThreads / 32 - 1) / (kThreads / 32))),
           dim3(kThreads), scope.stream, a);
  });
}

// The floor of a decode-size launch: the benchmark replays it to time an empty kernel.
__global__ void nothing_kernel() { await_previous_grid(); }

}  // namespace

void empty_kernel(const at::Tensor& device_of) {
  TORCH_CHECK(on_kernel_device(device_of), "ir_cuda: empty_kernel needs a ", kDeviceName,
              " tensor (it picks the device)");
  const DeviceScope scope(device_of);
  launch(nothing_kernel, dim3(1), dim3(32), scope.stream);
}

void silu_and_mul_out(at::Tensor& out, const at::Tensor& x) {
  launch_elementwise<kSilu, false>(out, x, nullptr);
}

void gelu_and_mul_out(at::Tensor& out, const at::Tensor& x, int64_t tanh_approximation) {
  if (tanh_approximation) {
    launch_elementwise<kGeluTanh, false>(out, x, nullptr);
  } else {
    launch_elementwise<kGelu, false>(out, x, nullptr);
  }
}

void silu_and_mul_static_quant_fp8_out(at::Tensor& out, const at::Tensor& x,
                                       const at::Tensor& scale) {
  launch_elementwise<kSilu, true>(out, x, &scale);
}

void static_quant_fp8_out(at::Tensor& out, const at::Tensor& x, const at::Tensor& scale) {
  launch_elementwise<kIdentity, true>(out, x, &scale);
}

void silu_and_mul_group_quant_fp8_out(at::Tensor& out, at::Tensor& scale_out, const at::Tensor& x,
                                      int64_t group_size) {
  launch_silu_group(out, scale_out, x, group_size);
}

}  // namespace ir_cuda
