// Float arithmetic the kernels share: the hardware's one-instruction approximations and the
// conversion to fp8 e4m3 with its scale.
#pragma once

#include <cmath>

#include "device.cuh"

namespace ir_cuda {

constexpr float kFp8Max = 448.f;
// Smallest scale the dynamic quantizers use, so an all-zero row does not divide by zero.
constexpr float kMinScale = 1.f / (kFp8Max * 512.f);

// A float function of one float that is one PTX instruction on the GPU and `host` (an
// expression of v) in the host emulation.
#if defined(__CUDA_ARCH__)
#define IR_CUDA_PTX_FLOAT_FN(name, instruction, host)   \
  __device__ __forceinline__ float name(float v) {      \
    float r;                                            \
    asm(instruction " %0, %1;" : "=f"(r) : "f"(v));     \
    return r;                                           \
  }
#else
#define IR_CUDA_PTX_FLOAT_FN(name, instruction, host) \
  __device__ __forceinline__ float name(float v) { return host; }
#endif

// 2^v and 1 / v by the hardware's approximations, subnormal inputs and results flushed to zero
// (`.ftz`): one instruction each, where exp2f and __fdividef add a range check and two scalings
// an element for subnormal results. For the 16-bit gates, whose values never need them.
IR_CUDA_PTX_FLOAT_FN(exp2_ftz, "ex2.approx.ftz.f32", std::exp2(v))
IR_CUDA_PTX_FLOAT_FN(reciprocal_ftz, "rcp.approx.ftz.f32", 1.f / v)

// 1 / v by the hardware's approximate reciprocal (at most an ulp off over the whole float
// range; the fp8 rounding that follows is 2^-4 relative). The IEEE quotient branches to a slow
// path on v's range: a dozen dependent instructions between a row's reduction (or its scale's
// load) and its first store.
IR_CUDA_PTX_FLOAT_FN(fast_reciprocal, "rcp.approx.f32", 1.f / v)

// The larger and the smaller of two floats, NaN if either is (torch.maximum and torch.minimum;
// PTX max.NaN and min.NaN, sm_80+, one instruction as fmaxf and fminf, which drop a NaN). The
// dynamic scales take them, so that a NaN in a row makes its absmax, scale and outputs NaN, as
// the reference's amax, minimum and clamp do.
#if defined(__CUDA_ARCH__)
__device__ __forceinline__ float max_keeping_nan(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
__device__ __forceinline__ float min_keeping_nan(float a, float b) {
  float r;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
#else
// a + b: NaN where either is
__device__ __forceinline__ float max_keeping_nan(float a, float b) {
  return std::isnan(a) || std::isnan(b) ? a + b : std::fmax(a, b);
}
__device__ __forceinline__ float min_keeping_nan(float a, float b) {
  return std::isnan(a) || std::isnan(b) ? a + b : std::fmin(a, b);
}
#endif

// The dynamic scale of an absmax: amax / 448 (a multiplication by the rounded 1 / 448, within an
// ulp of the quotient), at least kMinScale; NaN where amax is.
__device__ __forceinline__ float scale_of_absmax(float amax) {
  return max_keeping_nan(amax * (1.f / kFp8Max), kMinScale);
}

__device__ __forceinline__ uint8_t to_fp8(float v) {
  // saturating (clamp to +-448) and round-to-nearest-even, as torch's clamp-then-convert
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

// Two values in fp8 bits, the first in the low byte (one conversion instruction on sm_89+).
__device__ __forceinline__ uint16_t to_fp8x2(float lo, float hi) {
  return static_cast<uint16_t>(__nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, __NV_E4M3));
}

// N values times `inv_scale` (a scale's reciprocal) as N / 2 fp8 pairs into `pairs`.
template <int N>
__device__ __forceinline__ void to_fp8_pairs(const float* y, float inv_scale, uint16_t* pairs) {
#pragma unroll
  for (int e = 0; e < N; e += 2) pairs[e / 2] = to_fp8x2(y[e] * inv_scale, y[e + 1] * inv_scale);
}

}  // namespace ir_cuda
