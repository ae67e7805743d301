"""`counters`: what piecewise compilation did in this process."""

import dataclasses
from dataclasses import dataclass


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

    def reset(self) -> None:
        """Set every count to zero."""
        for f in dataclasses.fields(self):
            setattr(self, f.name, 0)

    def as_dict(self) -> dict[str, int]:
        """The counts by name."""
        return dataclasses.asdict(self)


counters = Counters()
