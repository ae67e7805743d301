"""ir-passes: FX passes over ir-spec ops inside torch.compile.

The pipeline: `InplaceFunctionalizationPass` (pre-grad: ``maybe_inplace`` -> default, donated
inputs recorded), then after AOTAutograd the fusion passes (a residual add and the norm after
it into ``fused_add_rms_norm``; norm / activation + fp8 quant into the composite ops; per-head
query / key norms and the rotary embedding into ``qk_norm_rotary_embedding``; the rotary
embedding and the KV-cache write into ``rotary_embedding_write_kv_cache``), each under its
`PassConfig` switch, level and token threshold,
`LoweringPass` (each IR op -> the implementation ir-dispatch selects on the
node's fake tensors, in-place ones with clones) and `CloneEliminationPass` (clones provably
unneeded are removed, aliasing taken into account). `inductor_options` installs them in
Inductor; `compile` wraps `torch.compile` with them; `last_report` tells what they did in
the last compilation, `collect_reports` in every compilation of a block.
"""

from ._version import __version__
from .clones import CloneEliminationPass
from .config import (
    FUSION_SWITCHES,
    FUSIONS,
    LEVELS,
    QK_NORM_ROPE_PATTERN,
    RESIDUAL_ADD_PATTERN,
    ROPE_KVCACHE_PATTERN,
    Fusion,
    PassConfig,
)
from .functionalize import InplaceFunctionalizationPass
from .fusion import PATTERNS, FusionPass, FusionPattern
from .inductor import PostGradPass, PreGradPass, compile, inductor_options, selection_key
from .lowering import LoweringPass
from .report import PassReport, collect_reports, last_report

__all__ = [
    "FUSIONS",
    "FUSION_SWITCHES",
    "LEVELS",
    "PATTERNS",
    "QK_NORM_ROPE_PATTERN",
    "RESIDUAL_ADD_PATTERN",
    "ROPE_KVCACHE_PATTERN",
    "CloneEliminationPass",
    "Fusion",
    "FusionPass",
    "FusionPattern",
    "InplaceFunctionalizationPass",
    "LoweringPass",
    "PassConfig",
    "PassReport",
    "PostGradPass",
    "PreGradPass",
    "__version__",
    "collect_reports",
    "compile",
    "inductor_options",
    "last_report",
    "selection_key",
]
