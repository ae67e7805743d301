"""Hugging Face ``transformers`` models on IR ops: `convert_hf_model` converts a model in place
and returns a `ConversionReport`; `FAMILIES` is the registry of the model families it takes
(`SUPPORTED_MODEL_TYPES` their ``config.model_type`` values), from which the docs' model table
is generated.

This subpackage needs ``transformers``, the ``hf`` extra of ir-stack
(``pip install "ir-stack[hf]"``); ``import ir_stack`` alone never imports it.

Modules: `convert` (the entry point), `families` (the registry), `norms` and `mlp` (which
norms and MLPs convert), `modules` (the modules put in), `attention` and `attention_probe`
(the converted attention forward and the plan it follows), `rotary` and `rotation_probe` (the
rotary tables and the rotation form), `projections` (an attention layer's query, key and
value projections joined into one), `experts` (routed experts' gating), `forward` (a forward
for one module) and `probes` (the probe inputs and comparison every check uses).
"""

try:
    import transformers  # noqa: F401
except ImportError as error:
    raise ImportError(
        'ir_stack.hf needs transformers, the "hf" extra of ir-stack: pip install "ir-stack[hf]"'
        f" ({error})"
    ) from error

from .convert import ConversionReport, convert_hf_model
from .families import FAMILIES, SUPPORTED_MODEL_TYPES, Family, ModelType, family_of

__all__ = [
    "FAMILIES",
    "SUPPORTED_MODEL_TYPES",
    "ConversionReport",
    "Family",
    "ModelType",
    "convert_hf_model",
    "family_of",
]
