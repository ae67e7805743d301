"""Reference models written with IR ops."""

from .llama import ONE_B, TINY, DecoderLayer, LlamaConfig, LlamaModel

__all__ = ["ONE_B", "TINY", "DecoderLayer", "LlamaConfig", "LlamaModel"]
