"""ir-stack: every layer, one configuration, the ``ir-stack`` command and reference models.

``ir_stack.Config`` gathers priorities and pass switches (from code, a TOML file, the
environment and ``--ir-op-priority.*`` flags); ``ir_stack.compile(model, config)`` wires them;
``ir_stack.models`` holds a Llama-style decoder written with IR ops; ``ir-stack demo`` runs it
in every mode and ``ir-stack explain`` says which kernels run here and why. ``ir_stack.hf``
(the ``hf`` extra, imported only on request) runs Hugging Face ``transformers`` models on IR
ops.
"""

import ir_dispatch

# Wiring: the provider packages ir-stack depends on register their implementations on import.
# (Entry points load them too where the distributions are installed; importing twice is a no-op.)
import ir_kernels_triton  # noqa: F401

from . import models
from ._version import __version__
from .compiler import compile
from .config import Config

ir_dispatch.install()

__all__ = ["Config", "__version__", "compile", "models"]
