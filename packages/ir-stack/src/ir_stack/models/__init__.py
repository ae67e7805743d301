"""Reference models written with IR ops: a Llama-style decoder (`LlamaModel`, configurations
`TINY` and `ONE_B`) and its fp8 linear layer (`Fp8Linear`). Hugging Face ``transformers``
models run on IR ops through `ir_stack.hf`."""

from .llama import ONE_B, TINY, DecoderLayer, LlamaConfig, LlamaModel
from .quant import Fp8Linear

__all__ = [
    "ONE_B",
    "TINY",
    "DecoderLayer",
    "Fp8Linear",
    "LlamaConfig",
    "LlamaModel",
]
