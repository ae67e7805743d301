"""`ir_passes.fingerprint` and the keys built on it: the code a result depends on, followed
into the helpers it calls, and the package versions."""

import importlib.metadata
import textwrap
import types

import pytest

import ir_passes
from ir_passes import fingerprint
from ir_passes import inductor as inductor_hookup

BASE = """
import math

SCALE = 2.0


def _helper(x):
    return x * SCALE + math.pi


def _unused(x):
    return x - 1


class Rule:
    def apply(self, x):
        return _helper(x) * 2


def native(x):
    return Rule().apply(x) + _helper(x)
"""


def load(source: str, name: str = "fingerprint_case") -> types.ModuleType:
    """`source` as a module called `name` (the same name for every variant)."""
    module = types.ModuleType(name)
    exec(compile(textwrap.dedent(source), f"<{name}>", "exec"), module.__dict__)
    return module


def print_of(source: str) -> str:
    module = load(source)
    return fingerprint.code_fingerprint([module.native], modules=[module.__name__])


def test_the_same_code_gives_the_same_fingerprint() -> None:
    assert print_of(BASE) == print_of(BASE)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("return x * SCALE + math.pi", "return x * SCALE - math.pi"),  # a helper's code
        ("SCALE = 2.0", "SCALE = 3.0"),  # a constant a helper reads
        ("return _helper(x) * 2", "return _helper(x) * 3"),  # a method of a class it uses
        ("def _helper(x):", "def _helper(x, y=1):"),  # a default
    ],
)
def test_what_the_function_calls_changes_the_fingerprint(old: str, new: str) -> None:
    assert old in BASE
    assert print_of(BASE.replace(old, new)) != print_of(BASE)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("return x - 1", "return x - 2"),  # a function nothing calls
        ("import math\n", "import math\n\n\n# moved down by a comment\n"),  # line numbers
    ],
)
def test_what_the_function_does_not_depend_on_leaves_it(old: str, new: str) -> None:
    assert old in BASE
    assert print_of(BASE.replace(old, new)) == print_of(BASE)


def test_code_outside_the_followed_modules_is_named_not_read() -> None:
    module = load(BASE)
    other = load(BASE.replace("return x * SCALE", "return x / SCALE"))
    # without its module followed, only the root's own code and the names it uses count
    assert fingerprint.code_fingerprint([module.native]) == fingerprint.code_fingerprint(
        [other.native]
    )


def test_catalog_helpers_are_followed() -> None:
    """The rotary catalog's native function calls `_rotate`: its code is part of the op's."""
    from ir_spec.catalog import rotary

    walker = fingerprint._Walker(fingerprint.project_packages(), frozenset())
    walker.add(rotary.rotary_embedding.native)
    walker.digest()
    assert any(obj is rotary._rotate for obj in walker.keep)


def test_triton_kernels_are_followed() -> None:
    """A triton implementation reaches its ``@triton.jit`` kernels' Python functions."""
    pytest.importorskip("triton")
    from ir_kernels_triton.norms import kernel as norm_kernels
    from ir_spec import ops

    walker = fingerprint._Walker(fingerprint.project_packages(), frozenset())
    walker.add(ops.rms_norm.impls["triton"].fn)
    walker.digest()
    reached = [o for o in walker.keep if getattr(o, "__module__", "") == norm_kernels.__name__]
    assert any(hasattr(o, "__code__") and "kernel" in o.__name__ for o in reached)


def test_selection_key_covers_package_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    config = ir_passes.PassConfig()
    before = inductor_hookup._compute_selection_key(config)
    real = importlib.metadata.version

    def upgraded(name: str) -> str:
        return real(name) + (".post1" if name == "ir-spec" else "")

    monkeypatch.setattr(importlib.metadata, "version", upgraded)
    fingerprint.package_versions.cache_clear()
    try:
        assert ("ir-spec", real("ir-spec") + ".post1") in fingerprint.package_versions()
        assert inductor_hookup._compute_selection_key(config) != before
    finally:
        monkeypatch.undo()
        fingerprint.package_versions.cache_clear()
    assert inductor_hookup._compute_selection_key(config) == before


def test_selection_key_covers_the_helper_an_implementation_calls() -> None:
    """The same provider registered twice, with code that differs only in the helper it calls:
    the keys differ; the Inductor passes' uuid is the key."""
    from ir_spec import ops

    config = ir_passes.PassConfig()
    keys = []
    for body in ("x * 2", "x * 3"):
        module = load(f"def helper(x):\n    return {body}\n\ndef impl(x):\n    return helper(x)\n")
        ops.silu_and_mul.register_impl("fp_case")(module.impl)
        try:
            keys.append(ir_passes.selection_key(config))
            pre = ir_passes.inductor_options(config)["pre_grad_custom_pass"]
            assert pre.uuid() == keys[-1]
        finally:
            ops.silu_and_mul.unregister_impl("fp_case")
    assert keys[0] != keys[1]
