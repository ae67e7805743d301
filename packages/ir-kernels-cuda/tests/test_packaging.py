"""The distribution is installed with its metadata and typing marker."""

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

import ir_kernels_cuda


def test_version_matches_metadata() -> None:
    try:
        installed = version("ir-kernels-cuda")
    except PackageNotFoundError:
        pytest.skip("run from the source tree (PYTHONPATH), not installed: no metadata to compare")
    assert ir_kernels_cuda.__version__ == installed


def test_ships_py_typed() -> None:
    assert (Path(ir_kernels_cuda.__file__).parent / "py.typed").is_file()
