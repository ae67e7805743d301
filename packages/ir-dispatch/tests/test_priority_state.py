"""The priority state means what it says: ops as keys are honoured, a choice made under a
priority that changed meanwhile is not kept, and scoped blocks remember their last choice per
block only."""

import threading
from typing import Any

import pytest
import torch
from torch import Tensor

import ir_dispatch
from ir_spec import IrOp, ops

pytestmark = pytest.mark.usefixtures("markers")


def chosen() -> float:
    return float(ops.rms_norm(torch.randn(2, 8), None, 1e-6)[0, 0])


def test_set_priority_takes_ops_as_keys() -> None:
    """An `IrOp` key had been stored as it was and matched no op name: silently ignored."""
    ir_dispatch.set_priority({ops.rms_norm: ["t_one"]})
    assert ir_dispatch.user_priority() == {"rms_norm": ["t_one"]}
    assert ir_dispatch.effective_priority(ops.rms_norm)[0] == "t_one"
    assert chosen() == 1.0


def test_scoped_priority_takes_ops_as_keys() -> None:
    ir_dispatch.set_priority(rms_norm=["t_one"])
    with ir_dispatch.priority({ops.rms_norm: ["t_two"]}):
        assert ir_dispatch.user_priority()["rms_norm"] == ["t_two"]
        assert chosen() == 2.0
    assert chosen() == 1.0


def test_an_op_given_twice_is_refused() -> None:
    both: dict[str | IrOp, list[str]] = {ops.rms_norm: ["t_one"], "rms_norm": ["t_two"]}
    with pytest.raises(ValueError, match="priority for 'rms_norm' given twice"):
        ir_dispatch.set_priority(both)
    with pytest.raises(ValueError, match="given both in the mapping and as keyword"):
        ir_dispatch.priority({ops.rms_norm: ["t_one"]}, rms_norm=["t_two"])
    with pytest.raises(ValueError, match="unknown op 3"):
        ir_dispatch.set_priority({3: ["native"]})  # type: ignore[arg-type]


def test_a_choice_made_under_an_old_priority_is_not_kept() -> None:
    """A thread that selects while another changes the priority must not cache (or remember)
    what it chose under the old one: later calls would run it for good. The first thread is
    held inside its selection (in `supports_args`) until the change is made."""
    inside, changed = threading.Barrier(2, timeout=30), threading.Barrier(2, timeout=30)
    held: dict[str, Any] = {"thread": None}

    def hold_once(
        x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
    ) -> bool:
        if threading.current_thread() is held["thread"]:
            held["thread"] = None
            inside.wait()
            changed.wait()
        return True

    def five(
        x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
    ) -> Tensor:
        return torch.full_like(x, 5.0)

    ops.rms_norm.register_impl("t_held", supports_args=hold_once)(five)
    try:
        ir_dispatch.set_priority(rms_norm=["t_held"])
        seen: list[float] = []
        worker = threading.Thread(target=lambda: seen.append(chosen()))
        held["thread"] = worker
        worker.start()
        inside.wait()
        ir_dispatch.set_priority(rms_norm=["t_one"])
        changed.wait()
        worker.join(timeout=30)
        assert seen == [5.0]  # the worker's call ran what was chosen when it began
        assert [chosen() for _ in range(3)] == [1.0, 1.0, 1.0]
    finally:
        ir_dispatch.set_priority()
        ops.rms_norm.unregister_impl("t_held")


def test_scoped_calls_remember_their_last_choice_per_block() -> None:
    """Inside a `priority` block a repeated call takes the remembered choice (it had built the
    dispatch key and asked the dispatcher on every call, about three times the cost of a call
    under `set_priority`); the memo holds for that block alone."""
    ir_dispatch.set_priority(rms_norm=["t_one"])
    op = ops.rms_norm
    with ir_dispatch.priority(rms_norm=["t_two"]):
        assert chosen() == 2.0
        memo = op._scoped_choice
        assert memo is not None
        assert chosen() == 2.0
        assert op._scoped_choice is memo  # a hit
        with ir_dispatch.priority(rms_norm=["t_one"]):
            assert chosen() == 1.0  # not the outer block's memo
        assert chosen() == 2.0
    with ir_dispatch.priority(rms_norm=["t_two"]):
        assert chosen() == 2.0
    assert chosen() == 1.0


def test_a_scoped_memo_is_not_taken_by_another_thread() -> None:
    ir_dispatch.set_priority(rms_norm=["t_one"])
    ready, done = threading.Barrier(2, timeout=30), threading.Barrier(2, timeout=30)
    seen: dict[str, list[float]] = {}

    def scoped() -> None:
        with ir_dispatch.priority(rms_norm=["t_two"]):
            seen["scoped"] = [chosen(), chosen()]
            ready.wait()
            done.wait()

    worker = threading.Thread(target=scoped)
    worker.start()
    ready.wait()  # the worker's block is active, its memo made
    seen["plain"] = [chosen(), chosen()]
    done.wait()
    worker.join(timeout=30)
    assert seen == {"scoped": [2.0, 2.0], "plain": [1.0, 1.0]}


def test_stats_count_every_scoped_call() -> None:
    ir_dispatch.reset_stats()
    with ir_dispatch.priority(rms_norm=["t_two"]):
        chosen()
        ir_dispatch.collect_stats(True)
        for _ in range(3):
            chosen()
    ir_dispatch.collect_stats(False)
    assert ir_dispatch.stats() == {("rms_norm", "t_two"): 3}
