"""Run the kernels in Triton's interpreter where there is no GPU (must precede their import)."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
