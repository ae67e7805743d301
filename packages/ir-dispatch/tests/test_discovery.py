"""Provider discovery through the ir.providers entry points (test distributions installed by
the nox session: ir-test-provider-good and ir-test-provider-broken)."""

import logging
import subprocess
import sys
from importlib.metadata import entry_points

import pytest
import torch

import ir_dispatch
from ir_spec import ops

INSTALLED = {ep.name for ep in entry_points(group="ir.providers")}
pytestmark = pytest.mark.skipif(
    not {"test_good", "test_broken"} <= INSTALLED,
    reason="the test provider distributions are not installed (nox installs them)",
)


def test_good_provider_loaded_and_selectable(caplog: pytest.LogCaptureFixture) -> None:
    ir_dispatch.reset_discovery()
    with caplog.at_level(logging.ERROR, logger="ir_dispatch"):
        loads = {load.name: load for load in ir_dispatch.provider_loads()}
    assert loads["test_good"].status == "loaded"
    assert "test_good" in ops.rms_norm.impls
    ir_dispatch.set_priority(rms_norm=["test_good"])
    x = torch.randn(3, 8)
    assert ir_dispatch.select("rms_norm", x, None, 1e-6).provider == "test_good"
    assert torch.equal(ops.rms_norm(x, None, 1e-6), ops.rms_norm.native(x, None, 1e-6))


def test_broken_provider_skipped_with_logged_error(caplog: pytest.LogCaptureFixture) -> None:
    ir_dispatch.reset_discovery()
    with caplog.at_level(logging.ERROR, logger="ir_dispatch"):
        loads = {load.name: load for load in ir_dispatch.provider_loads()}
    assert loads["test_broken"].status == "failed"
    assert "libfancykernels.so" in loads["test_broken"].error
    records = [r for r in caplog.records if "test_broken" in r.getMessage()]
    assert records
    assert records[0].exc_info is not None
    # the process goes on: selection still works
    assert ir_dispatch.select("rms_norm", torch.randn(2, 4), None, 1e-6).provider == "native"


def test_disable_env_skips_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IR_DISABLE_PROVIDERS", "test_broken, other")
    ir_dispatch.reset_discovery()
    loads = {load.name: load.status for load in ir_dispatch.provider_loads()}
    assert loads["test_broken"] == "disabled"
    ir_dispatch.reset_discovery()


def test_selection_state_read_before_the_first_selection_stays_valid() -> None:
    """A compile cache key kept per `selection_state` must not go stale when the first
    selection loads the providers (their registrations change the state)."""
    script = (
        "import ir_dispatch, sys\n"
        "before = ir_dispatch.selection_state()\n"
        "ir_dispatch.effective_priority('rms_norm')\n"
        "sys.exit(0 if ir_dispatch.selection_state() == before else 1)\n"
    )
    assert subprocess.run([sys.executable, "-c", script], check=False).returncode == 0
