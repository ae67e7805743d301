"""Reference models written with IR ops, and `convert_hf_model` for transformers models."""

from .hf import ConversionReport, convert_hf_model
from .llama import ONE_B, TINY, DecoderLayer, LlamaConfig, LlamaModel
from .quant import Fp8Linear

__all__ = [
    "ONE_B",
    "TINY",
    "ConversionReport",
    "DecoderLayer",
    "Fp8Linear",
    "LlamaConfig",
    "LlamaModel",
    "convert_hf_model",
]
