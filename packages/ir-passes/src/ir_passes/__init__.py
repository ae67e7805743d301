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

The contract (``__all__``): the four pass classes, `PassConfig` with the fusions it switches
(`FUSIONS`, `Fusion`) and its optimization levels (`LEVELS`), `compile`,
`inductor_options`, `selection_key` (the key of the compiled code's selection state) and the
reports (`PassReport`, `last_report`, `collect_reports`). Names imported ``as`` themselves
below (the fusion patterns, the Inductor hook classes) stay importable here for existing
callers but are outside it: import them from `ir_passes.fusion` and `ir_passes.inductor`.
"""

from ._version import __version__
from .clones import CloneEliminationPass
from .config import FUSION_SWITCHES as FUSION_SWITCHES
from .config import FUSIONS, LEVELS, Fusion, PassConfig
from .config import QK_NORM_ROPE_PATTERN as QK_NORM_ROPE_PATTERN
from .config import RESIDUAL_ADD_PATTERN as RESIDUAL_ADD_PATTERN
from .config import ROPE_KVCACHE_PATTERN as ROPE_KVCACHE_PATTERN
from .functionalize import InplaceFunctionalizationPass
from .fusion import PATTERNS as PATTERNS
from .fusion import FusionPass
from .fusion import FusionPattern as FusionPattern
from .inductor import PostGradPass as PostGradPass
from .inductor import PreGradPass as PreGradPass
from .inductor import compile, inductor_options, selection_key
from .lowering import LoweringPass
from .report import PassReport, collect_reports, last_report

__all__ = [
    "FUSIONS",
    "LEVELS",
    "CloneEliminationPass",
    "Fusion",
    "FusionPass",
    "InplaceFunctionalizationPass",
    "LoweringPass",
    "PassConfig",
    "PassReport",
    "__version__",
    "collect_reports",
    "compile",
    "inductor_options",
    "last_report",
    "selection_key",
]
