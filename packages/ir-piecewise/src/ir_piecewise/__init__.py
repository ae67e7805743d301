"""ir-piecewise: trace once, split at splitting ops (attention), compile the pieces per shape
range and per size with the IR passes, and replay them as CUDA graphs.

The contract (``__all__``): `compile` (returning a `PiecewiseCompiled`, which raises
`RecompileError` where ``check_guards`` finds a recompile needed), `CompilationConfig` with its
`CUDAGraphMode`, and `counters`. The compile cache is `ir_piecewise.cache`, the saved traces
`ir_piecewise.traces`. Names imported ``as`` themselves below stay importable here for
existing callers but are outside it: import them from their modules.
"""

from ._version import __version__
from .backend import PiecewiseBackend as PiecewiseBackend
from .cache import CompileCache as CompileCache
from .compiler import PiecewiseCompiled, RecompileError, compile
from .config import CompilationConfig, CUDAGraphMode
from .counters import Counters as Counters
from .counters import counters
from .split import Piece as Piece
from .split import split_graph as split_graph

__all__ = [
    "CUDAGraphMode",
    "CompilationConfig",
    "PiecewiseCompiled",
    "RecompileError",
    "__version__",
    "compile",
    "counters",
]
