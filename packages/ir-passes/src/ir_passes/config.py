"""`PassConfig`: which IR passes run, and how."""

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class PassConfig:
    """Switches of the IR pass pipeline.

    Attributes:
        functionalize: turn ``maybe_inplace`` calls into the default overload (pre-grad),
            checking that donated inputs are not used again.
        fuse: fuse a residual add and the ``rms_norm`` after it into ``fused_add_rms_norm``,
            and norm / activation + fp8 quantization into the composite ops.
        force_fusion: fuse even where the composite would run natively (Inductor fuses native
            compositions by itself, so by default only real kernels are worth it).
        lower: replace IR ops by their selected implementations (post-grad).
        eliminate_clones: remove clones that lowering added and that are provably unneeded.
        debug_dir: if set, write each pass's graph before and after to this directory.
    """

    functionalize: bool = True
    fuse: bool = True
    force_fusion: bool = False
    lower: bool = True
    eliminate_clones: bool = True
    debug_dir: str | None = None

    def key(self) -> str:
        """A stable text of every switch, for cache keys."""
        return repr(dataclasses.astuple(self))
