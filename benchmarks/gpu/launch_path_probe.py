"""Whether the cuda provider's small decode losses to Triton live in the kernels' machine code or
in how the kernels are loaded and launched.

Round 71 found cuda's gelu at 16 x 5632 running 64 cycles longer than Triton's kernel with the
same instruction count and launch (`cuda-triton-decode-ncu-H200.csv`). Here each kernel of a
shape is launched four ways and timed by CUDA-graph replay (`replayed_us`, the grid's median):

- ``cuda op``: ``torch.ops.ir_cuda`` as the provider calls it (cudart's launch, the module the
  CUDA runtime registered for the library);
- ``cuda cubin``: the very same kernel, its translation unit's cubin taken out of the built
  library (``cuobjdump -xelf``), loaded with the driver API (``cuModuleLoadData``) and launched
  with ``cuLaunchKernel`` on the arguments the op passes;
- ``triton``: the provider's launch;
- ``triton cubin``: Triton's compiled cubin for that launch, loaded and launched the same way;
- ``cuda alone``: the op's kernel in a module of its own: the translation unit compiled to PTX
  with the build's own nvcc flags (its ``build.ninja``), the kernel's ``.entry`` cut out and
  assembled alone by ptxas. Its SASS is compared with the library's (``same_sass``).

Before timing, each cubin launch's output is checked bitwise against its own provider's. If the
cubin launches run as their providers do, the gap is in the code or in the module around it;
``cuda alone`` against ``cuda cubin`` tells those apart. The empty kernels are also launched at
each other's block size (``x32``, ``x128``). Each shape's inputs are made afresh at
`--placements` places (`probe_tools.pad_to_new_place`, as in `placement_probe.py`) and every
candidate is timed `--rounds` times at each, in rotated order.

Usage (GPU machine, the cuda package built, packages and `benchmarks/gpu` on PYTHONPATH):
  python benchmarks/gpu/launch_path_probe.py [--placements 4] [--rounds 4] [--json OUT]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import random
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import triton
from probe_tools import pad_to_new_place

# benchmarks/cpu, a sibling folder: the SASS listing reader
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cpu"))
from sass_compare import ANONYMOUS
from sass_compare import kernels as sass_kernels

from ir_kernels_triton import pointwise_kernels as pk
from ir_kernels_triton.launch import launch_options
from ir_stack.bench.kernels import replayed_us

#: Kernel-parameter types of a PTX ``.entry``, as ctypes types.
PTX_PARAM_TYPES: dict[str, type[ctypes._SimpleCData[Any]]] = {
    "u64": ctypes.c_uint64,
    "b64": ctypes.c_uint64,
    "s64": ctypes.c_int64,
    "u32": ctypes.c_uint32,
    "b32": ctypes.c_uint32,
    "s32": ctypes.c_int32,
}


class Driver:
    """The few CUDA driver calls the probe needs, through ctypes, in the context torch made
    current."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.modules: list[ctypes.c_void_p] = []

    def _check(self, status: int, what: str) -> None:
        if status != 0:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(status, ctypes.byref(name))
            raise RuntimeError(f"{what}: CUDA driver error {status} ({name.value!r})")

    def function(self, image: bytes, name: str) -> ctypes.c_void_p:
        """Kernel `name` of cubin `image`, loaded as a module of its own."""
        module = ctypes.c_void_p()
        self._check(self.lib.cuModuleLoadData(ctypes.byref(module), image), "cuModuleLoadData")
        self.modules.append(module)
        fn = ctypes.c_void_p()
        status = self.lib.cuModuleGetFunction(ctypes.byref(fn), module, name.encode())
        self._check(status, f"cuModuleGetFunction({name})")
        return fn

    def launcher(
        self,
        fn: ctypes.c_void_p,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        params: list[ctypes._SimpleCData[Any]],
        shared: int = 0,
    ) -> Callable[[], None]:
        """A call that launches `fn` with `params` on the stream current at each call (a graph
        capture runs on its own stream). The driver copies the values at every launch."""
        pointers = (ctypes.c_void_p * len(params))(
            *[ctypes.cast(ctypes.pointer(p), ctypes.c_void_p) for p in params]
        )

        def run() -> None:
            stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
            status = self.lib.cuLaunchKernel(fn, *grid, *block, shared, stream, pointers, None)
            self._check(status, "cuLaunchKernel")

        run.keep = (params, pointers)  # type: ignore[attr-defined]
        return run


def build_directory() -> Path:
    """Where this tree's cuda build lives (`ir_kernels_cuda.build.build`'s directory)."""
    from ir_kernels_cuda import build

    directory = build.cache_root() / f"torch-{torch.__version__}"
    return directory / build.cache_key(build.architecture())[:16]


def library_cubins(work: Path) -> list[bytes]:
    """The cubins of this tree's cuda build (one per translation unit), from its library."""
    directory = build_directory()
    libraries = sorted(directory.glob("*.so"))
    if not libraries:
        raise SystemExit(f"no built library under {directory}: import ir_kernels_cuda.impls first")
    subprocess.run(["cuobjdump", "-xelf", "all", str(libraries[0])], cwd=work, check=True)
    return [path.read_bytes() for path in sorted(work.glob("*.cubin"))]


def find_kernel(cubins: list[bytes], pattern: str) -> tuple[bytes, str]:
    """The cubin holding the one kernel whose mangled name matches `pattern`, and that name."""
    found = []
    for image in cubins:
        names = {m.decode() for m in re.findall(rb"_Z[0-9A-Za-z_]+", image)}
        found += [(image, n) for n in sorted(names) if re.search(pattern, n)]
    if len(found) != 1:
        raise SystemExit(f"{len(found)} kernels match {pattern!r}: {[n for _, n in found]}")
    return found[0]


def ninja_variables(path: Path) -> dict[str, str]:
    """The top-level ``name = value`` lines of a ``build.ninja``."""
    found = (re.match(r"^(\w+) = (.*)$", line) for line in path.read_text().splitlines())
    return {m.group(1): m.group(2) for m in found if m}


def translation_unit_ptx(source: str, work: Path) -> tuple[Path, str]:
    """csrc/`source` compiled to PTX with the nvcc flags of this tree's build, and the build's
    architecture (``sm_90a``)."""
    from ir_kernels_cuda import build

    ptx = work / f"{source}.ptx"
    v = ninja_variables(build_directory() / "build.ninja")
    flags = shlex.split(f"{v['cuda_cflags']} {v['cuda_post_cflags']}")
    codes = [m.group(1) for f in flags if (m := re.search(r"code=(sm_\w+)", f))]
    flags = [f for f in flags if not f.startswith(("-gencode", "--generate-dependencies"))]
    if not ptx.exists():
        command = [v.get("nvcc", "nvcc"), *flags, f"-arch={codes[0]}", "-ptx"]
        subprocess.run([*command, str(build.csrc_dir() / source), "-o", str(ptx)], check=True)
    return ptx, codes[0]


def kernel_alone(source: str, pattern: str, work: Path) -> tuple[bytes, str]:
    """The kernel of csrc/`source` matching `pattern`, assembled by ptxas as a module of its
    own (its ``.entry`` and the declarations it names, under the PTX file's header)."""
    ptx, arch = translation_unit_ptx(source, work)
    lines = ptx.read_text().splitlines()
    end_of_header = next(i for i, line in enumerate(lines) if line.startswith(".address_size"))
    entries = [
        (i, m.group(2))
        for i, line in enumerate(lines)
        if (m := re.match(r"^(\.visible |\.weak )?\.entry (\S+?)\(", line))
    ]
    starts = [(i, name) for i, name in entries if re.search(pattern, name)]
    if len(starts) != 1:
        raise SystemExit(f"{len(starts)} entries of {source} match {pattern!r}")
    first, name = starts[0]
    last = next(k for k in range(first, len(lines)) if lines[k] == "}")
    body = lines[first : last + 1]
    named = set(re.findall(r"\b_Z\w+", "\n".join(body))) - {name}
    declarations = [
        line
        for line in lines
        if re.match(r"^\.(global|const|extern|shared)", line) and any(n in line for n in named)
    ]
    alone = work / f"{name[-40:]}.ptx"
    alone.write_text("\n".join(lines[: end_of_header + 1] + declarations + body) + "\n")
    cubin = alone.with_suffix(".cubin")
    subprocess.run(["ptxas", f"-arch={arch}", str(alone), "-o", str(cubin)], check=True)
    return cubin.read_bytes(), name


def sass_of(image: bytes, name: str, work: Path) -> list[str]:
    """Kernel `name`'s instructions in cubin `image`, as `sass_compare.kernels` reads a
    ``cuobjdump -sass`` listing (addresses and encodings dropped)."""
    cubin, listing = work / "sass_of.cubin", work / "sass_of.sass"
    cubin.write_bytes(image)
    with listing.open("w") as out:
        subprocess.run(["cuobjdump", "-sass", str(cubin)], stdout=out, check=True)
    instructions = sass_kernels(listing, []).get(ANONYMOUS.sub("_GLOBAL__N__", name))
    if not instructions:
        raise SystemExit(f"no SASS of {name} in its cubin")
    return instructions


def ptx_params(ptx: str, name: str) -> list[type[ctypes._SimpleCData[Any]]]:
    """The ctypes types of kernel `name`'s parameters, from its PTX ``.entry``."""
    head = ptx[ptx.index(f".entry {name}(") :]
    head = head[: head.index(")")]
    return [PTX_PARAM_TYPES[t] for t in re.findall(r"\.param\s+\.(\w+)", head)]


@dataclass
class Case:
    """One shape: the op's own calls and those of its kernels' cubins, and the output of each
    (none for the empty kernels)."""

    name: str
    candidates: dict[str, Callable[[], None]]
    outputs: dict[str, torch.Tensor]


#: The kernels the cuda ops launch at the probed shapes (`launch_elementwise`'s decode forms):
#: a pattern on the mangled name in csrc/activation.cu.
GELU_KERNEL = r"flat_elementwise_kernelIN3c108BFloat16ELi2ELb0ELi256ELb1ELb1ELi1EE"
SILU_QUANT_KERNEL = r"aligned_elementwise_kernelIN3c108BFloat16ELi1ELb1ELi1ELi1EE"
EMPTY_KERNEL = r"nothing_kernelEv$"
#: Each kernel: from the library (as the op launches it) and assembled alone.
Kernels = dict[str, dict[str, tuple[bytes, str]]]


def triton_cubin_launch(
    driver: Driver, compiled: Any, grid: int, values: list[int]
) -> Callable[[], None]:
    """Triton's compiled kernel launched through the driver on `values` (its runtime
    arguments; the scratch pointers Triton appends get null), a block of its warps."""
    name = compiled.metadata.name
    types = ptx_params(compiled.asm["ptx"], name)
    extra = types[len(values) :]
    if len(types) < len(values) or any(t is not ctypes.c_uint64 for t in extra):
        raise SystemExit(f"{name}: unexpected parameters {types}")
    values = values + [0] * len(extra)
    return driver.launcher(
        driver.function(compiled.asm["cubin"], name),
        (grid, 1, 1),
        (32 * compiled.metadata.num_warps, 1, 1),
        [t(v) for t, v in zip(types, values, strict=True)],
        compiled.metadata.shared,
    )


def gated_case(driver: Driver, kernels: Kernels, op: str, tokens: int, d: int, seed: int) -> Case:
    """gelu_and_mul or silu_and_mul_static_quant_fp8 at `tokens` x `d`, bf16."""
    quant = op.endswith("quant_fp8")
    act = pk.ACT_SILU if quant else pk.ACT_GELU
    torch.manual_seed(seed)
    x = torch.randn(tokens, 2 * d, device="cuda", dtype=torch.bfloat16)
    scale = torch.tensor([0.05], device="cuda")
    out_dtype = torch.float8_e4m3fn if quant else torch.bfloat16
    names = ["cuda op", "cuda cubin", "cuda alone", "triton", "triton cubin"]
    outs = {n: torch.empty(tokens, d, device="cuda", dtype=out_dtype) for n in names}
    cuda = torch.ops.ir_cuda

    def cuda_op() -> None:
        if quant:
            cuda.silu_and_mul_static_quant_fp8_out(outs["cuda op"], x, scale)
        else:
            cuda.gelu_and_mul_out(outs["cuda op"], x, 0)

    def cuda_launch(form: str) -> Callable[[], None]:
        # the op's grid (a block of 256 for 512 outputs, rows on grid y) and arguments
        out = outs[f"cuda {form}"].data_ptr()
        u64, i32 = ctypes.c_uint64, ctypes.c_int32
        if quant:  # (out, out_stride, x, x_stride, d, scale)
            params = [u64(out), i32(d), u64(x.data_ptr()), i32(2 * d), i32(d)]
            params.append(u64(scale.data_ptr()))
        else:  # (out, out_stride, x, x_stride, count, d, scale)
            params = [u64(out), i32(d), u64(x.data_ptr()), i32(2 * d), i32(d), i32(d), u64(0)]
        image, name = kernels[SILU_QUANT_KERNEL if quant else GELU_KERNEL][form]
        grid = (triton.cdiv(d, 512), tokens, 1)
        return driver.launcher(driver.function(image, name), grid, (256, 1, 1), params)

    def triton_op() -> None:
        pk.launch_gated(x, outs["triton"], act, scale if quant else None)

    total = tokens * d
    block, warps = pk.flat_config(total, False, act, quant, None)
    tgrid = (triton.cdiv(total, block),)
    out = outs["triton cubin"]
    compiled = pk.flat_gated_kernel[tgrid](
        x,
        out,
        scale if quant else x,
        total,
        D=d,
        ACT=act,
        QUANT=quant,
        BLOCK=block,
        EVEN=total % block == 0,
        INTERPRETED=False,
        num_warps=warps,
        **launch_options(x, tgrid, warps),
    )
    values = [x.data_ptr(), out.data_ptr(), (scale if quant else x).data_ptr(), total]
    candidates = {
        "cuda op": cuda_op,
        "cuda cubin": cuda_launch("cubin"),
        "cuda alone": cuda_launch("alone"),
        "triton": triton_op,
        "triton cubin": triton_cubin_launch(driver, compiled, tgrid[0], values),
    }
    return Case(f"{op} {tokens}x{d}", candidates, outs)


def empty_case(driver: Driver, kernels: Kernels) -> Case:
    """The two providers' empty kernels (the decode floors), launched every way, and each at
    the other's block size: cuda's at 128 threads, Triton's compiled for one warp (its kernels
    require the block they were compiled for)."""
    from probe_tools import _empty_kernel

    hint = torch.empty(1, device="cuda")
    compiled = _empty_kernel[(1,)]()
    one_warp = _empty_kernel[(1,)](num_warps=1)

    def cuda_launch(form: str, threads: int = 32) -> Callable[[], None]:
        image, name = kernels[EMPTY_KERNEL][form]
        return driver.launcher(driver.function(image, name), (1, 1, 1), (threads, 1, 1), [])

    candidates = {
        "cuda op": lambda: torch.ops.ir_cuda.empty_kernel(hint),
        "cuda cubin": cuda_launch("cubin"),
        "cuda alone": cuda_launch("alone"),
        "cuda cubin x128": cuda_launch("cubin", 128),
        "triton": lambda: _empty_kernel[(1,)](),
        "triton cubin": triton_cubin_launch(driver, compiled, 1, []),
        "triton x32": lambda: _empty_kernel[(1,)](num_warps=1),
        "triton cubin x32": triton_cubin_launch(driver, one_warp, 1, []),
    }
    return Case("empty kernel", candidates, {})


def check(case: Case) -> None:
    """Every launch's output against its provider's, bitwise."""
    for fn in case.candidates.values():
        fn()
    torch.cuda.synchronize()
    for name, out in case.outputs.items():
        reference = case.outputs[name.split()[0] if name.startswith("triton") else "cuda op"]
        if not torch.equal(out.view(torch.uint8), reference.view(torch.uint8)):
            raise SystemExit(f"{case.name}: {name}'s output differs from its provider's")


def load_kernels(work: Path) -> tuple[Kernels, dict[str, bool]]:
    """The probed kernels from the library and alone, and whether each pair's SASS is the
    same."""
    cubins = library_cubins(work)
    kernels: Kernels = {}
    same_sass = {}
    for pattern in (EMPTY_KERNEL, GELU_KERNEL, SILU_QUANT_KERNEL):
        library = find_kernel(cubins, pattern)
        alone = kernel_alone("activation.cu", pattern, work)
        if alone[1] != library[1]:
            raise SystemExit(f"{pattern}: {alone[1]} alone, {library[1]} in the library")
        kernels[pattern] = {"cubin": library, "alone": alone}
        same_sass[library[1]] = sass_of(*library, work) == sass_of(*alone, work)
    return kernels, same_sass


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--placements", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    import ir_kernels_cuda.impls  # noqa: F401  (builds or loads the library)

    driver = Driver()
    with tempfile.TemporaryDirectory() as work:
        kernels, same_sass = load_kernels(Path(work))
    print("same SASS alone as in the library:", json.dumps(same_sass), flush=True)
    shapes = [
        ("empty", 0, 0),
        ("gelu_and_mul", 16, 5632),
        ("silu_and_mul_static_quant_fp8", 16, 5632),
    ]
    records = []
    keep: list[Any] = []
    for op, tokens, d in shapes:
        rng = random.Random(tokens * 7919 + d)
        times: dict[str, list[float]] = {}
        name = op
        for place in range(opts.placements):
            pad_to_new_place(rng, keep)
            if op == "empty":
                case = empty_case(driver, kernels)
            else:
                case = gated_case(driver, kernels, op, tokens, d, seed=place)
            keep.append(case)
            check(case)
            name = case.name
            order = list(case.candidates)
            for r in range(opts.rounds):
                k = (place + r) % len(order)
                for n in order[k:] + order[:k]:
                    times.setdefault(n, []).append(replayed_us(case.candidates[n], 25))
        summary = {
            n: {"median": statistics.median(v), "min": min(v), "max": max(v)}
            for n, v in times.items()
        }
        line = "  ".join(
            f"{n}={s['median']:.3f} [{s['min']:.3f}, {s['max']:.3f}]" for n, s in summary.items()
        )
        print(name, line, flush=True)
        records.append({"shape": name, "us": times, "summary": summary})
    if opts.json:
        device = torch.cuda.get_device_name()
        result = {"device": device, "same_sass": same_sass, "records": records}
        opts.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
