"""Error helpers: every message names the op, the argument, what it got and what was expected."""

from __future__ import annotations

from typing import Any

import torch


def describe(value: Any) -> str:
    """A short, data-free description of an argument value for error messages."""
    if isinstance(value, torch.Tensor):
        return f"Tensor(shape={tuple(value.shape)}, dtype={value.dtype}, device={value.device})"
    return repr(value)


def argument_error(op: str, argument: str, got: Any, expected: str) -> ValueError:
    """Build the `ValueError` raised for bad input to op `op`."""
    return ValueError(f"ir.{op}: argument '{argument}' got {describe(got)}, expected {expected}")
