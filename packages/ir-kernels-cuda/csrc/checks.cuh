// Host side: the dtype dispatch of the ops and the checks of their tensor arguments (device,
// layout, alignment, strides in 32 bits), with errors that name the argument.
#pragma once

#include "device.cuh"

namespace ir_cuda {

// AT_DISPATCH_FLOATING_TYPES_AND2 without double: the kernels take float32, float16, bfloat16.
#define IR_CUDA_DISPATCH_FLOAT(TYPE, NAME, ...)                                          \
  AT_DISPATCH_SWITCH(TYPE, "ir_cuda_" NAME,                                              \
                     AT_DISPATCH_CASE(at::kFloat, __VA_ARGS__)                          \
                         AT_DISPATCH_CASE(at::kHalf, __VA_ARGS__)                       \
                             AT_DISPATCH_CASE(at::kBFloat16, __VA_ARGS__))

// Host side: `p` is `bytes`-aligned.
inline bool aligned_host(const void* p, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0;
}

// Host side: the bytes of `t`'s elements.
inline int64_t tensor_bytes(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

// Host side: every row of the 2-D tensor `t` starts `bytes`-aligned (its base and its row stride).
inline bool rows_aligned(const at::Tensor& t, int64_t bytes) {
  return aligned_host(t.data_ptr(), bytes) &&
         (t.size(0) <= 1 || (t.stride(0) * static_cast<int64_t>(t.element_size())) % bytes == 0);
}

inline void check_rows(const at::Tensor& t, const char* name) {
  TORCH_CHECK(on_kernel_device(t) && t.dim() == 2 && (t.size(1) <= 1 || t.stride(1) == 1),
              "ir_cuda: ", name, " must be a 2-D ", kDeviceName,
              " tensor with contiguous rows, got sizes ", t.sizes(), " strides ", t.strides(),
              " on ", t.device());
}

// Host side: a stride as the kernels take it, in 32 bits (an address is then one
// 32 x 32 -> 64-bit multiply); `what` names it in the error.
inline int stride_32(int64_t stride, const char* what) {
  TORCH_CHECK(stride >= 0 && stride <= std::numeric_limits<int>::max(), "ir_cuda: ", what,
              " is ", stride, " elements; the kernels take strides of 0 to 2^31 - 1");
  return static_cast<int>(stride);
}

// Host side: the row stride of the 2-D tensor `t` in 32 bits. A single row's stride is never
// used.
inline int row_stride(const at::Tensor& t, const char* name) {
  if (t.size(0) <= 1) return 0;
  const std::string what = std::string(name) + "'s row stride";
  return stride_32(t.stride(0), what.c_str());
}

inline void check_same(const at::Tensor& t, const char* name, const at::Tensor& x) {
  check_rows(t, name);
  TORCH_CHECK(t.sizes() == x.sizes() && t.scalar_type() == x.scalar_type(), "ir_cuda: ", name,
              " must match x in shape ", x.sizes(), " and dtype ", x.scalar_type(), ", got ",
              t.sizes(), " ", t.scalar_type());
}

inline void check_fp8(const at::Tensor& t, const char* name, at::IntArrayRef sizes) {
  check_rows(t, name);
  TORCH_CHECK(t.scalar_type() == at::kFloat8_e4m3fn && t.sizes() == sizes, "ir_cuda: ", name,
              " must be float8_e4m3fn of sizes ", sizes, ", got ", t.scalar_type(), " ",
              t.sizes());
}

inline void check_scale(const at::Tensor& t, const char* name, const at::Tensor& x) {
  TORCH_CHECK(on_kernel_device(t) && t.device() == x.device() && t.scalar_type() == at::kFloat &&
                  t.numel() == 1,
              "ir_cuda: ", name, " must be a one-element float32 tensor on ", x.device());
}

}  // namespace ir_cuda
