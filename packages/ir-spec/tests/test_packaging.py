"""The distribution is installed with its metadata and typing marker."""

from pathlib import Path

import ir_spec
from ir_spec.testing import assert_installed_version


def test_version_matches_metadata() -> None:
    assert_installed_version(ir_spec, "ir-spec")


def test_ships_py_typed() -> None:
    assert (Path(ir_spec.__file__).parent / "py.typed").is_file()
