"""`ir_spec.testing.taking_turns`: processes holding the same lock run one at a time, and
`large_case_turn` asks for it only for large cases on a GPU."""

import contextlib
import subprocess
import sys
from pathlib import Path

import pytest

from ir_spec import testing

#: a process that holds the lock ``argv[1]`` for ``argv[3]`` seconds, logging to ``argv[2]``
HOLD = """
import sys, time
from ir_spec.testing import taking_turns
name, log, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
with taking_turns(name):
    with open(log, "a") as handle:
        handle.write("in\\n")
    time.sleep(seconds)
    with open(log, "a") as handle:
        handle.write("out\\n")
"""


def test_processes_holding_one_lock_never_overlap(tmp_path: Path) -> None:
    log = tmp_path / "log"
    name = f"test-{tmp_path.name}"
    command = [sys.executable, "-c", HOLD, name, str(log), "0.3"]
    workers = [subprocess.Popen(command) for _ in range(3)]
    assert [worker.wait(timeout=120) for worker in workers] == [0, 0, 0]
    assert log.read_text().split() == ["in", "out"] * 3


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
