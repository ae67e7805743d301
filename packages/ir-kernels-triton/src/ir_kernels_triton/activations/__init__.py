"""The gated activations (`gated`): silu and gelu gates, optionally quantized to fp8."""
