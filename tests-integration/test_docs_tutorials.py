"""Every tutorial's code (docs/tutorials/code/*.py) runs, each in a fresh process."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

CODE = Path(__file__).resolve().parents[1] / "docs" / "tutorials" / "code"


@pytest.mark.parametrize("script", sorted(CODE.glob("*.py")), ids=lambda p: p.stem)
def test_tutorial_runs(script: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("IR_OP_PRIORITY", "TRITON_INTERPRET")}
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_tutorial_script_is_shown_on_a_page() -> None:
    """Each script is included by a tutorial page with the snippet marker the docs build
    expands (a malformed marker, such as ``--8 < --``, renders as literal text)."""
    pages = "\n".join(p.read_text() for p in CODE.parent.glob("*.md"))
    for script in CODE.glob("*.py"):
        assert f'--8<-- "{script.name}"' in pages, script.name
