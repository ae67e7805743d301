"""Layers import only downward (DESIGN.md's table), and ir-spec imports torch alone."""

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ALLOWED: dict[str, set[str]] = {
    "ir_spec": set(),
    "ir_dispatch": {"ir_spec"},
    "ir_passes": {"ir_spec", "ir_dispatch"},
    "ir_kernels_triton": {"ir_spec"},
    "ir_kernels_cuda": {"ir_spec"},
    "ir_piecewise": {"ir_passes", "ir_spec", "ir_dispatch"},
    "ir_stack": {
        "ir_spec",
        "ir_dispatch",
        "ir_passes",
        "ir_kernels_triton",
        "ir_kernels_cuda",
        "ir_piecewise",
    },
}
THIRD_PARTY: dict[str, set[str]] = {
    "ir_spec": {"torch"},
}


def imported_top_levels(package_dir: Path) -> set[str]:
    found: set[str] = set()
    for path in package_dir.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_downward(layer: str) -> None:
    dist = layer.replace("_", "-")
    imports = imported_top_levels(ROOT / "packages" / dist / "src" / layer)
    siblings = {i for i in imports if i in ALLOWED and i != layer}
    assert siblings <= ALLOWED[layer], f"{layer} imports {siblings - ALLOWED[layer]}"
    if layer in THIRD_PARTY:
        others = {i for i in imports - {layer} if i not in sys.stdlib_module_names}
        assert others <= THIRD_PARTY[layer], f"{layer} imports {others - THIRD_PARTY[layer]}"


def test_every_layer_imports() -> None:
    import importlib

    for layer in ALLOWED:
        assert importlib.import_module(layer).__version__


def test_every_distribution_has_its_files() -> None:
    """Packaging shape of DESIGN.md: version file, typing marker, README and CHANGELOG."""
    for layer in ALLOWED:
        dist = ROOT / "packages" / layer.replace("_", "-")
        for path in (
            "pyproject.toml",
            "README.md",
            "CHANGELOG.md",
            f"src/{layer}/_version.py",
            f"src/{layer}/py.typed",
        ):
            assert (dist / path).is_file(), dist / path
