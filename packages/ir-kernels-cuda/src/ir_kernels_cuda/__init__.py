"""ir-kernels-cuda: provider ``cuda``, hand-written CUDA kernels for ir-spec ops, built on
first use.

The CUDA C++ sources (``csrc/``) are compiled with ``torch.utils.cpp_extension`` for the running
GPU's architecture, cached per source hash, torch version and architecture (`build`), and
registered as ``torch.ops.ir_cuda.*``; `impls` registers them as provider ``cuda`` (importing it
builds; ir-dispatch imports it through the ``ir.providers`` entry point) for every catalog op,
with ``cuda_inplace`` for ``fused_add_rms_norm`` and ``rotary_embedding``.
``python -m ir_kernels_cuda build`` builds ahead of time; `build.build_emulated` builds the same
kernels for host emulation (tests without a GPU). `launch` turns on programmatic dependent
launch (a second build, ``torch.ops.ir_cuda_programmatic``).
"""

from ._version import __version__

__all__ = ["__version__"]
