"""The distribution is installed with its metadata and typing marker."""

from importlib.metadata import version
from pathlib import Path

import ir_piecewise


def test_version_matches_metadata() -> None:
    assert ir_piecewise.__version__ == version("ir-piecewise")


def test_ships_py_typed() -> None:
    assert (Path(ir_piecewise.__file__).parent / "py.typed").is_file()
