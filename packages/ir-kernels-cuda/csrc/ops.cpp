// Schemas of torch.ops.ir_cuda.* and their CUDA implementations. Out-variants write into
// preallocated outputs (fp8 outputs as float8_e4m3fn); fused_add_rms_norm_, rotary_embedding_,
// qk_norm_rotary_embedding_ and rotary_embedding_write_kv_cache_ overwrite their activations;
// write_kv_cache and the rotary embedding's cache write store into the KV caches they are given. Built with IR_CUDA_HOST_EMULATION, the same
// ops are torch.ops.ir_cuda_emulated.* on CPU tensors (the kernels run on the CPU); built with
// IR_CUDA_PROGRAMMATIC, torch.ops.ir_cuda_programmatic.*, launched as programmatic dependent
// launches (device.cuh).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>

#if defined(IR_CUDA_HOST_EMULATION)
#define IR_CUDA_LIBRARY ir_cuda_emulated
#define IR_CUDA_DISPATCH_KEY CPU
#elif defined(IR_CUDA_PROGRAMMATIC)
#define IR_CUDA_LIBRARY ir_cuda_programmatic
#define IR_CUDA_DISPATCH_KEY CUDA
#else
#define IR_CUDA_LIBRARY ir_cuda
#define IR_CUDA_DISPATCH_KEY CUDA
#endif
// one more expansion step, so that the macros above are replaced before TORCH_LIBRARY pastes
#define IR_CUDA_TORCH_LIBRARY(ns, m) TORCH_LIBRARY(ns, m)
#define IR_CUDA_TORCH_LIBRARY_IMPL(ns, key, m) TORCH_LIBRARY_IMPL(ns, key, m)

namespace ir_cuda {
using OptTensor = std::optional<at::Tensor>;
void rms_norm_out(at::Tensor& out, const at::Tensor& x, const OptTensor& weight, double epsilon,
                  std::optional<int64_t> variance_size);
void fused_add_rms_norm_out(at::Tensor& out, at::Tensor& residual_out, const at::Tensor& x,
                            const at::Tensor& x_residual, const OptTensor& weight, double epsilon,
                            std::optional<int64_t> variance_size);
void fused_add_rms_norm_inplace(at::Tensor& x, at::Tensor& x_residual, const OptTensor& weight,
                                double epsilon, std::optional<int64_t> variance_size);
void rms_norm_static_quant_fp8_out(at::Tensor& out, const at::Tensor& x, const OptTensor& weight,
                                   double epsilon, const at::Tensor& scale);
void fused_add_rms_norm_static_quant_fp8_out(at::Tensor& out, at::Tensor& residual_out,
                                             const at::Tensor& x, const at::Tensor& x_residual,
                                             const OptTensor& weight, double epsilon,
                                             const at::Tensor& scale);
void rms_norm_dynamic_quant_fp8_out(at::Tensor& out, at::Tensor& scale_out, const at::Tensor& x,
                                    const OptTensor& weight, double epsilon,
                                    const OptTensor& scale_ub);
void dynamic_quant_fp8_out(at::Tensor& out, at::Tensor& scale_out, const at::Tensor& x,
                           const OptTensor& scale_ub);
void group_quant_fp8_out(at::Tensor& out, at::Tensor& scale_out, const at::Tensor& x,
                         int64_t group_size);
void static_quant_fp8_out(at::Tensor& out, const at::Tensor& x, const at::Tensor& scale);
void empty_kernel(const at::Tensor& device_of);
void silu_and_mul_out(at::Tensor& out, const at::Tensor& x);
void gelu_and_mul_out(at::Tensor& out, const at::Tensor& x, int64_t tanh_approximation);
void silu_and_mul_static_quant_fp8_out(at::Tensor& out, const at::Tensor& x,
                                       const at::Tensor& scale);
void rotary_embedding_out(at::Tensor& query_out, at::Tensor& key_out, const at::Tensor& positions,
                          const at::Tensor& query, const at::Tensor& key, int64_t head_size,
                          const at::Tensor& cos_sin_cache, bool is_neox_style);
void rotary_embedding_inplace(at::Tensor& query, at::Tensor& key, const at::Tensor& positions,
                              int64_t head_size, const at::Tensor& cos_sin_cache,
                              bool is_neox_style);
void fused_add_rms_norm_dynamic_quant_fp8_out(at::Tensor& out, at::Tensor& scale_out, at::Tensor& residual_out,
                                              const at::Tensor& x, const at::Tensor& x_residual,
                                              const OptTensor& weight, double epsilon, const OptTensor& scale_ub);
void rms_norm_group_quant_fp8_out(at::Tensor& out, at::Tensor& scale_out, const at::Tensor& x,
                                  const OptTensor& weight, double epsilon, int64_t group_size);
void fused_add_rms_norm_group_quant_fp8_out(at::Tensor& out, at::Tensor& scale_out, at::Tensor& residual_out,
                                            const at::Tensor& x, const at::Tensor& x_residual,
                                            const OptTensor& weight, double epsilon, int64_t group_size);
void silu_and_mul_group_quant_fp8_out(at::Tensor& out, at::Tensor& scale_out, const at::Tensor& x,
                                      int64_t group_size);
void qk_norm_rotary_embedding_out(at::Tensor& query_out, at::Tensor& key_out, const at::Tensor& positions,
                                  const at::Tensor& query, const at::Tensor& key, const OptTensor& q_weight,
                                  const OptTensor& k_weight, double epsilon, int64_t head_size,
                                  const at::Tensor& cos_sin_cache, bool is_neox_style);
void qk_norm_rotary_embedding_inplace(at::Tensor& query, at::Tensor& key, const at::Tensor& positions,
                                      const OptTensor& q_weight, const OptTensor& k_weight, double epsilon,
                                      int64_t head_size, const at::Tensor& cos_sin_cache, bool is_neox_style);
void rotary_embedding_write_kv_cache_out(at::Tensor& query_out, at::Tensor& key_out, const at::Tensor& positions,
                                         const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                                         int64_t head_size, const at::Tensor& cos_sin_cache, bool is_neox_style,
                                         at::Tensor& key_cache, at::Tensor& value_cache,
                                         const at::Tensor& slot_mapping);
void rotary_embedding_write_kv_cache_inplace(at::Tensor& query, at::Tensor& key, const at::Tensor& positions,
                                             const at::Tensor& value, int64_t head_size,
                                             const at::Tensor& cos_sin_cache, bool is_neox_style,
                                             at::Tensor& key_cache, at::Tensor& value_cache,
                                             const at::Tensor& slot_mapping);
void write_kv_cache(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache, at::Tensor& value_cache,
                    const at::Tensor& slot_mapping);
}  // namespace ir_cuda

IR_CUDA_TORCH_LIBRARY(IR_CUDA_LIBRARY, m) {
  m.def("rms_norm_out(Tensor(a!) out, Tensor x, Tensor? weight, float epsilon, "
        "int? variance_size) -> ()");
  m.def("fused_add_rms_norm_out(Tensor(a!) out, Tensor(b!) residual_out, Tensor x, "
        "Tensor x_residual, Tensor? weight, float epsilon, int? variance_size) -> ()");
  m.def("fused_add_rms_norm_(Tensor(a!) x, Tensor(b!) x_residual, Tensor? weight, "
        "float epsilon, int? variance_size) -> ()");
  m.def("rms_norm_static_quant_fp8_out(Tensor(a!) out, Tensor x, Tensor? weight, "
        "float epsilon, Tensor scale) -> ()");
  m.def("fused_add_rms_norm_static_quant_fp8_out(Tensor(a!) out, Tensor(b!) residual_out, "
        "Tensor x, Tensor x_residual, Tensor? weight, float epsilon, Tensor scale) -> ()");
  m.def("rms_norm_dynamic_quant_fp8_out(Tensor(a!) out, Tensor(b!) scale_out, Tensor x, "
        "Tensor? weight, float epsilon, Tensor? scale_ub) -> ()");
  m.def("dynamic_quant_fp8_out(Tensor(a!) out, Tensor(b!) scale_out, Tensor x, "
        "Tensor? scale_ub) -> ()");
  m.def("group_quant_fp8_out(Tensor(a!) out, Tensor(b!) scale_out, Tensor x, "
        "int group_size) -> ()");
  m.def("static_quant_fp8_out(Tensor(a!) out, Tensor x, Tensor scale) -> ()");
  m.def("empty_kernel(Tensor device_of) -> ()");
  m.def("silu_and_mul_out(Tensor(a!) out, Tensor x) -> ()");
  m.def("gelu_and_mul_out(Tensor(a!) out, Tensor x, int tanh_approximation) -> ()");
  m.def("silu_and_mul_static_quant_fp8_out(Tensor(a!) out, Tensor x, Tensor scale) -> ()");
  m.def("rotary_embedding_out(Tensor(a!) query_out, Tensor(b!) key_out, Tensor positions, "
        "Tensor query, Tensor key, int head_size, Tensor cos_sin_cache, bool is_neox_style) -> ()");
  m.def("rotary_embedding_(Tensor(a!) query, Tensor(b!) key, Tensor positions, int head_size, "
        "Tensor cos_sin_cache, bool is_neox_style) -> ()");
  m.def("fused_add_rms_norm_dynamic_quant_fp8_out(Tensor(a!) out, Tensor(b!) scale_out, "
        "Tensor(c!) residual_out, Tensor x, Tensor x_residual, Tensor? weight, float epsilon, "
        "Tensor? scale_ub) -> ()");
  m.def("rms_norm_group_quant_fp8_out(Tensor(a!) out, Tensor(b!) scale_out, Tensor x, Tensor? weight, "
        "float epsilon, int group_size) -> ()");
  m.def("fused_add_rms_norm_group_quant_fp8_out(Tensor(a!) out, Tensor(b!) scale_out, "
        "Tensor(c!) residual_out, Tensor x, Tensor x_residual, Tensor? weight, float epsilon, "
        "int group_size) -> ()");
  m.def("silu_and_mul_group_quant_fp8_out(Tensor(a!) out, Tensor(b!) scale_out, Tensor x, "
        "int group_size) -> ()");
  m.def("qk_norm_rotary_embedding_out(Tensor(a!) query_out, Tensor(b!) key_out, Tensor positions, "
        "Tensor query, Tensor key, Tensor? q_weight, Tensor? k_weight, float epsilon, int head_size, "
        "Tensor cos_sin_cache, bool is_neox_style) -> ()");
  m.def("qk_norm_rotary_embedding_(Tensor(a!) query, Tensor(b!) key, Tensor positions, "
        "Tensor? q_weight, Tensor? k_weight, float epsilon, int head_size, Tensor cos_sin_cache, "
        "bool is_neox_style) -> ()");
  m.def("rotary_embedding_write_kv_cache_out(Tensor(a!) query_out, Tensor(b!) key_out, "
        "Tensor positions, Tensor query, Tensor key, Tensor value, int head_size, "
        "Tensor cos_sin_cache, bool is_neox_style, Tensor(c!) key_cache, Tensor(d!) value_cache, "
        "Tensor slot_mapping) -> ()");
  m.def("rotary_embedding_write_kv_cache_(Tensor(a!) query, Tensor(b!) key, Tensor positions, "
        "Tensor value, int head_size, Tensor cos_sin_cache, bool is_neox_style, "
        "Tensor(c!) key_cache, Tensor(d!) value_cache, Tensor slot_mapping) -> ()");
  m.def("write_kv_cache(Tensor key, Tensor value, Tensor(a!) key_cache, Tensor(b!) value_cache, "
        "Tensor slot_mapping) -> ()");
}

IR_CUDA_TORCH_LIBRARY_IMPL(IR_CUDA_LIBRARY, IR_CUDA_DISPATCH_KEY, m) {
  m.impl("rms_norm_out", &ir_cuda::rms_norm_out);
  m.impl("fused_add_rms_norm_out", &ir_cuda::fused_add_rms_norm_out);
  m.impl("fused_add_rms_norm_", &ir_cuda::fused_add_rms_norm_inplace);
  m.impl("rms_norm_static_quant_fp8_out", &ir_cuda::rms_norm_static_quant_fp8_out);
  m.impl("fused_add_rms_norm_static_quant_fp8_out",
         &ir_cuda::fused_add_rms_norm_static_quant_fp8_out);
  m.impl("rms_norm_dynamic_quant_fp8_out", &ir_cuda::rms_norm_dynamic_quant_fp8_out);
  m.impl("dynamic_quant_fp8_out", &ir_cuda::dynamic_quant_fp8_out);
  m.impl("group_quant_fp8_out", &ir_cuda::group_quant_fp8_out);
  m.impl("static_quant_fp8_out", &ir_cuda::static_quant_fp8_out);
  m.impl("empty_kernel", &ir_cuda::empty_kernel);
  m.impl("silu_and_mul_out", &ir_cuda::silu_and_mul_out);
  m.impl("gelu_and_mul_out", &ir_cuda::gelu_and_mul_out);
  m.impl("silu_and_mul_static_quant_fp8_out", &ir_cuda::silu_and_mul_static_quant_fp8_out);
  m.impl("rotary_embedding_out", &ir_cuda::rotary_embedding_out);
  m.impl("rotary_embedding_", &ir_cuda::rotary_embedding_inplace);
  m.impl("fused_add_rms_norm_dynamic_quant_fp8_out", &ir_cuda::fused_add_rms_norm_dynamic_quant_fp8_out);
  m.impl("rms_norm_group_quant_fp8_out", &ir_cuda::rms_norm_group_quant_fp8_out);
  m.impl("fused_add_rms_norm_group_quant_fp8_out", &ir_cuda::fused_add_rms_norm_group_quant_fp8_out);
  m.impl("silu_and_mul_group_quant_fp8_out", &ir_cuda::silu_and_mul_group_quant_fp8_out);
  m.impl("qk_norm_rotary_embedding_out", &ir_cuda::qk_norm_rotary_embedding_out);
  m.impl("qk_norm_rotary_embedding_", &ir_cuda::qk_norm_rotary_embedding_inplace);
  m.impl("rotary_embedding_write_kv_cache_out", &ir_cuda::rotary_embedding_write_kv_cache_out);
  m.impl("rotary_embedding_write_kv_cache_", &ir_cuda::rotary_embedding_write_kv_cache_inplace);
  m.impl("write_kv_cache", &ir_cuda::write_kv_cache);
}
