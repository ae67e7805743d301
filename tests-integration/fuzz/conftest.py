"""The fuzzer's modules import each other by name (as the piecewise tests' helpers do); its
settings are made once per process and printed at the end of a run."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import fuzz_settings


def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)
    fuzz_settings.configure(workerinput.get("testrunuid") if workerinput else None)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    terminalreporter.write_line(fuzz_settings.current().describe())
