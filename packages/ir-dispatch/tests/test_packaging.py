"""The distribution is installed with its metadata and typing marker."""

from importlib.metadata import version
from pathlib import Path

import ir_dispatch


def test_version_matches_metadata() -> None:
    assert ir_dispatch.__version__ == version("ir-dispatch")


def test_ships_py_typed() -> None:
    assert (Path(ir_dispatch.__file__).parent / "py.typed").is_file()
