"""Process groups by name: what the collective ops (`ir_spec.catalog.collective`) take.

A collective op names its process group with a string, the group's ``group_name``, as torch's
functional collectives do (``torch.ops._c10d_functional.*``). A traced, compiled or cached
graph therefore holds a constant string and no process-group object, and the name is resolved
when the op runs (`resolve`). torch names groups in the order they are created in a process:
the default group is ``"0"``, the next ``torch.distributed.new_group`` ``"1"``, and so on. Every
rank must create its groups in the same order (``new_group`` requires it anyway), so one name
means the same group on every rank and in every process started the same way, and a graph
compiled or cached by one process names the right group in the next.

`world_key` describes the process's place in the default group; the compile caches of
ir-passes and ir-piecewise include it, so that ranks never load each other's compiled code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from .errors import argument_error

__all__ = [
    "GROUP_ARGUMENT",
    "default_group_name",
    "group_rank",
    "group_size",
    "known_group_names",
    "resolve",
    "run_in_world",
    "world_key",
]

#: The parameter through which an op names its process group; an op taking a parameter of
#: this name is a collective (see `ir_spec.testing.needs_process_group`).
GROUP_ARGUMENT = "group_name"


def _initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def known_group_names() -> list[str]:
    """The names of this process's process groups, in creation order (none before
    ``torch.distributed.init_process_group``)."""
    if not _initialized():
        return []
    from torch.distributed import distributed_c10d as c10d

    return list(c10d._world.pg_names.values())


def default_group_name() -> str:
    """The default (world) group's name; `ValueError` where torch.distributed is not
    initialised."""
    if not _initialized():
        raise ValueError(
            "no process group: torch.distributed is not initialised (call "
            "torch.distributed.init_process_group, or start the program with torchrun)"
        )
    name: str = dist.group.WORLD.group_name  # type: ignore[union-attr]
    return name


def resolve(op: str, group_name: Any) -> Any:
    """The process group called `group_name`, for op `op`'s argument ``group_name``;
    `ValueError` naming the known groups where there is none of that name."""
    if not isinstance(group_name, str):
        raise argument_error(op, GROUP_ARGUMENT, group_name, "a process group's name (a str)")
    if not _initialized():
        raise argument_error(
            op,
            GROUP_ARGUMENT,
            group_name,
            "the name of a process group, but torch.distributed is not initialised (call "
            "torch.distributed.init_process_group, or start the program with torchrun)",
        )
    from torch.distributed import distributed_c10d as c10d

    resolve_by_name: Callable[..., Any] = c10d._resolve_process_group  # type: ignore[attr-defined]
    try:
        return resolve_by_name(group_name)
    except (RuntimeError, ValueError, KeyError):
        known = ", ".join(repr(n) for n in known_group_names()) or "(none)"
        raise argument_error(
            op, GROUP_ARGUMENT, group_name, f"the name of a process group; known: {known}"
        ) from None


def group_size(group_name: str, op: str = "group_size") -> int:
    """The number of ranks in the group called `group_name`."""
    size: int = resolve(op, group_name).size()
    return size


def group_rank(group_name: str, op: str = "group_rank") -> int:
    """This process's rank in the group called `group_name`."""
    rank: int = resolve(op, group_name).rank()
    return rank


def world_key() -> str:
    """``"world=<size>,rank=<rank>"`` of the default group, ``"world=1,rank=0"`` where
    torch.distributed is not initialised: what a compile cache key adds so that each rank
    keeps its own entries."""
    if not _initialized():
        return "world=1,rank=0"
    return f"world={dist.get_world_size()},rank={dist.get_rank()}"


# --------------------------------------------------------------------- local worlds
def run_in_world(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    backend: str = "gloo",
    threads: int = 1,
    timeout_s: float = 300.0,
) -> None:
    """Run ``fn(rank, world_size, *args)`` in `world_size` new processes on this machine,
    joined in one default process group of `backend` (``"gloo"`` on the CPU, ``"nccl"`` with
    one GPU per rank: rank ``r`` uses ``cuda:r``); returns when every rank has returned, and
    raises the first rank's exception if one failed.

    The processes are started with ``spawn``. `fn` is a module-level function: of an
    importable module, or of a Python file that is not (a test module collected with pytest's
    ``importlib`` mode), which each process then loads from its path. The group rendezvous
    through a file in a temporary directory (no port to choose). Each process sets ``RANK``,
    ``LOCAL_RANK`` and ``WORLD_SIZE`` as ``torchrun`` does and runs `threads` intra-op threads
    (one by default: several ranks share the cores). A collective waits at most `timeout_s`
    seconds for the other ranks."""
    import tempfile

    from torch.multiprocessing.spawn import start_processes

    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"run_in_world: world_size={world_size!r}, expected a positive int")
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"run_in_world: backend={backend!r}, expected 'gloo' or 'nccl'")
    if backend == "nccl" and torch.cuda.device_count() < world_size:
        raise ValueError(
            f"run_in_world: backend 'nccl' with world_size={world_size} needs as many GPUs; "
            f"{torch.cuda.device_count()} visible"
        )
    target = (fn.__module__, fn.__qualname__, fn.__code__.co_filename)
    with tempfile.TemporaryDirectory(prefix="ir-world-") as tmp:
        store = f"file://{tmp}/store"
        start: Callable[..., Any] = start_processes
        start(
            _world_process,
            args=(world_size, backend, store, threads, timeout_s, target, args),
            nprocs=world_size,
            start_method="spawn",
        )


def _load_function(module: str, qualname: str, path: str) -> Callable[..., Any]:
    import importlib
    import importlib.util
    import os
    import sys

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin and os.path.samefile(spec.origin, path):
        loaded = importlib.import_module(module)
    else:  # a file outside the import path (a test module): load it under a private name
        name = f"_ir_world_{abs(hash(path))}"
        file_spec = importlib.util.spec_from_file_location(name, path)
        if file_spec is None or file_spec.loader is None:
            raise ImportError(f"run_in_world: cannot load {path}")
        loaded = importlib.util.module_from_spec(file_spec)
        sys.modules[name] = loaded
        file_spec.loader.exec_module(loaded)
    target: Any = loaded
    for part in qualname.split("."):
        target = getattr(target, part)
    return target  # type: ignore[no-any-return]


def _world_process(
    rank: int,
    world_size: int,
    backend: str,
    store: str,
    threads: int,
    timeout_s: float,
    target: tuple[str, str, str],
    args: tuple[Any, ...],
) -> None:
    import datetime
    import os

    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size))
    torch.set_num_threads(threads)
    if backend == "nccl":
        torch.cuda.set_device(rank)
    fn = _load_function(*target)
    dist.init_process_group(
        backend,
        init_method=store,
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    try:
        fn(rank, world_size, *args)
    finally:
        dist.destroy_process_group()
