"""Which platform this process runs on: CUDA, ROCm, XPU or CPU."""

import enum
import functools
import logging
import os

import torch

logger = logging.getLogger("ir_dispatch")

#: Environment variable that forces the platform (for tests and cross-platform debugging).
PLATFORM_ENV = "IR_PLATFORM"


class Platform(enum.StrEnum):
    """A family of devices with its own default priorities."""

    CUDA = "cuda"
    ROCM = "rocm"
    XPU = "xpu"
    CPU = "cpu"


@functools.cache
def detect_platform() -> Platform:
    """The platform of the first accelerator torch sees, else CPU; ``IR_PLATFORM`` overrides."""
    forced = os.environ.get(PLATFORM_ENV)
    if forced:
        try:
            return Platform(forced.strip().lower())
        except ValueError:
            valid = ", ".join(p.value for p in Platform)
            raise ValueError(f"{PLATFORM_ENV}={forced!r}: expected one of {valid}") from None
    if torch.cuda.is_available():
        return Platform.ROCM if torch.version.hip else Platform.CUDA
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        return Platform.XPU
    return Platform.CPU
