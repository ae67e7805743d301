// Schemas of torch.ops.ir_cuda.* and their CUDA implementations. Out-variants write into
// preallocated outputs; fused_add_rms_norm_ overwrites its activations.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>

namespace ir_cuda {
void rms_norm_out(at::Tensor& out, const at::Tensor& x, const std::optional<at::Tensor>& weight,
                  double epsilon, std::optional<int64_t> variance_size);
void fused_add_rms_norm_out(at::Tensor& out, at::Tensor& residual_out, const at::Tensor& x,
                            const at::Tensor& x_residual, const std::optional<at::Tensor>& weight,
                            double epsilon, std::optional<int64_t> variance_size);
void fused_add_rms_norm_inplace(at::Tensor& x, at::Tensor& x_residual,
                                const std::optional<at::Tensor>& weight, double epsilon,
                                std::optional<int64_t> variance_size);
void silu_and_mul_out(at::Tensor& out, const at::Tensor& x);
void gelu_and_mul_out(at::Tensor& out, const at::Tensor& x, int64_t tanh_approximation);
}  // namespace ir_cuda

TORCH_LIBRARY(ir_cuda, m) {
  m.def("rms_norm_out(Tensor(a!) out, Tensor x, Tensor? weight, float epsilon, "
        "int? variance_size) -> ()");
  m.def("fused_add_rms_norm_out(Tensor(a!) out, Tensor(b!) residual_out, Tensor x, "
        "Tensor x_residual, Tensor? weight, float epsilon, int? variance_size) -> ()");
  m.def("fused_add_rms_norm_(Tensor(a!) x, Tensor(b!) x_residual, Tensor? weight, "
        "float epsilon, int? variance_size) -> ()");
  m.def("silu_and_mul_out(Tensor(a!) out, Tensor x) -> ()");
  m.def("gelu_and_mul_out(Tensor(a!) out, Tensor x, int tanh_approximation) -> ()");
}

TORCH_LIBRARY_IMPL(ir_cuda, CUDA, m) {
  m.impl("rms_norm_out", &ir_cuda::rms_norm_out);
  m.impl("fused_add_rms_norm_out", &ir_cuda::fused_add_rms_norm_out);
  m.impl("fused_add_rms_norm_", &ir_cuda::fused_add_rms_norm_inplace);
  m.impl("silu_and_mul_out", &ir_cuda::silu_and_mul_out);
  m.impl("gelu_and_mul_out", &ir_cuda::gelu_and_mul_out);
}
