"""ir-kernels-cuda: Provider cuda: hand-written CUDA kernels for ir-spec ops, built on first use.

It will hold CUDA C++ sources compiled on first use with torch.utils.cpp_extension, cached per
source hash, torch version and architecture, registered as torch.ops.ir_cuda.* and as provider
cuda.
"""

from ._version import __version__

__all__ = ["__version__"]
