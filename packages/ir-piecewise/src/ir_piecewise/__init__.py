"""ir-piecewise: trace once, split at splitting ops (attention), compile the pieces per shape
range and per size with the IR passes, and replay them as CUDA graphs.

Entry points: `compile`, `CompilationConfig`, `CUDAGraphMode`, `counters`.
"""

from ._version import __version__
from .backend import PiecewiseBackend
from .cache import CompileCache
from .compiler import PiecewiseCompiled, RecompileError, compile
from .config import CompilationConfig, CUDAGraphMode
from .counters import Counters, counters
from .split import Piece, split_graph

__all__ = [
    "CUDAGraphMode",
    "CompilationConfig",
    "CompileCache",
    "Counters",
    "Piece",
    "PiecewiseBackend",
    "PiecewiseCompiled",
    "RecompileError",
    "__version__",
    "compile",
    "counters",
    "split_graph",
]
