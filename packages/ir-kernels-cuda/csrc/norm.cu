// rms_norm and fused_add_rms_norm: one block per row, 16-byte accesses where the row allows.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

#include <optional>

#include "common.cuh"

namespace ir_cuda {
namespace {

// Pass 1 (with ADD: r = round(x + residual), stored to residual_out) sums the squares of the
// first `var_size` elements; pass 2 writes round(src * inv_rms * weight) in float32 math, where
// src is x, or the rounded sum. Each element is read and written by the same thread in both
// passes, so out may alias x and residual_out may alias residual (the in-place variant).
template <typename T, bool ADD>
__global__ void rms_norm_kernel(T* out, int64_t out_stride, T* residual_out,
                                int64_t residual_out_stride, const T* x, int64_t x_stride,
                                const T* residual, int64_t residual_stride,
                                const T* __restrict__ weight, int64_t hidden, int64_t var_size,
                                float eps) {
  constexpr int V = Vec16<T>::kSize;
  const int64_t row = blockIdx.x;
  T* orow = out + row * out_stride;
  const T* xrow = x + row * x_stride;
  T* rrow = ADD ? residual_out + row * residual_out_stride : nullptr;
  const T* resrow = ADD ? residual + row * residual_stride : nullptr;
  const T* src = ADD ? rrow : xrow;
  const bool vec = hidden % V == 0 && aligned16(orow) && aligned16(xrow) &&
                   (weight == nullptr || aligned16(weight)) &&
                   (!ADD || (aligned16(rrow) && aligned16(resrow)));
  float squares = 0.f;
  if (vec) {
    for (int64_t j = threadIdx.x; j < hidden / V; j += blockDim.x) {
      Vec16<T> a = reinterpret_cast<const Vec16<T>*>(xrow)[j];
      if constexpr (ADD) {
        const Vec16<T> b = reinterpret_cast<const Vec16<T>*>(resrow)[j];
#pragma unroll
        for (int k = 0; k < V; ++k) a.v[k] = static_cast<T>(float(a.v[k]) + float(b.v[k]));
        reinterpret_cast<Vec16<T>*>(rrow)[j] = a;
      }
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float f = float(a.v[k]);
        if (j * V + k < var_size) squares += f * f;
      }
    }
  } else {
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
      T a = xrow[i];
      if constexpr (ADD) {
        a = static_cast<T>(float(a) + float(resrow[i]));
        rrow[i] = a;
      }
      const float f = float(a);
      if (i < var_size) squares += f * f;
    }
  }
  const float inv_rms = rsqrtf(block_sum(squares) / static_cast<float>(var_size) + eps);
  if (vec) {
    for (int64_t j = threadIdx.x; j < hidden / V; j += blockDim.x) {
      const Vec16<T> a = reinterpret_cast<const Vec16<T>*>(src)[j];
      Vec16<T> o;
      if (weight != nullptr) {
        const Vec16<T> w = reinterpret_cast<const Vec16<T>*>(weight)[j];
#pragma unroll
        for (int k = 0; k < V; ++k) o.v[k] = static_cast<T>(float(a.v[k]) * inv_rms * float(w.v[k]));
      } else {
#pragma unroll
        for (int k = 0; k < V; ++k) o.v[k] = static_cast<T>(float(a.v[k]) * inv_rms);
      }
      reinterpret_cast<Vec16<T>*>(orow)[j] = o;
    }
  } else {
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
      const float scaled = float(src[i]) * inv_rms;
      orow[i] = static_cast<T>(weight != nullptr ? scaled * float(weight[i]) : scaled);
    }
  }
}

void check_rows(const at::Tensor& t, const char* name, const at::Tensor& x) {
  TORCH_CHECK(t.is_cuda() && t.dim() == 2 && t.stride(1) == 1,
              "ir_cuda: ", name, " must be a 2-D CUDA tensor with contiguous rows");
  TORCH_CHECK(t.sizes() == x.sizes() && t.scalar_type() == x.scalar_type(),
              "ir_cuda: ", name, " must match x in shape and dtype");
}

template <bool ADD>
void launch_norm(at::Tensor& out, at::Tensor* residual_out, const at::Tensor& x,
                 const at::Tensor* residual, const std::optional<at::Tensor>& weight,
                 double epsilon, std::optional<int64_t> variance_size) {
  check_rows(x, "x", x);
  check_rows(out, "out", x);
  if constexpr (ADD) {
    check_rows(*residual_out, "residual_out", x);
    check_rows(*residual, "x_residual", x);
  }
  const int64_t rows = x.size(0), hidden = x.size(1);
  const int64_t var_size = variance_size.value_or(hidden);
  TORCH_CHECK(var_size > 0 && var_size <= hidden, "ir_cuda: variance_size out of range");
  if (weight.has_value()) {
    TORCH_CHECK(weight->is_contiguous() && weight->numel() == hidden &&
                    weight->scalar_type() == x.scalar_type(),
                "ir_cuda: weight must be contiguous, of x's hidden size and dtype");
  }
  if (rows == 0) return;
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "ir_cuda_rms_norm", [&] {
    using T = scalar_t;
    const int threads = threads_for(hidden, Vec16<T>::kSize);
    const T* w = weight.has_value() ? weight->data_ptr<T>() : nullptr;
    T* r_out = ADD ? residual_out->data_ptr<T>() : nullptr;
    const T* r_in = ADD ? residual->data_ptr<T>() : nullptr;
    rms_norm_kernel<T, ADD><<<rows, threads, 0, stream>>>(
        out.data_ptr<T>(), out.stride(0), r_out, ADD ? residual_out->stride(0) : 0,
        x.data_ptr<T>(), x.stride(0), r_in, ADD ? residual->stride(0) : 0, w, hidden, var_size,
        static_cast<float>(epsilon));
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void rms_norm_out(at::Tensor& out, const at::Tensor& x, const std::optional<at::Tensor>& weight,
                  double epsilon, std::optional<int64_t> variance_size) {
  launch_norm<false>(out, nullptr, x, nullptr, weight, epsilon, variance_size);
}

void fused_add_rms_norm_out(at::Tensor& out, at::Tensor& residual_out, const at::Tensor& x,
                            const at::Tensor& x_residual, const std::optional<at::Tensor>& weight,
                            double epsilon, std::optional<int64_t> variance_size) {
  launch_norm<true>(out, &residual_out, x, &x_residual, weight, epsilon, variance_size);
}

void fused_add_rms_norm_inplace(at::Tensor& x, at::Tensor& x_residual,
                                const std::optional<at::Tensor>& weight, double epsilon,
                                std::optional<int64_t> variance_size) {
  launch_norm<true>(x, &x_residual, x, &x_residual, weight, epsilon, variance_size);
}

}  // namespace ir_cuda
