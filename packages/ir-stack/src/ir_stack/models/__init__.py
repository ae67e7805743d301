"""Reference models written with IR ops: a Llama-style decoder (`LlamaModel`, configurations
`TINY` and `ONE_B`), its fp8 linear layer (`Fp8Linear`) and its tensor-parallel form
(`ParallelLlamaModel`, `ir_stack.models.parallel`). Hugging Face ``transformers`` models run on
IR ops through `ir_stack.hf`."""

from .llama import ONE_B, TINY, DecoderLayer, LlamaConfig, LlamaModel
from .parallel import ParallelLlamaModel
from .quant import Fp8Linear

__all__ = [
    "ONE_B",
    "TINY",
    "DecoderLayer",
    "Fp8Linear",
    "LlamaConfig",
    "LlamaModel",
    "ParallelLlamaModel",
]
