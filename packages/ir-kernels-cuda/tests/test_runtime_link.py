"""The built libraries share the process's C++ runtime (`build.loaded_cxx_runtime`).

A library that carries its own copy of ``libstdc++`` (a compiler that links it statically,
as the GPU machine's ``$CXX`` does) breaks torch's error messages: the first failed argument
check there ended the process with a segmentation fault; here it cuts the message short. Each
probe is a one-op library built in a child process, so that a crash fails one test."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ir_kernels_cuda import build

#: A one-op library whose check formats tensor sizes into its message, as the kernels' do.
PROBE_SOURCE = r"""
#include <ATen/ATen.h>
#include <torch/library.h>
void check(const at::Tensor& t) { TORCH_CHECK(t.dim() == 5, "probe: got sizes ", t.sizes()); }
TORCH_LIBRARY(NAMESPACE, m) { m.def("check(Tensor t) -> ()"); }
TORCH_LIBRARY_IMPL(NAMESPACE, CPU, m) { m.impl("check", &check); }
"""

#: Builds the probe (source: argv[3]) into argv[1] with the C++ runtime linked statically,
#: through the package's build (argv[2] == "ours") or cpp_extension alone; prints the message.
PROBE = """
import sys
from pathlib import Path

import torch
from torch.utils import cpp_extension

from ir_kernels_cuda import build

directory, how = Path(sys.argv[1]), sys.argv[2]
namespace = f"ir_cuda_runtime_probe_{how}"
source = directory / "probe.cpp"
source.write_text(sys.argv[3].replace("NAMESPACE", namespace))
options = dict(sources=[str(source)], extra_ldflags=["-static-libstdc++"])
if how == "ours":
    build._compile(namespace, directory, "compiling the runtime probe", **options)
else:
    cpp_extension.load(namespace, build_directory=str(directory), is_python_module=False, **options)
try:
    getattr(torch.ops, namespace).check(torch.randn(3))
except RuntimeError as error:
    print(str(error).splitlines()[0])
"""


def _compiler_missing() -> str:
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        return f"no C++ compiler ({compiler})"
    return build._ninja_missing()


def test_the_loaded_runtime_is_torchs_libstdcxx() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc/self/maps")
    runtime = build.loaded_cxx_runtime()
    assert runtime is not None
    assert runtime.name.startswith("libstdc++.so"), runtime
    assert runtime.is_file()


def test_the_runtime_is_read_from_the_maps(tmp_path: Path) -> None:
    runtime = tmp_path / "libstdc++.so.6.0.33"
    runtime.write_bytes(b"")
    gone = tmp_path / "libstdc++.so.6.0.30"
    maps = "\n".join(
        [
            "7f0000000000-7f0000001000 rw-p 00000000 00:00 0",
            f"7f0000001000-7f0000002000 r-xp 00000000 08:01 11 {gone} (deleted)",
            f"7f0000002000-7f0000003000 r-xp 00000000 08:01 12 {tmp_path / 'libc.so.6'}",
            f"7f0000003000-7f0000004000 r-xp 00000000 08:01 13 {runtime}",
        ]
    )
    assert build.cxx_runtime_in(maps) == runtime
    assert build.cxx_runtime_in(maps.replace(str(runtime), str(gone))) is None


def test_a_statically_linked_runtime_still_gives_whole_error_messages(tmp_path: Path) -> None:
    """Built with ``-static-libstdc++``, the package's build still links the process's runtime
    and the message names the sizes; cpp_extension alone (the control) loses them."""
    missing = _compiler_missing()
    if missing or build.loaded_cxx_runtime() is None:
        pytest.skip(missing or "no libstdc++ loaded")
    children = {}
    for how in ("ours", "control"):
        (tmp_path / how).mkdir()
        children[how] = subprocess.Popen(
            [
                sys.executable,
                "-X",
                "faulthandler",
                "-c",
                PROBE,
                str(tmp_path / how),
                how,
                PROBE_SOURCE,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    results = {}
    for how, child in children.items():
        out, err = child.communicate(timeout=600)
        results[how] = (child.returncode, out, err)
    code, out, err = results["ours"]
    assert code == 0, f"exit status {code}:\n{err[-3000:]}"
    assert "probe: got sizes [3]" in out, out + err[-3000:]
    code, out, err = results["control"]
    assert code != 0 or "probe: got sizes [3]" not in out, (
        "the control kept its whole message: this test no longer shows the hazard it guards"
    )
