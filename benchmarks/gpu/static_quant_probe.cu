// The elementwise fp8 quantization (bf16 in, fp8 e4m3 out, one static scale) as standalone
// kernels on raw pointers, for `static_quant_probe.py`: the prologue before a thread's first
// load in several forms, timed beside Triton's flat kernel at decode sizes. Every variant takes
// two elements a thread (one 32-bit word) and computes as ir_cuda's `aligned_elementwise_kernel`
// (x * rcp.approx(scale), satfinite), so all write the same bits. Built by nvcc alone.
#include <cuda_fp8.h>
#include <cstdint>

namespace {

__device__ __forceinline__ float rcp(float v) {
  float r;
  asm("rcp.approx.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}

__device__ __forceinline__ float load_scale(const float* p) {
  float v;
  asm volatile("ld.global.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
}

__device__ __forceinline__ uint16_t quant_word(uint32_t w, float inv) {
  const float lo = __uint_as_float(w << 16) * inv, hi = __uint_as_float(w & 0xffff0000u) * inv;
  return static_cast<uint16_t>(__nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, __NV_E4M3));
}

// ir_cuda's form: rows on grid y, the block size read from blockDim, threads past the row's end
// leave before anything is loaded, the scale loaded after the row.
__global__ void rows_exit_first(uint8_t* out, int out_stride, const uint16_t* x, int x_stride, int d,
                                const float* scale) {
  const int first = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (first * 2 >= d) return;
  const int row = static_cast<int>(blockIdx.y);
  const auto* xr = reinterpret_cast<const uint32_t*>(x + static_cast<int64_t>(row) * x_stride);
  const uint32_t w = xr[first];
  const float inv = rcp(load_scale(scale));
  reinterpret_cast<uint16_t*>(out + static_cast<int64_t>(row) * out_stride)[first] = quant_word(w, inv);
}

// The scale's load first (it depends on no index), then as above.
__global__ void rows_scale_first(uint8_t* out, int out_stride, const uint16_t* x, int x_stride, int d,
                                 const float* scale) {
  const float s = load_scale(scale);
  const int first = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (first * 2 >= d) return;
  const int row = static_cast<int>(blockIdx.y);
  const auto* xr = reinterpret_cast<const uint32_t*>(x + static_cast<int64_t>(row) * x_stride);
  const uint32_t w = xr[first];
  const float inv = rcp(s);
  reinterpret_cast<uint16_t*>(out + static_cast<int64_t>(row) * out_stride)[first] = quant_word(w, inv);
}

// The block size a constant and no exit before the loads (the load and the store predicated).
template <int THREADS>
__global__ void __launch_bounds__(THREADS) rows_const_block(uint8_t* out, int out_stride, const uint16_t* x,
                                                            int x_stride, int d, const float* scale) {
  const float s = load_scale(scale);
  const int first = static_cast<int>(blockIdx.x) * THREADS + static_cast<int>(threadIdx.x);
  const int row = static_cast<int>(blockIdx.y);
  const auto* xr = reinterpret_cast<const uint32_t*>(x + static_cast<int64_t>(row) * x_stride);
  const bool in_row = first * 2 < d;
  const uint32_t w = in_row ? xr[first] : 0u;
  const float inv = rcp(s);
  if (in_row) reinterpret_cast<uint16_t*>(out + static_cast<int64_t>(row) * out_stride)[first] = quant_word(w, inv);
}

// Contiguous rows as one flat run (Triton's flat kernel): no row index, a constant block size.
template <int THREADS>
__global__ void __launch_bounds__(THREADS) flat_const_block(uint8_t* out, const uint16_t* x, int total,
                                                            const float* scale) {
  const float s = load_scale(scale);
  const int first = static_cast<int>(blockIdx.x) * THREADS + static_cast<int>(threadIdx.x);
  const bool in_range = first * 2 < total;
  const uint32_t w = in_range ? reinterpret_cast<const uint32_t*>(x)[first] : 0u;
  const float inv = rcp(s);
  if (in_range) reinterpret_cast<uint16_t*>(out)[first] = quant_word(w, inv);
}

}  // namespace

// variant: 0 rows_exit_first (ir_cuda's), 1 rows_scale_first, 2 rows_const_block, 3 flat_const_block.
// Blocks of 256 threads (two elements each), as ir_cuda and Triton launch decode sizes.
extern "C" int probe_launch(int variant, const void* x, void* out, const float* scale, int rows, int d,
                            void* stream) {
  constexpr int kThreads = 256;
  auto s = static_cast<cudaStream_t>(stream);
  const auto* xs = static_cast<const uint16_t*>(x);
  auto* o = static_cast<uint8_t*>(out);
  const dim3 grid((d / 2 + kThreads - 1) / kThreads, rows);
  switch (variant) {
    case 0: rows_exit_first<<<grid, kThreads, 0, s>>>(o, d, xs, d, d, scale); break;
    case 1: rows_scale_first<<<grid, kThreads, 0, s>>>(o, d, xs, d, d, scale); break;
    case 2: rows_const_block<kThreads><<<grid, kThreads, 0, s>>>(o, d, xs, d, d, scale); break;
    case 3: flat_const_block<kThreads><<<(rows * d / 2 + kThreads - 1) / kThreads, kThreads, 0, s>>>(o, xs, rows * d, scale); break;
    default: return -1;
  }
  return static_cast<int>(cudaGetLastError());
}
