"""Reference models written with IR ops: a Llama-style decoder (`LlamaModel`, configurations
`TINY` and `ONE_B`), its Qwen3-style variant with per-head query and key norms
(``LlamaConfig(qk_norm=True)``: `QWEN3_TINY`, `QWEN3_4B`), the KV-cache slots of a call
(`slot_mapping`), the fp8 linear layer (`Fp8Linear`) and the tensor-parallel form
(`ParallelLlamaModel`, `ir_stack.models.parallel`). Hugging Face ``transformers`` models run
on IR ops through `ir_stack.hf`."""

from .llama import (
    ONE_B,
    QWEN3_4B,
    QWEN3_TINY,
    TINY,
    DecoderLayer,
    LlamaConfig,
    LlamaModel,
    slot_mapping,
)
from .parallel import ParallelLlamaModel
from .quant import Fp8Linear

__all__ = [
    "ONE_B",
    "QWEN3_4B",
    "QWEN3_TINY",
    "TINY",
    "DecoderLayer",
    "Fp8Linear",
    "LlamaConfig",
    "LlamaModel",
    "ParallelLlamaModel",
    "slot_mapping",
]
