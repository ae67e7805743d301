"""Run the kernels in Triton's interpreter where there is no GPU (must precede their import);
on a GPU, the largest cases take turns."""

import os
from collections.abc import Iterator

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

from ir_spec.testing import large_case_turn


@pytest.fixture(autouse=True)
def _large_cases_take_turns(request: pytest.FixtureRequest) -> Iterator[None]:
    """On a GPU, the cases of `ir_spec.testing.LARGE_CASE_ELEMENTS` or more run one at a time
    across pytest-xdist workers: a dozen at once exhaust the GPU's memory."""
    callspec = getattr(request.node, "callspec", None)
    with large_case_turn(callspec.params if callspec else {}):
        yield
