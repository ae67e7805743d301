"""Building the CUDA sources on first use, cached on disk.

The sources in ``csrc/`` are compiled with ``torch.utils.cpp_extension`` (nvcc + ninja) for the
running GPU's architecture (``sm_90a`` on Hopper) into a directory under the user cache,
named by a hash of the sources, the torch and CUDA versions and the architecture; a file lock
makes concurrent first uses build once. Loading the library registers ``torch.ops.ir_cuda.*``.
``build(programmatic=True)`` builds the same sources a second time, every launch a
programmatic dependent launch, as ``torch.ops.ir_cuda_programmatic.*`` (`ir_kernels_cuda.launch`).

`build_emulated` compiles the same kernel sources for the CPU with ``IR_CUDA_HOST_EMULATION``
(``csrc/emulation.h``: each CUDA thread a fiber), registering ``torch.ops.ir_cuda_emulated.*``
on CPU tensors, so that the kernels' code is tested on machines without a GPU.
"""

import contextlib
import functools
import hashlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch

logger = logging.getLogger("ir_kernels_cuda")
SOURCES = ("ops.cpp", "norm.cu", "activation.cu", "rotary.cu", "heads.cu")
#: Suffixes of the headers the sources include (`headers`).
HEADER_SUFFIXES = (".cuh", ".h")
CACHE_ENV = "IR_KERNELS_CUDA_CACHE"


class BuildUnavailable(RuntimeError):
    """The kernels cannot be built here; the message says why."""


def csrc_dir() -> Path:
    """The CUDA sources: inside the installed package, or beside ``src/`` in a checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "csrc", here.parents[1] / "csrc"):
        if (candidate / SOURCES[0]).is_file():
            return candidate
    raise BuildUnavailable(f"the CUDA sources are missing (looked in {here / 'csrc'})")


def nvcc() -> str | None:
    """The nvcc the build would use: ``$CUDA_HOME/bin/nvcc``, else the one on PATH."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and (Path(home) / "bin" / "nvcc").is_file():
        return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


def unavailable_reason() -> str:
    """Why the kernels cannot be built here, or "" when they can."""
    if torch.version.cuda is None:
        return "torch was built without CUDA"
    if not torch.cuda.is_available():
        return "no CUDA device"
    if nvcc() is None:
        return "no CUDA toolkit: nvcc is neither in $CUDA_HOME/bin nor on PATH"
    return _ninja_missing()


def _ninja_missing() -> str:
    if shutil.which("ninja") is None and _packaged_ninja_dir() is None:
        return "ninja is not installed (pip install ninja)"
    return ""


def _packaged_ninja_dir() -> str | None:
    """The folder of the ninja executable that the `ninja` distribution (a dependency)
    installed, or None. It is on PATH only in an activated environment."""
    try:
        import ninja  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    folder = str(getattr(ninja, "BIN_DIR", ""))
    return folder if folder and shutil.which("ninja", path=folder) else None


@contextlib.contextmanager
def ninja_on_path() -> Iterator[None]:
    """PATH with the packaged ninja at its front inside the block, where no ninja is on it
    (a virtual environment's Python run without activating it): torch's build runs
    ``ninja`` by name."""
    folder = None if shutil.which("ninja") else _packaged_ninja_dir()
    if folder is None:
        yield
        return
    previous = os.environ.get("PATH")
    with _environ("PATH", os.pathsep.join([folder, *([previous] if previous else [])])):
        yield


def architecture() -> str:
    """The running GPU's architecture for TORCH_CUDA_ARCH_LIST ("9.0a" on Hopper)."""
    major, minor = torch.cuda.get_device_capability()
    return f"{major}.{minor}" + ("a" if major == 9 else "")


def headers() -> tuple[str, ...]:
    """Every header beside the sources (the `HEADER_SUFFIXES` files of csrc/), sorted: read
    from the folder, so that none can be left out of the cache key."""
    return tuple(sorted(p.name for p in csrc_dir().iterdir() if p.suffix in HEADER_SUFFIXES))


def cache_key(arch: str) -> str:
    """Sources, headers, torch and CUDA versions, the architecture and the C++ runtime the
    library links (`loaded_cxx_runtime`), hashed."""
    h = hashlib.sha256()
    root = csrc_dir()
    for name in (*SOURCES, *headers()):
        h.update(name.encode() + b"\0" + (root / name).read_bytes())
    h.update(f"{torch.__version__}:{torch.version.cuda}:{arch}".encode())
    h.update(f":{loaded_cxx_runtime()}".encode())
    return h.hexdigest()


@functools.cache
def loaded_cxx_runtime() -> Path | None:
    """The C++ runtime (``libstdc++``) this process has loaded, the one torch's libraries use;
    None where none is found (not Linux, or another C++ runtime).

    The library links it by path. A compiler whose ``-lstdc++`` finds only the static archive
    (a relocated GCC such as the GPU machine's ``$CXX``, or ``-static-libstdc++``) would
    otherwise give the library a private copy of the runtime. c10 then formats an error
    message with streams from one copy and locales from the other, and the first argument
    check that fails crashes the process (segmentation fault) or cuts its message short.
    """
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    return cxx_runtime_in(maps)


def runtime_link_flags() -> list[str]:
    """Linker inputs that make a ``cpp_extension`` library use this process's C++ runtime
    (`loaded_cxx_runtime`); pass them in ``extra_ldflags``, ahead of the compiler's own
    ``-lstdc++``. Empty where no runtime is found."""
    runtime = loaded_cxx_runtime()
    return [str(runtime)] if runtime is not None else []


def cxx_runtime_in(maps: str) -> Path | None:
    """The first ``libstdc++`` file mapped in `maps` (the text of ``/proc/PID/maps``) that is
    still on disk: one replaced since it was loaded is listed as ``PATH (deleted)``."""
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6:
            continue  # anonymous memory
        path = Path(fields[5])
        if path.name.startswith("libstdc++.so") and path.is_file():
            return path
    return None


def cache_root() -> Path:
    """``$IR_KERNELS_CUDA_CACHE``, else the user cache directory of ir-kernels-cuda."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("ir-kernels-cuda"))


@contextlib.contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    """The environment variable `name` set to `value` inside the block, as it was after."""
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            del os.environ[name]
        else:
            os.environ[name] = previous


@contextlib.contextmanager
def progress(what: str, every: float = 15.0) -> Iterator[None]:
    """Log ``what`` and the seconds spent every `every` seconds until the block ends (a build
    prints nothing else for a minute)."""
    done = threading.Event()
    started = time.perf_counter()

    def beat() -> None:
        while not done.wait(every):
            elapsed = time.perf_counter() - started
            logger.warning("ir_kernels_cuda: %s: %.0f s so far", what, elapsed)

    thread = threading.Thread(target=beat, name="ir_kernels_cuda build progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _compile(
    name: str,
    directory: Path,
    announce: str,
    extra_ldflags: Sequence[str] = (),
    **options: object,
) -> None:
    """`cpp_extension.load` into `directory` under its file lock, logging the first build and
    its progress, and a wait for another process's build; a lock file torch left in
    `directory` when a build was killed is removed first. The library links the C++ runtime
    this process has loaded (`loaded_cxx_runtime`)."""
    from filelock import FileLock, Timeout
    from torch.utils import cpp_extension

    directory.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(directory / "build.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        logger.warning("ir_kernels_cuda: waiting for another process building into %s", directory)
        lock.acquire()
    try:
        # torch's own lock file, left behind when a build was killed, would make every later
        # build wait for ever; under our lock no other build can be using it
        baton = directory / "lock"
        if baton.exists():
            logger.warning("ir_kernels_cuda: removing %s, left by a build that was stopped", baton)
            baton.unlink(missing_ok=True)
        fresh = not any(directory.glob("*.so"))
        if fresh:
            logger.warning(
                "ir_kernels_cuda: %s into %s (first use, about a minute; later "
                "processes load them)",
                announce,
                directory,
            )
        started = time.perf_counter()
        with progress(announce) if fresh else contextlib.nullcontext(), ninja_on_path():
            cpp_extension.load(
                name=name,
                build_directory=str(directory),
                is_python_module=False,
                verbose=logger.isEnabledFor(logging.DEBUG),
                extra_ldflags=[*runtime_link_flags(), *extra_ldflags],
                **options,  # type: ignore[arg-type]
            )
        logger.info(
            "ir_kernels_cuda: %s in %.1f s",
            "built" if fresh else "loaded",
            time.perf_counter() - started,
        )
    finally:
        lock.release()


#: The op namespace of the programmatic build (`build(programmatic=True)`).
PROGRAMMATIC_NAMESPACE = "ir_cuda_programmatic"


@functools.cache
def build(programmatic: bool = False) -> Path:
    """Compile (or reuse) and load the library; returns its build directory.

    `programmatic`: the build whose every launch is a programmatic dependent launch, registered
    as ``torch.ops.ir_cuda_programmatic`` (`ir_kernels_cuda.launch`; compute capability 9.0 and
    later), cached beside the plain one. Raises `BuildUnavailable` where the kernels cannot be
    built, and whatever the compiler raised when the build fails (the caller turns both into an
    unsupported provider).
    """
    reason = unavailable_reason()
    if reason:
        raise BuildUnavailable(reason)
    arch = architecture()
    if programmatic and torch.cuda.get_device_capability()[0] < 9:
        raise BuildUnavailable(
            "programmatic dependent launch needs compute capability 9.0 or later, "
            f"this GPU has {arch}"
        )
    key = cache_key(f"{arch}-programmatic" if programmatic else arch)
    directory = cache_root() / f"torch-{torch.__version__}" / key[:16]
    root = csrc_dir()
    defines = ["-DIR_CUDA_PROGRAMMATIC"] if programmatic else []
    what = "the CUDA kernels launched programmatically" if programmatic else "the CUDA kernels"
    with _environ("TORCH_CUDA_ARCH_LIST", arch):
        _compile(
            f"ir_kernels_cuda_{'programmatic_' if programmatic else ''}{key[:12]}",
            directory,
            f"compiling {what} for sm_{arch.replace('.', '')}",
            sources=[str(root / name) for name in SOURCES],
            extra_include_paths=[str(root)],
            extra_cflags=["-O3", *defines],
            extra_cuda_cflags=["-O3", "--expt-relaxed-constexpr", *defines],
        )
    return directory


def cuda_include_dir() -> Path | None:
    """The toolkit's headers (``cuda_fp8.h``): beside nvcc, else ``/usr/local/cuda``."""
    candidates = [Path(found).resolve().parents[1] / "include" for found in [nvcc()] if found]
    candidates.append(Path("/usr/local/cuda/include"))
    return next((c for c in candidates if (c / "cuda_fp8.h").is_file()), None)


#: Set to 1 to build the emulated kernels with AddressSanitizer (run Python with libasan in
#: LD_PRELOAD): an out-of-bounds access by a kernel then stops the process with a report.
ASAN_ENV = "IR_CUDA_EMULATION_ASAN"


@functools.cache
def build_emulated() -> Path:
    """Compile (or reuse) and load the kernels built for the CPU (``torch.ops.ir_cuda_emulated``);
    returns the build directory. Needs a C++20 compiler and the CUDA toolkit's headers, not a
    GPU; raises `BuildUnavailable` without the headers. With ``IR_CUDA_EMULATION_ASAN=1`` the
    build is instrumented with AddressSanitizer."""
    include = cuda_include_dir()
    if include is None:
        raise BuildUnavailable("the CUDA toolkit's headers (cuda_fp8.h) are not installed")
    if _ninja_missing():
        raise BuildUnavailable(_ninja_missing())
    root = csrc_dir()
    asan = os.environ.get(ASAN_ENV, "") not in ("", "0")
    h = hashlib.sha256(cache_key("emulated-asan" if asan else "emulated").encode())
    h.update(str(include).encode())
    sanitize = ["-fsanitize=address", "-fno-omit-frame-pointer"] if asan else []
    directory = cache_root() / f"torch-{torch.__version__}" / f"emulated-{h.hexdigest()[:16]}"
    directory.mkdir(parents=True, exist_ok=True)
    # cpp_extension compiles .cu files with nvcc: host wrappers include them as C++ instead
    wrappers = []
    for name in SOURCES:
        wrapper = directory / f"host_{Path(name).stem}.cpp"
        text = f'#include "{root / name}"\n'
        if not wrapper.is_file() or wrapper.read_text() != text:
            wrapper.write_text(text)
        wrappers.append(str(wrapper))
    _compile(
        f"ir_kernels_cuda_emulated_{h.hexdigest()[:12]}",
        directory,
        "compiling the CUDA kernels for host emulation",
        sources=wrappers,
        extra_include_paths=[str(root), str(include)],
        extra_cflags=[
            "-O1",
            "-std=c++20",
            "-pthread",
            "-fno-strict-aliasing",
            "-DIR_CUDA_HOST_EMULATION",
            "-w",
            *sanitize,
        ],
        extra_ldflags=["-pthread", *sanitize],
    )
    return directory
