"""On a GPU, the largest cases take turns."""

from collections.abc import Iterator

import pytest

from ir_spec.testing import large_case_turn


@pytest.fixture(autouse=True)
def _large_cases_take_turns(request: pytest.FixtureRequest) -> Iterator[None]:
    """On a GPU, the cases of `ir_spec.testing.LARGE_CASE_ELEMENTS` or more run one at a time
    across pytest-xdist workers: a dozen at once exhaust the GPU's memory."""
    callspec = getattr(request.node, "callspec", None)
    with large_case_turn(callspec.params if callspec else {}):
        yield
