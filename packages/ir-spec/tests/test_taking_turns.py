"""`ir_spec.testing.taking_turns`: processes holding the same lock run one at a time, and
`large_case_turn` asks for it only for large cases on a GPU."""

import contextlib
import multiprocessing
import time
from pathlib import Path

import pytest

from ir_spec import testing


def _hold(name: str, log: str, seconds: float) -> None:
    with testing.taking_turns(name):
        with open(log, "a") as handle:
            handle.write(f"in {time.monotonic()}\n")
        time.sleep(seconds)
        with open(log, "a") as handle:
            handle.write(f"out {time.monotonic()}\n")


def test_processes_holding_one_lock_never_overlap(tmp_path: Path) -> None:
    log = str(tmp_path / "log")
    name = f"test-{tmp_path.name}"
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_hold, args=(name, log, 0.3)) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    events = [line.split()[0] for line in Path(log).read_text().splitlines()]
    assert events == ["in", "out"] * 3


def test_the_lock_is_released_when_the_block_fails() -> None:
    with pytest.raises(RuntimeError), testing.taking_turns("test-failing-block"):
        raise RuntimeError("a failing case")
    with testing.taking_turns("test-failing-block"):  # would wait forever if still held
        pass


def test_only_large_cases_on_a_gpu_take_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    small = {"hidden": 8192, "tokens": 4096}
    large = {"hidden": 16384, "tokens": 4096}
    assert isinstance(testing.large_case_turn(large), contextlib.nullcontext) != (
        testing.torch.cuda.is_available()
    )
    assert isinstance(testing.large_case_turn(small), contextlib.nullcontext)
    assert isinstance(testing.large_case_turn({}), contextlib.nullcontext)
    monkeypatch.setattr(testing.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(testing.torch.cuda, "current_device", lambda: 0)
    assert not isinstance(testing.large_case_turn(large), contextlib.nullcontext)
