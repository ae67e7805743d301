"""Provider plugins are isolated from each other and from the process: one that fails leaves
nothing behind, one cannot take another distribution's provider names, one that exits or raises
a BaseException is contained, and their failures are logged with their own exception alone.

The plugins are modules written for each test and offered as fake ``ir.providers`` entry points
(the discovery module's `entry_points` replaced)."""

import logging
import sys
import textwrap
from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
import torch

import ir_dispatch
import ir_dispatch.discovery
import ir_spec
from ir_spec import ops

HEADER = """
import torch
from torch import Tensor
from ir_spec import ops


def rms_norm(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> Tensor:
    return torch.full_like(x, 9.0)


def silu_and_mul(x: Tensor) -> Tensor:
    return torch.full_like(x[..., : x.shape[-1] // 2], 9.0)
"""


class Plugins:
    """Writes plugin modules under a temporary folder and offers them as entry points."""

    def __init__(self, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.folder = folder
        self.points: list[EntryPoint] = []
        self.modules: list[str] = []
        monkeypatch.syspath_prepend(str(folder))
        monkeypatch.setattr(
            ir_dispatch.discovery,
            "entry_points",
            lambda group: [ep for ep in self.points if ep.group == group],
        )

    def add(self, name: str, body: str, *, value: str | None = None) -> None:
        module = f"ir_plugin_test_{name}"
        (self.folder / f"{module}.py").write_text(HEADER + textwrap.dedent(body))
        self.modules.append(module)
        self.points.append(EntryPoint(name, value or module, ir_dispatch.GROUP))

    def loads(self) -> dict[str, ir_dispatch.ProviderLoad]:
        ir_dispatch.reset_discovery()
        return {load.name: load for load in ir_dispatch.provider_loads()}

    def cleanup(self) -> None:
        for op in ops:
            for provider in list(op.impls):
                if provider.startswith("plug_"):
                    op.unregister_impl(provider)
        for module in self.modules:
            sys.modules.pop(module, None)
        ir_dispatch.reset_discovery()


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Plugins]:
    made = Plugins(tmp_path, monkeypatch)
    yield made
    made.cleanup()


def test_a_plugin_that_fails_after_registering_leaves_nothing(
    plugins: Plugins, caplog: pytest.LogCaptureFixture
) -> None:
    """Its first registrations had stayed selectable, though the plugin was reported failed."""
    plugins.add(
        "plug_half",
        """
        ops.rms_norm.register_impl("plug_half")(rms_norm)
        ops.silu_and_mul.register_impl("plug_half")(silu_and_mul)
        raise RuntimeError("the second half of the kernels did not build")
        """,
    )
    plugins.add("plug_fine", 'ops.rms_norm.register_impl("plug_fine")(rms_norm)\n')
    with caplog.at_level(logging.ERROR, logger="ir_dispatch"):
        loads = plugins.loads()
    assert loads["plug_half"].status == "failed"
    assert "did not build" in loads["plug_half"].error
    assert "plug_half" not in ops.rms_norm.impls
    assert "plug_half" not in ops.silu_and_mul.impls
    assert loads["plug_fine"].status == "loaded"
    assert "plug_fine" in ops.rms_norm.impls
    assert any("plug_half" in r.getMessage() for r in caplog.records)
    with pytest.raises(ValueError, match="unknown provider 'plug_half'"):
        ir_dispatch.set_priority(rms_norm=["plug_half"])


def test_a_failing_callable_entry_point_leaves_nothing(plugins: Plugins) -> None:
    plugins.add(
        "plug_call",
        """
        def register() -> None:
            ops.rms_norm.register_impl("plug_call")(rms_norm)
            raise OSError("no device")
        """,
        value="ir_plugin_test_plug_call:register",
    )
    assert plugins.loads()["plug_call"].status == "failed"
    assert "plug_call" not in ops.rms_norm.impls


@pytest.mark.parametrize(
    ("owner", "taken"),
    [("plug_alpha", "plug_alpha"), ("plug_alpha", "plug_alpha_fast")],
    ids=["its-name", "a-name-under-it"],
)
def test_a_plugin_cannot_take_another_distributions_provider_name(
    plugins: Plugins, owner: str, taken: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The squatter loads first (entry points load in name order), so had it registered the
    owner's name, the owner would have failed on a duplicate registration."""
    plugins.add(
        "plug_aaa_squat",
        f"""
        ops.rms_norm.register_impl("plug_aaa_squat")(rms_norm)
        ops.silu_and_mul.register_impl("{taken}")(silu_and_mul)
        """,
    )
    plugins.add(owner, f'ops.silu_and_mul.register_impl("{owner}")(silu_and_mul)\n')
    with caplog.at_level(logging.ERROR, logger="ir_dispatch"):
        loads = plugins.loads()
    squat = loads["plug_aaa_squat"]
    assert squat.status == "failed"
    assert f"provider name {taken!r} belongs to entry point {owner!r}" in squat.error
    assert "plug_aaa_squat" not in ops.rms_norm.impls  # its own registrations go too
    assert loads[owner].status == "loaded"
    assert ops.silu_and_mul.impls[owner].fn.__module__ == f"ir_plugin_test_{owner}"
    assert any(taken in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)


def test_a_plugin_cannot_register_under_another_providers_prefixed_names(
    plugins: Plugins,
) -> None:
    """An entry point's name owns the names it prefixes (``triton`` owns ``triton_inplace``):
    another plugin registering ``plug_fast_turbo`` beside entry point ``plug_fast`` fails."""
    plugins.add("plug_fast", 'ops.silu_and_mul.register_impl("plug_fast")(silu_and_mul)\n')
    plugins.add("plug_turbo", 'ops.silu_and_mul.register_impl("plug_fast_turbo")(silu_and_mul)\n')
    loads = plugins.loads()
    assert loads["plug_turbo"].status == "failed"
    assert "'plug_fast_turbo' belongs to entry point 'plug_fast'" in loads["plug_turbo"].error
    assert "plug_fast_turbo" not in ops.silu_and_mul.impls
    assert loads["plug_fast"].status == "loaded"


def test_a_plugin_keeps_its_entry_point_name_against_earlier_code(plugins: Plugins) -> None:
    """A name registered first by other code does not take the entry point's own name from it."""

    def nine(x: torch.Tensor) -> torch.Tensor:
        return torch.full_like(x[..., : x.shape[-1] // 2], 9.0)

    ops.silu_and_mul.register_impl("plug_mine")(nine)
    plugins.add("plug_mine", 'ops.rms_norm.register_impl("plug_mine")(rms_norm)\n')
    assert plugins.loads()["plug_mine"].status == "loaded"
    assert ops.rms_norm.impls["plug_mine"].fn.__module__ == "ir_plugin_test_plug_mine"


def test_a_plugin_may_import_another_provider_package(plugins: Plugins) -> None:
    """A plugin that imports another provider's module (a dependency) while it loads does not
    own what that module registers: those registrations stay, under their owner's names, and
    the plugin loads (it sorts first, so the owner's module is first imported by it)."""
    plugins.add("plug_owner", 'ops.silu_and_mul.register_impl("plug_owner")(silu_and_mul)\n')
    plugins.add(
        "plug_a_user",
        """
        import ir_plugin_test_plug_owner  # registers plug_owner while this plugin loads
        ops.rms_norm.register_impl("plug_a_user")(rms_norm)
        """,
    )
    loads = plugins.loads()
    assert loads["plug_a_user"].status == "loaded"
    assert loads["plug_owner"].status == "loaded"
    assert "plug_owner" in ops.silu_and_mul.impls
    assert "plug_a_user" in ops.rms_norm.impls


def test_a_failing_plugin_leaves_what_its_dependency_registered(plugins: Plugins) -> None:
    plugins.add("plug_owner", 'ops.silu_and_mul.register_impl("plug_owner")(silu_and_mul)\n')
    plugins.add(
        "plug_a_user",
        """
        import ir_plugin_test_plug_owner
        ops.rms_norm.register_impl("plug_a_user")(rms_norm)
        raise RuntimeError("half done")
        """,
    )
    loads = plugins.loads()
    assert loads["plug_a_user"].status == "failed"
    assert "plug_a_user" not in ops.rms_norm.impls
    assert loads["plug_owner"].status == "loaded"
    assert "plug_owner" in ops.silu_and_mul.impls


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        ("import sys; sys.exit(3)", "SystemExit: 3"),
        ("raise GeneratorExit('odd')", "GeneratorExit: odd"),
    ],
    ids=["sys.exit", "BaseException"],
)
def test_a_plugin_that_exits_is_contained(plugins: Plugins, statement: str, expected: str) -> None:
    """`sys.exit()` in a plugin had ended the process at the first op call."""
    plugins.add("plug_exit", f'ops.rms_norm.register_impl("plug_exit")(rms_norm)\n{statement}\n')
    ir_spec.forget_all_choices()
    ir_dispatch.reset_discovery()
    x = torch.randn(3, 8)
    out = ops.rms_norm(x, None, 1e-6)  # the first selection loads the plugins
    torch.testing.assert_close(out, ops.rms_norm.native(x, None, 1e-6))
    loads = {load.name: load for load in ir_dispatch.provider_loads()}
    assert loads["plug_exit"].status == "failed"
    assert loads["plug_exit"].error == expected
    assert "plug_exit" not in ops.rms_norm.impls


def test_keyboard_interrupt_in_a_plugin_still_interrupts(plugins: Plugins) -> None:
    plugins.add("plug_ctrl_c", "raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        plugins.loads()


def test_a_plugin_failure_is_logged_with_its_own_exception(
    plugins: Plugins, caplog: pytest.LogCaptureFixture
) -> None:
    """Discovery runs on the first op call, inside the choice cache's miss: the logged
    exception had carried that KeyError as its context."""
    plugins.add("plug_broken", 'raise ImportError("libfancykernels.so: cannot open")\n')
    ir_spec.forget_all_choices()
    ir_dispatch.reset_discovery()
    with caplog.at_level(logging.ERROR, logger="ir_dispatch"):
        ops.rms_norm(torch.randn(3, 8), None, 1e-6)
    records = [r for r in caplog.records if "plug_broken" in r.getMessage()]
    assert len(records) == 1
    assert records[0].exc_info is not None
    error = records[0].exc_info[1]
    assert isinstance(error, ImportError)
    chain = []
    while error is not None:
        chain.append(type(error).__name__)
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    assert chain == ["ImportError"]


def test_an_unknown_disabled_provider_is_warned_about(
    plugins: Plugins, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A misspelt name in IR_DISABLE_PROVIDERS had been ignored without a word."""
    plugins.add("plug_fine", 'ops.rms_norm.register_impl("plug_fine")(rms_norm)\n')
    monkeypatch.setenv("IR_DISABLE_PROVIDERS", "plug_fnie, plug_fine")
    with caplog.at_level(logging.WARNING, logger="ir_dispatch"):
        loads = plugins.loads()
    assert loads["plug_fine"].status == "disabled"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "IR_DISABLE_PROVIDERS names unknown provider 'plug_fnie'" in warnings[0]
    assert "known providers:" in warnings[0]
    assert "plug_fine" in warnings[0]
    assert "native" in warnings[0]
