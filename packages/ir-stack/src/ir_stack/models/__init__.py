"""Reference models written with IR ops."""

from .llama import ONE_B, TINY, DecoderLayer, LlamaConfig, LlamaModel
from .quant import Fp8Linear

__all__ = ["ONE_B", "TINY", "DecoderLayer", "Fp8Linear", "LlamaConfig", "LlamaModel"]
