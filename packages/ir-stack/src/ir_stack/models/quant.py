"""`Fp8Linear`: a linear layer with fp8 (e4m3) weights and a static per-tensor input scale.

Its input goes through ``ir_spec.ops.static_quant_fp8`` right after a norm or an activation,
which is the pattern ir-passes fuses (``rms_norm_static_quant_fp8``,
``fused_add_rms_norm_static_quant_fp8``, ``silu_and_mul_static_quant_fp8``). The matrix
product is ``torch._scaled_mm``.
"""

from typing import Any

import torch
from torch import Tensor, nn

from ir_spec import ops
from ir_spec.catalog.quant import FP8_MAX, saturate_fp8


class Fp8Linear(nn.Module):
    """``y = (static_quant_fp8(x, s_x) @ W_fp8.T) * s_x * s_w`` without bias.

    The fp8 weight and the float32 scales are stored as raw bits (uint8 and int32 buffers,
    viewed back on use) so that ``model.to(dtype)`` casts the activations' dtype but leaves
    them alone. The input scale is set by `observe` / `freeze_input_scale` (calibration).
    `op_namespace` provides ``static_quant_fp8`` (``ir_spec.ops`` unless a plain-torch model).
    """

    weight_bits: Tensor
    weight_scale_bits: Tensor
    input_scale_bits: Tensor

    def __init__(self, weight: Tensor, op_namespace: Any = ops) -> None:
        super().__init__()
        self.ops = op_namespace
        out_features, in_features = weight.shape
        if in_features % 16 or out_features % 16:
            raise ValueError(
                f"Fp8Linear: got weight of shape {tuple(weight.shape)}; expected both sizes "
                "multiples of 16 (a requirement of fp8 matrix products)"
            )
        w = weight.detach().float()
        w_scale = (w.abs().max().clamp(min=1e-12) / FP8_MAX).reshape(1)
        self.register_buffer("weight_bits", saturate_fp8(w / w_scale).view(torch.uint8))
        self.register_buffer("weight_scale_bits", w_scale.view(torch.int32))
        self.register_buffer("input_scale_bits", torch.ones(1).view(torch.int32))
        #: while True, `forward` observes its inputs and computes in full precision
        self.calibrating = False
        self.observed_amax = 0.0

    @property
    def weight(self) -> Tensor:
        """The fp8 weight, ``[out_features, in_features]``."""
        return self.weight_bits.view(torch.float8_e4m3fn)

    @property
    def weight_scale(self) -> Tensor:
        """The weight's per-tensor scale (float32, one element)."""
        return self.weight_scale_bits.view(torch.float32)

    @property
    def input_scale(self) -> Tensor:
        """The input's static per-tensor scale (float32, one element)."""
        return self.input_scale_bits.view(torch.float32)

    def observe(self, x: Tensor) -> Tensor:
        """Calibration: record the input's largest magnitude and compute in full precision."""
        amax = float(x.detach().abs().max()) if x.numel() else 0.0
        self.observed_amax = max(self.observed_amax, amax)
        w = self.weight.to(x.dtype) * self.weight_scale.to(x.dtype)
        return x @ w.t()

    def freeze_input_scale(self) -> None:
        """Set the input scale from the largest magnitude observed (``amax / 448``)."""
        if self.observed_amax <= 0.0:
            raise RuntimeError("Fp8Linear: freeze_input_scale called before any nonzero input")
        scale = torch.tensor([self.observed_amax / FP8_MAX], dtype=torch.float32)
        self.input_scale_bits.copy_(scale.view(torch.int32))
        self.calibrating = False
        self.observed_amax = 0.0

    def forward(self, x: Tensor) -> Tensor:
        if self.calibrating:
            return self.observe(x)
        shape = x.shape
        if x.dim() != 2:  # only reshape when needed: a view between norm and quant blocks fusion
            x = x.reshape(-1, shape[-1])
        xq = self.ops.static_quant_fp8(x, self.input_scale)
        y = torch._scaled_mm(
            xq, self.weight.t(), self.input_scale, self.weight_scale, out_dtype=x.dtype
        )
        return y if len(shape) == 2 else y.reshape(*shape[:-1], y.shape[-1])
