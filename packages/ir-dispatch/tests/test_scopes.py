"""Scoped priorities: nesting, restoring on exceptions, thread and task isolation."""

import asyncio
import threading

import pytest
import torch

import ir_dispatch
from ir_spec import ops

pytestmark = pytest.mark.usefixtures("markers")


def chosen() -> float:
    return float(ops.rms_norm(torch.randn(2, 8), None, 1e-6)[0, 0])


def test_nesting_and_restore() -> None:
    ir_dispatch.set_priority(rms_norm=["t_one"])
    assert chosen() == 1.0
    with ir_dispatch.priority(rms_norm=["t_two"]):
        assert chosen() == 2.0
        with ir_dispatch.priority({"silu_and_mul": ["native"]}):
            assert chosen() == 2.0  # inner block keeps the outer override of rms_norm
            assert ir_dispatch.user_priority()["silu_and_mul"] == ["native"]
        with ir_dispatch.priority(rms_norm=["t_fp16", "t_one"]):
            assert chosen() == 1.0
        assert chosen() == 2.0
    assert chosen() == 1.0
    assert "silu_and_mul" not in ir_dispatch.user_priority()


def test_the_remembered_last_choice_stays_outside_scopes() -> None:
    ir_dispatch.set_priority(rms_norm=["t_one"])
    assert chosen() == 1.0
    assert chosen() == 1.0  # the second call took the last choice (the process-wide state's)
    with ir_dispatch.priority(rms_norm=["t_two"]):
        assert chosen() == 2.0
    assert chosen() == 1.0


def test_restore_on_exception() -> None:
    ir_dispatch.set_priority(rms_norm=["t_one"])
    seen = []

    def fail_inside() -> None:
        with ir_dispatch.priority(rms_norm=["t_two"]):
            seen.append(chosen())
            raise KeyError("boom")

    with pytest.raises(KeyError):
        fail_inside()
    assert seen == [2.0]
    assert chosen() == 1.0


def test_global_change_reaches_into_scope_caches() -> None:
    with ir_dispatch.priority(silu_and_mul=["native"]):
        ir_dispatch.set_priority(rms_norm=["t_one"])
        assert chosen() == 1.0
        ir_dispatch.set_priority(rms_norm=["t_two"])
        assert chosen() == 2.0


def test_thread_isolation() -> None:
    ir_dispatch.set_priority(rms_norm=["t_one"])
    barrier = threading.Barrier(2)
    seen: dict[str, float] = {}

    def inside_scope() -> None:
        with ir_dispatch.priority(rms_norm=["t_two"]):
            barrier.wait()
            seen["scoped"] = chosen()
            barrier.wait()

    def outside_scope() -> None:
        barrier.wait()
        seen["plain"] = chosen()
        barrier.wait()

    threads = [threading.Thread(target=inside_scope), threading.Thread(target=outside_scope)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"scoped": 2.0, "plain": 1.0}


def test_task_isolation() -> None:
    ir_dispatch.set_priority(rms_norm=["t_one"])

    async def scoped() -> float:
        with ir_dispatch.priority(rms_norm=["t_two"]):
            await asyncio.sleep(0.01)
            return chosen()

    async def plain() -> float:
        await asyncio.sleep(0.005)
        return chosen()

    async def both() -> list[float]:
        return list(await asyncio.gather(scoped(), plain()))

    assert asyncio.run(both()) == [2.0, 1.0]


def test_mode_block() -> None:
    assert ir_dispatch.current_mode() == "eager"
    with ir_dispatch.mode("inductor"):
        assert ir_dispatch.current_mode() == "inductor"
        with ir_dispatch.priority(rms_norm=["t_two"]):
            assert ir_dispatch.current_mode() == "inductor"
            assert ir_dispatch.select("rms_norm", torch.randn(2, 8), None, 1e-6).provider == "t_two"
    assert ir_dispatch.current_mode() == "eager"
    with pytest.raises(ValueError, match="expected one of eager, inductor"):
        ir_dispatch.mode("aot")
