"""`counters`: what piecewise compilation did in this process."""

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ir_passes.autotune import Decision


@dataclass
class Counters:
    """Process-wide counts; `reset` sets them back to zero.

    Attributes:
        num_graphs_seen: graphs handed to the piecewise backend (traced or loaded).
        num_traces_loaded: traces loaded from the compile cache instead of running Dynamo.
        num_piecewise_graphs_seen: pieces after splitting, splitting ops included.
        num_piecewise_capturable_graphs_seen: pieces that are compiled and may be captured.
        num_backend_compilations: pieces compiled by the backend (not served by the cache).
        num_cudagraph_captured: CUDA graphs captured (per piece and size, or whole forwards).
        num_cache_hits: compiled pieces loaded from the on-disk cache.
        num_cache_misses: lookups that found no usable entry (absent, corrupt or stale).
        num_artifacts_reused: pieces served by code already compiled or loaded in this
            process for an identical piece (the same layer at another depth).
        fusions_enabled: compile label (``range-<first>-<last|inf>``, ``size-<n>`` or
            ``static``) -> the switches of the fusions its pass configuration runs (those
            whose token threshold covers the whole range).
        fusions_applied: compile label -> fusion pattern -> times it fired in the pieces the
            backend compiled for it (pieces served by a cache or reused add nothing).
        fusions_unreported: compile label -> pieces the backend compiled for it without the
            IR passes running (Inductor's FX graph cache served the piece, or a plugin
            compiler does not run them): what fused there is not in ``fusions_applied``.
        autotune_decisions: compile label -> ``<piece>.<node>`` -> the measured decision of
            that IR op node (``PassConfig.autotune``), from the pieces compiled and those
            loaded from the compile cache (whose entries keep them).
    """

    num_graphs_seen: int = 0
    num_traces_loaded: int = 0
    num_piecewise_graphs_seen: int = 0
    num_piecewise_capturable_graphs_seen: int = 0
    num_backend_compilations: int = 0
    num_cudagraph_captured: int = 0
    num_cache_hits: int = 0
    num_cache_misses: int = 0
    num_artifacts_reused: int = 0
    fusions_enabled: dict[str, tuple[str, ...]] = field(default_factory=dict)
    fusions_applied: dict[str, dict[str, int]] = field(default_factory=dict)
    fusions_unreported: dict[str, int] = field(default_factory=dict)
    autotune_decisions: dict[str, dict[str, Decision]] = field(default_factory=dict)

    def reset(self) -> None:
        """Set every count to zero and empty the per-range fusion and autotune records."""
        fresh = Counters()
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(fresh, f.name))

    def as_dict(self) -> dict[str, Any]:
        """The counts (and per-range fusion records) by name."""
        return dataclasses.asdict(self)


counters = Counters()
