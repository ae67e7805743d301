// The least a decode-size row kernel can do, as standalone kernels on raw pointers, for
// `row_floor_probe.py`: contiguous bf16 rows of a width known at compile time, one block a row,
// VPT 16-byte vectors a thread, no checks, no strides, no head or tail. Three modes:
//   0 copy: the row read and written back (the bytes a norm must move, less its weight);
//   1 scaled: the row's sum of squares over the block, then x * rsqrt(mean + eps) (a norm
//     without its weight: the reduction's cost on top of the copy);
//   2 norm: as 1 with the weight read beside the row and multiplied in (a minimal rms_norm);
//   3 mul: out = a * b for the two halves a, b of each row of x (a gated activation's bytes
//     without its activation; any width of whole vectors, one vector a thread, blocks of 256);
//   4 fused add: s = x + residual stored over the residual, then s / rms * weight (a minimal
//     fused_add_rms_norm; `out` holds the residual's rows, then the output's).
// Built by nvcc alone (`probe_tools.build_probe`).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace {

struct alignas(16) Vec {
  uint32_t w[4];  // eight bf16 values, two a word, the first in the low half
};

__device__ __forceinline__ float low(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float high(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The sum of `v` over the block's THREADS threads (a power of two), in every thread: shuffles in
// each warp, then the warps' partials through shared memory and shuffles again.
template <int THREADS>
__device__ __forceinline__ float block_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if constexpr (THREADS > 32) {
    constexpr int kWarps = THREADS / 32;
    __shared__ float partial[kWarps];
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
    __syncthreads();
    v = partial[threadIdx.x & (kWarps - 1)];
#pragma unroll
    for (int offset = 1; offset < kWarps; offset <<= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// The sum of squares of a thread's VPT vectors, in two chains (low and high halves).
template <int VPT>
__device__ __forceinline__ float sum_of_squares(const Vec (&v)[VPT]) {
  float acc[2] = {0.f, 0.f};
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      acc[0] = fmaf(low(v[k].w[j]), low(v[k].w[j]), acc[0]);
      acc[1] = fmaf(high(v[k].w[j]), high(v[k].w[j]), acc[1]);
    }
  }
  return acc[0] + acc[1];
}

// (v * inv_rms) * w, or v * inv_rms without WEIGHTED, rounded to bf16 into the row `out`.
template <int THREADS, int VPT, bool WEIGHTED>
__device__ __forceinline__ void store_normed(Vec* out, const Vec (&v)[VPT], const Vec (&w)[VPT], float inv_rms) {
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    Vec o;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float lo = low(v[k].w[j]) * inv_rms, hi = high(v[k].w[j]) * inv_rms;
      if constexpr (WEIGHTED) {
        lo *= low(w[k].w[j]);
        hi *= high(w[k].w[j]);
      }
      o.w[j] = pack(lo, hi);
    }
    out[threadIdx.x + k * THREADS] = o;
  }
}

template <int THREADS, int VPT, int MODE>
__global__ void __launch_bounds__(THREADS)
    row_kernel(uint16_t* out, const uint16_t* x, const uint16_t* weight, float inv_width, float eps) {
  constexpr int64_t kWidth = int64_t{THREADS} * VPT * 8;
  const auto* xr = reinterpret_cast<const Vec*>(x + blockIdx.x * kWidth);
  auto* outr = reinterpret_cast<Vec*>(out + blockIdx.x * kWidth);
  Vec v[VPT];
  Vec w[VPT];
#pragma unroll
  for (int k = 0; k < VPT; ++k) v[k] = xr[threadIdx.x + k * THREADS];
  if constexpr (MODE == 2) {
#pragma unroll
    for (int k = 0; k < VPT; ++k) w[k] = reinterpret_cast<const Vec*>(weight)[threadIdx.x + k * THREADS];
  }
  if constexpr (MODE == 0) {
#pragma unroll
    for (int k = 0; k < VPT; ++k) outr[threadIdx.x + k * THREADS] = v[k];
  } else {
    const float inv_rms = rsqrtf(block_sum<THREADS>(sum_of_squares(v)) * inv_width + eps);
    store_normed<THREADS, VPT, MODE == 2>(outr, v, w, inv_rms);
  }
}

template <int THREADS, int VPT>
__global__ void __launch_bounds__(THREADS)
    fused_add_kernel(uint16_t* out, const uint16_t* x, const uint16_t* weight, float inv_width, float eps) {
  constexpr int64_t kWidth = int64_t{THREADS} * VPT * 8;
  const auto* xr = reinterpret_cast<const Vec*>(x + blockIdx.x * kWidth);
  auto* rr = reinterpret_cast<Vec*>(out + blockIdx.x * kWidth);
  auto* yr = reinterpret_cast<Vec*>(out + (gridDim.x + blockIdx.x) * kWidth);
  Vec v[VPT];
  Vec w[VPT];
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const Vec a = xr[threadIdx.x + k * THREADS];
    const Vec b = rr[threadIdx.x + k * THREADS];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[k].w[j] = pack(low(a.w[j]) + low(b.w[j]), high(a.w[j]) + high(b.w[j]));
  }
#pragma unroll
  for (int k = 0; k < VPT; ++k) w[k] = reinterpret_cast<const Vec*>(weight)[threadIdx.x + k * THREADS];
#pragma unroll
  for (int k = 0; k < VPT; ++k) rr[threadIdx.x + k * THREADS] = v[k];
  const float inv_rms = rsqrtf(block_sum<THREADS>(sum_of_squares(v)) * inv_width + eps);
  store_normed<THREADS, VPT, true>(yr, v, w, inv_rms);
}

constexpr int kMulThreads = 256;

__global__ void __launch_bounds__(kMulThreads) mul_kernel(uint16_t* out, const uint16_t* x, int width) {
  const int vectors = width / 8;
  const int i = static_cast<int>(blockIdx.x) * kMulThreads + static_cast<int>(threadIdx.x);
  const auto* a = reinterpret_cast<const Vec*>(x + int64_t{blockIdx.y} * 2 * width);
  const bool inside = i < vectors;
  Vec va{}, vb{};
  if (inside) {
    va = a[i];
    vb = a[vectors + i];
  }
  Vec o;
#pragma unroll
  for (int j = 0; j < 4; ++j) o.w[j] = pack(low(va.w[j]) * low(vb.w[j]), high(va.w[j]) * high(vb.w[j]));
  if (inside) reinterpret_cast<Vec*>(out + int64_t{blockIdx.y} * width)[i] = o;
}

constexpr float kEps = 1e-6f;

template <int WIDTH, int VPT, int MODE>
int launch(const void* x, void* out, const void* weight, int rows, cudaStream_t stream) {
  constexpr int kThreads = WIDTH / (8 * VPT);
  if constexpr (kThreads < 32 || kThreads > 1024) {
    return -1;
  } else {
    auto* o = static_cast<uint16_t*>(out);
    const auto* xs = static_cast<const uint16_t*>(x);
    const auto* w = static_cast<const uint16_t*>(weight);
    if constexpr (MODE == 4) {
      fused_add_kernel<kThreads, VPT><<<rows, kThreads, 0, stream>>>(o, xs, w, 1.f / WIDTH, kEps);
    } else {
      row_kernel<kThreads, VPT, MODE><<<rows, kThreads, 0, stream>>>(o, xs, w, 1.f / WIDTH, kEps);
    }
    return static_cast<int>(cudaGetLastError());
  }
}

template <int WIDTH, int MODE>
int launch_form(int vpt, const void* x, void* out, const void* weight, int rows, cudaStream_t stream) {
  switch (vpt) {
    case 1:
      return launch<WIDTH, 1, MODE>(x, out, weight, rows, stream);
    case 2:
      return launch<WIDTH, 2, MODE>(x, out, weight, rows, stream);
    case 4:
      return launch<WIDTH, 4, MODE>(x, out, weight, rows, stream);
    default:
      return -1;
  }
}

template <int WIDTH>
int launch_mode(int mode, int vpt, const void* x, void* out, const void* weight, int rows, cudaStream_t stream) {
  switch (mode) {
    case 0:
      return launch_form<WIDTH, 0>(vpt, x, out, weight, rows, stream);
    case 1:
      return launch_form<WIDTH, 1>(vpt, x, out, weight, rows, stream);
    case 2:
      return launch_form<WIDTH, 2>(vpt, x, out, weight, rows, stream);
    case 4:
      return launch_form<WIDTH, 4>(vpt, x, out, weight, rows, stream);
    default:
      return -1;
  }
}

}  // namespace

// variant = 10 * mode + vectors a thread (1, 2 or 4; mode 3 takes 1); `scale` is the weight
// (bf16, `width` values) for modes 2 and 4 and unused otherwise; `width` is the output's (x is
// twice as wide for mode 3); eps 1e-6. 0, the launch's CUDA error, or -1 for a variant or width
// this probe does not build.
extern "C" int probe_launch(int variant, const void* x, void* out, const float* scale, int rows, int width,
                            void* stream) {
  const int mode = variant / 10, vpt = variant % 10;
  const auto s = static_cast<cudaStream_t>(stream);
  if (mode == 3) {
    if (vpt != 1 || width % 8 != 0) return -1;
    const dim3 grid((width / 8 + kMulThreads - 1) / kMulThreads, rows);
    mul_kernel<<<grid, kMulThreads, 0, s>>>(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(x), width);
    return static_cast<int>(cudaGetLastError());
  }
  switch (width) {
    case 2048:
      return launch_mode<2048>(mode, vpt, x, out, scale, rows, s);
    case 4096:
      return launch_mode<4096>(mode, vpt, x, out, scale, rows, s);
    case 8192:
      return launch_mode<8192>(mode, vpt, x, out, scale, rows, s);
    default:
      return -1;
  }
}
