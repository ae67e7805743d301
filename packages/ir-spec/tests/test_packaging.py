"""The distribution is installed with its metadata and typing marker."""

from importlib.metadata import version
from pathlib import Path

import ir_spec


def test_version_matches_metadata() -> None:
    assert ir_spec.__version__ == version("ir-spec")


def test_ships_py_typed() -> None:
    assert (Path(ir_spec.__file__).parent / "py.typed").is_file()
