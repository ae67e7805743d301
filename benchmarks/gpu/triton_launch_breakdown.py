"""Where the host time of an eager Triton rms_norm call goes, at 16 rows of 2048 (bf16), with
launch plans off (every call through the configuration rules and Triton's own launch): the
whole provider function; `empty_rows` alone; the function with the kernel replaced by a stub
(our Python: output and configuration); the kernel launched through Triton with prebuilt
arguments; and the compiled kernel's C launcher called directly. µs a call over 3000 calls. Run
on the GPU machine from the repository root after ``source benchmarks/gpu/env.sh``."""

import inspect
from collections.abc import Callable
from typing import Any

import torch
import triton
from timing import per_call_us  # benchmarks/gpu/timing.py

import ir_kernels_triton.impls  # noqa: F401  (registers provider triton; the cuda one is not needed)
from ir_kernels_triton import launch_plans
from ir_kernels_triton import norm_kernels as nk
from ir_spec import empty_rows, ops


class StubKernel:
    """Takes the launch `launch_norm` would make and keeps its grid and arguments."""

    launch: tuple[Any, ...] = ()

    def __getitem__(self, grid: tuple[int, ...]) -> Callable[..., None]:
        def record(*args: Any, **kwargs: Any) -> None:
            StubKernel.launch = (grid, args, kwargs)

        return record


def main() -> None:
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}, triton {triton.__version__}")
    x = torch.randn(16, 2048, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(2048, device="cuda", dtype=torch.bfloat16)
    fn = ops.rms_norm.impls["triton"].fn
    with launch_plans(False):
        print(f"provider function: {per_call_us(lambda: fn(x, w, 1e-5)):.1f}")
        print(f"a one-kernel torch op (x.mul(1)): {per_call_us(lambda: x.mul(1)):.1f}")
        print(f"empty_rows: {per_call_us(lambda: empty_rows(x)):.1f}")
        real = nk.norm_kernel
        nk.norm_kernel = StubKernel()
        try:
            stubbed = per_call_us(lambda: fn(x, w, 1e-5))
        finally:
            nk.norm_kernel = real
        print(f"empty_rows + launch_norm, kernel stubbed: {stubbed:.1f}")
        grid, args, kwargs = StubKernel.launch
        prebuilt = per_call_us(lambda: real[grid](*args, **kwargs))
        print(f"norm_kernel[grid](prebuilt arguments): {prebuilt:.1f}")
        compiled = real[grid](*args, **kwargs)
        names = list(inspect.signature(real.fn).parameters)
        given = {**dict(zip(names, args, strict=False)), **kwargs}
        defaults = inspect.signature(real.fn).parameters
        full = [given[n] if n in given else defaults[n].default for n in names]
        g0, g1, g2 = (*grid, 1, 1)[:3]
        stream = torch.cuda.current_stream().cuda_stream
        run, function, metadata = compiled.run, compiled.function, compiled.packed_metadata
        direct = per_call_us(
            lambda: run(g0, g1, g2, stream, function, metadata, None, None, None, *full)
        )
        print(f"compiled kernel's launcher, called directly: {direct:.1f}")


if __name__ == "__main__":
    main()
