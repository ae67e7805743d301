"""`compile`: a model with the configuration's priorities and the IR passes."""

from collections.abc import Callable
from typing import Any

import ir_passes

from .config import Config


def compile(model: Callable[..., Any], config: Config | None = None) -> Callable[..., Any]:
    """Apply `config`'s priorities and compile `model` with the IR passes.

    Piecewise compilation with CUDA graphs joins here with ``ir-piecewise``.
    """
    config = config or Config()
    config.apply()
    return ir_passes.compile(model, config=config.passes)
