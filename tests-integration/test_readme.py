"""The Python blocks of the README's quick starts run as written (each in a fresh process)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def quick_start_blocks() -> list[str]:
    text = README.read_text()
    section = text[text.index("## Quick starts") : text.index("## Measured")]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


def test_readme_has_the_three_quick_starts() -> None:
    text = README.read_text()
    for reader in ("### Model authors", "### Kernel authors", "### Engine integrators"):
        assert reader in text
    assert len(quick_start_blocks()) == 3


@pytest.mark.parametrize("index", range(3), ids=["model-author", "kernel-author", "integrator"])
def test_quick_start_block_runs(index: int, tmp_path: Path) -> None:
    code = quick_start_blocks()[index]
    if "register_impl" in code:  # the provider module, then a user choosing it
        code += (
            "\nimport ir_dispatch\n"
            "x = torch.randn(4, 32, dtype=torch.float16)\n"
            "w = torch.randn(32, dtype=torch.float16)\n"
            "with ir_dispatch.priority(rms_norm=['my_kernels', 'native']):\n"
            "    assert ir_dispatch.select(ops.rms_norm, x, w, 1e-6).provider == 'my_kernels'\n"
            "    torch.testing.assert_close(ops.rms_norm(x, w, 1e-6),"
            " ops.rms_norm.native(x, w, 1e-6))\n"
        )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
