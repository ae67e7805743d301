// silu_and_mul and gelu_and_mul: out[r, i] = act(x[r, i]) * x[r, d + i], float32 math.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

#include "common.cuh"

namespace ir_cuda {
namespace {

enum Activation : int { kSilu = 0, kGelu = 1, kGeluTanh = 2 };

template <int ACT>
__device__ __forceinline__ float activate(float v) {
  if constexpr (ACT == kSilu) {
    return v / (1.f + expf(-v));
  } else if constexpr (ACT == kGelu) {
    return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
  } else {
    const float inner = 0.79788456080286536f * (v + 0.044715f * v * v * v);
    return 0.5f * v * (1.f + tanhf(inner));
  }
}

// Grid: (rows, column blocks); each thread handles one 16-byte vector (or V scalars).
template <typename T, int ACT>
__global__ void gated_kernel(T* out, int64_t out_stride, const T* x, int64_t x_stride,
                             int64_t d) {
  constexpr int V = Vec16<T>::kSize;
  const int64_t row = blockIdx.x;
  const int64_t first = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * V;
  if (first >= d) return;
  T* orow = out + row * out_stride;
  const T* gate = x + row * x_stride;
  const T* up = gate + d;
  if (d % V == 0 && aligned16(orow) && aligned16(gate) && aligned16(up)) {
    const Vec16<T> g = *reinterpret_cast<const Vec16<T>*>(gate + first);
    const Vec16<T> u = *reinterpret_cast<const Vec16<T>*>(up + first);
    Vec16<T> o;
#pragma unroll
    for (int k = 0; k < V; ++k) o.v[k] = static_cast<T>(activate<ACT>(float(g.v[k])) * float(u.v[k]));
    *reinterpret_cast<Vec16<T>*>(orow + first) = o;
  } else {
    for (int64_t i = first; i < first + V && i < d; ++i) {
      orow[i] = static_cast<T>(activate<ACT>(float(gate[i])) * float(up[i]));
    }
  }
}

template <int ACT>
void launch_gated(at::Tensor& out, const at::Tensor& x) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.stride(1) == 1 && x.size(1) % 2 == 0,
              "ir_cuda: x must be a 2-D CUDA tensor with contiguous rows of even width");
  const int64_t rows = x.size(0), d = x.size(1) / 2;
  TORCH_CHECK(out.is_cuda() && out.dim() == 2 && out.stride(1) == 1 && out.size(0) == rows &&
                  out.size(1) == d && out.scalar_type() == x.scalar_type(),
              "ir_cuda: out must be [rows, d] with contiguous rows and x's dtype");
  if (rows == 0 || d == 0) return;
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "ir_cuda_gated", [&] {
    using T = scalar_t;
    constexpr int V = Vec16<T>::kSize;
    const int threads = threads_for(d, V) < 256 ? threads_for(d, V) : 256;
    const int64_t per_block = static_cast<int64_t>(threads) * V;
    const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>((d + per_block - 1) / per_block));
    gated_kernel<T, ACT><<<grid, threads, 0, stream>>>(out.data_ptr<T>(), out.stride(0),
                                                       x.data_ptr<T>(), x.stride(0), d);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void silu_and_mul_out(at::Tensor& out, const at::Tensor& x) { launch_gated<kSilu>(out, x); }

void gelu_and_mul_out(at::Tensor& out, const at::Tensor& x, int64_t tanh_approximation) {
  if (tanh_approximation) {
    launch_gated<kGeluTanh>(out, x);
  } else {
    launch_gated<kGelu>(out, x);
  }
}

}  // namespace ir_cuda
