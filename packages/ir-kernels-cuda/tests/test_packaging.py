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


def test_the_package_exports_its_contract() -> None:
    """The provider names, whether the kernels built here and why not, the programmatic
    launch switches, the build error and the version; importing the package builds nothing."""
    import subprocess
    import sys

    from ir_kernels_cuda import impls, launch

    assert sorted(ir_kernels_cuda.__all__) == sorted(
        [
            "INPLACE_PROVIDER",
            "PROVIDER",
            "REASON",
            "SUPPORTED",
            "BuildUnavailable",
            "__version__",
            "programmatic_launch",
            "programmatic_launch_enabled",
            "set_programmatic_launch",
        ]
    )
    assert (ir_kernels_cuda.PROVIDER, ir_kernels_cuda.INPLACE_PROVIDER) == ("cuda", "cuda_inplace")
    assert ir_kernels_cuda.SUPPORTED is impls.SUPPORTED
    assert ir_kernels_cuda.REASON == impls.REASON
    assert ir_kernels_cuda.set_programmatic_launch is launch.set_programmatic_launch
    with pytest.raises(AttributeError, match="'ir_kernels_cuda' has no attribute 'KERNELS'"):
        _ = ir_kernels_cuda.KERNELS
    fresh = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, ir_kernels_cuda\nassert 'ir_kernels_cuda.impls' not in sys.modules",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert fresh.returncode == 0, fresh.stderr
