"""What the GPU probes share: building a standalone CUDA source with nvcc, the `ir_cuda` ops
where the package builds, a catalog op's bf16 sample inputs, which Triton norm kernel variant a
norm op is, an empty Triton kernel, timing candidates side by side in rotated rounds, and a
pad that moves the next tensors to a new place in memory.

The probes (`quant_layout_probe.py`, `static_quant_probe.py`, the `triton_*_probe.py` scripts)
and `cuda_ab.py` import it as a sibling module (they run as scripts from this directory).
"""

from __future__ import annotations

import ctypes
import random
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import triton

from ir_stack.bench.kernels import replayed_us


def build_probe(source: Path, out_dir: Path) -> ctypes.CDLL:
    """`source` compiled by nvcc for sm_90a into a shared library and loaded. It exports
    ``int probe_launch(int variant, const void* x, void* out, const float* scale, int rows,
    int width, void* stream)``: 0, or the launch's CUDA error, or -1 for an unknown variant."""
    library = out_dir / f"{source.stem}.so"
    command = ["nvcc", "-O3", "-arch=sm_90a", "-shared", "-Xcompiler", "-fPIC"]
    subprocess.run([*command, str(source), "-o", str(library)], check=True)
    lib = ctypes.CDLL(str(library))
    lib.probe_launch.restype = ctypes.c_int
    lib.probe_launch.argtypes = (
        [ctypes.c_int] + [ctypes.c_void_p] * 3 + [ctypes.c_int] * 2 + [ctypes.c_void_p]
    )
    return lib


def probe_call(
    lib: ctypes.CDLL, variant: int, x: Any, out: Any, scale: Any, rows: int, width: int
) -> Callable[[], None]:
    """A call of `lib`'s ``probe_launch`` for these tensors, on the stream current at each call
    (a CUDA-graph capture runs on a stream of its own)."""
    import torch

    def run() -> None:
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        args = (x.data_ptr(), out.data_ptr(), scale.data_ptr(), rows, width, stream)
        rc = lib.probe_launch(variant, *args)
        assert rc == 0, f"probe variant {variant}: launch error {rc}"

    return run


def bf16_inputs(name: str, tokens: int, width: int) -> tuple[Any, tuple[Any, ...]]:
    """The catalog op `name` and its bf16 sample inputs on the GPU: `tokens` rows of `width`."""
    import torch

    from ir_spec import SampleSpec, ops
    from ir_spec.testing import sample_inputs

    op = getattr(ops, name)
    spec = SampleSpec(batch_shape=(tokens,), hidden_size=width, dtype=torch.bfloat16, device="cuda")
    return op, sample_inputs(op, spec)


def outputs(result: Any) -> list[Any]:
    """The tensors among an op's result (a tensor, or a tuple of them)."""
    import torch

    items = result if isinstance(result, tuple | list) else (result,)
    return [t for t in items if isinstance(t, torch.Tensor)]


def outputs_agree(a: list[Any], b: list[Any], close: bool) -> bool:
    """Whether two implementations' outputs agree: bitwise, or with `close` within 1e-2 (fp8
    values within one e4m3 step: 2^-3 relative, 2^-9 absolute at the subnormals)."""
    import torch

    for x, y in zip(a, b, strict=True):
        one_byte = x.is_floating_point() and x.element_size() == 1
        if close and x.is_floating_point():
            rtol, atol = (2**-3, 2**-9) if one_byte else (1e-2, 1e-2)
            if not torch.allclose(x.float(), y.float(), rtol=rtol, atol=atol):
                return False
        elif not torch.equal(*((t.view(torch.uint8) if one_byte else t) for t in (x, y))):
            return False
    return True


def checked_times(
    label: str,
    candidates: dict[str, Callable[[], Any]],
    compared: Iterable[str],
    rounds: int,
    close: bool,
) -> dict[str, list[float]]:
    """`time_rotated(candidates, rounds)`, once each candidate of `compared` has given the outputs
    of ``candidates["new"]`` (bitwise unless `close`); `label` names the shape in the error."""
    expected = outputs(candidates["new"]())
    for other in compared:
        if not outputs_agree(expected, outputs(candidates[other]()), close):
            raise SystemExit(f"{label}: the outputs of new and {other} differ")
    return time_rotated(candidates, rounds)


def ir_cuda_kernels() -> Any:
    """`torch.ops.ir_cuda` where the package builds here, else None (the probes then run
    without the op's column)."""
    try:
        from ir_kernels_cuda.impls import KERNELS, SUPPORTED
    except Exception as error:
        print(f"ir_cuda unavailable: {error}")
        return None
    return KERNELS if SUPPORTED else None


#: The catalog norm ops, each one variant of the Triton norm kernel (`norm_variant`).
NORM_OPS = (
    "rms_norm",
    "fused_add_rms_norm",
    "rms_norm_static_quant_fp8",
    "fused_add_rms_norm_static_quant_fp8",
    "rms_norm_dynamic_quant_fp8",
)


def norm_variant(name: str) -> tuple[int, bool]:
    """The Triton norm kernel's variant of catalog norm op `name` (one of `NORM_OPS`): its
    ``QUANT`` constant (`ir_kernels_triton.norm_rules`) and whether it adds a residual."""
    from ir_kernels_triton import norm_rules as nr

    if name not in NORM_OPS:
        raise ValueError(f"norm_variant: {name!r} is not a norm op; expected one of {NORM_OPS}")
    if "dynamic_quant" in name:
        quant = nr.QUANT_DYNAMIC
    elif "static_quant" in name:
        quant = nr.QUANT_STATIC
    else:
        quant = nr.QUANT_NONE
    return quant, name.startswith("fused_add")


@triton.jit
def _empty_kernel():
    pass


def launch_empty_kernel() -> None:
    """Launch an empty Triton kernel of one program: the floor a probe's decode times sit on."""
    _empty_kernel[(1,)]()


#: Pads between places: multiples of 256 bytes up to this size, so that a place's tensors
#: start at different offsets within the allocator's segments and on different pages.
MAX_PAD_BYTES = 64 << 20


def pad_to_new_place(rng: random.Random, keep: list[Any]) -> None:
    """Allocate a pad of random size on the GPU and keep it alive in `keep`, so that the tensors
    made next land at a new place (`placement_probe.py`)."""
    import torch

    pad = rng.randrange(0, MAX_PAD_BYTES, 256)
    keep.append(torch.empty(pad, dtype=torch.uint8, device="cuda"))


def time_rotated(
    candidates: dict[str, Callable[[], Any]], rounds: int, rep_ms: int = 20
) -> dict[str, list[float]]:
    """Each candidate's CUDA-graph replay time (`replayed_us`: the median, µs) in every
    round; round r starts at the r-th candidate, so none always runs first."""
    names = list(candidates)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            times[n].append(replayed_us(candidates[n], rep_ms))
    return times


def fastest_line(times: dict[str, list[float]], digits: int = 2) -> str:
    """Each candidate's fastest round, fastest first: ``name=µs  name=µs ...``."""
    best = {n: min(v) for n, v in times.items()}
    return "  ".join(f"{n}={best[n]:.{digits}f}" for n in sorted(best, key=best.__getitem__))


def median_line(times: dict[str, list[float]], digits: int = 3) -> str:
    """Each candidate's median round, fastest first: ``name=µs  name=µs ...``."""
    import statistics

    median = {n: statistics.median(v) for n, v in times.items()}
    return "  ".join(f"{n}={median[n]:.{digits}f}" for n in sorted(median, key=median.__getitem__))


def write_results(path: Path | None, results: list[dict[str, Any]]) -> None:
    """The probe's records as JSON at `path` (none: nothing), naming the device."""
    if path is None:
        return
    import json

    import torch

    device = torch.cuda.get_device_name()
    path.write_text(json.dumps({"device": device, "results": results}, indent=1))
