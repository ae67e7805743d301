"""The distribution is installed with its metadata and typing marker."""

from importlib.metadata import version
from pathlib import Path

import ir_kernels_triton


def test_version_matches_metadata() -> None:
    assert ir_kernels_triton.__version__ == version("ir-kernels-triton")


def test_ships_py_typed() -> None:
    assert (Path(ir_kernels_triton.__file__).parent / "py.typed").is_file()
