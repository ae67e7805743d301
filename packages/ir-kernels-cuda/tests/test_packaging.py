"""The distribution is installed with its metadata and typing marker."""

import os
from pathlib import Path

import pytest

import ir_kernels_cuda
from ir_spec.testing import assert_installed_version


def test_version_matches_metadata() -> None:
    assert_installed_version(ir_kernels_cuda, "ir-kernels-cuda")


def test_ships_py_typed() -> None:
    assert (Path(ir_kernels_cuda.__file__).parent / "py.typed").is_file()


def test_an_install_brings_the_build_tool() -> None:
    """ninja, which drives the first-use build, is a dependency: installing the package is
    enough wherever the CUDA toolkit is present."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    from ir_kernels_cuda import build

    declared = {Requirement(r).name for r in requires("ir-kernels-cuda") or []}
    assert "ninja" in declared
    assert build._ninja_missing() == ""


def test_the_packaged_ninja_is_found_off_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run without activating its environment, Python has no ninja on PATH; the build puts the
    packaged one there for torch, which runs ``ninja`` by name, and takes it away after."""
    import shutil

    from ir_kernels_cuda import build

    pytest.importorskip("ninja", reason="run from source without the package's dependencies")
    folder = build._packaged_ninja_dir()
    assert folder is not None
    monkeypatch.setenv("PATH", "/nonexistent")
    assert shutil.which("ninja") is None
    assert build._ninja_missing() == ""
    with build.ninja_on_path():
        assert shutil.which("ninja") is not None
    assert os.environ["PATH"] == "/nonexistent"
