"""The distribution is installed with its metadata and typing marker."""

from importlib.metadata import version
from pathlib import Path

import ir_passes


def test_version_matches_metadata() -> None:
    assert ir_passes.__version__ == version("ir-passes")


def test_ships_py_typed() -> None:
    assert (Path(ir_passes.__file__).parent / "py.typed").is_file()
