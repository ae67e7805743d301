"""The distribution is installed with its metadata and typing marker."""

from importlib.metadata import version
from pathlib import Path

import ir_kernels_cuda


def test_version_matches_metadata() -> None:
    assert ir_kernels_cuda.__version__ == version("ir-kernels-cuda")


def test_ships_py_typed() -> None:
    assert (Path(ir_kernels_cuda.__file__).parent / "py.typed").is_file()
