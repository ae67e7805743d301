"""What every suite's command line shares: ``--out`` and ``--quick``, the refusal of a GPU-only
suite without a GPU, loading the kernel providers, starting a multi-process suite's ranks, the
check of a shape's sizes, and which errors stop a run (`DEVICE_FAULTS`)."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

import ir_dispatch

logger = logging.getLogger("ir_stack.bench")

#: Exit status of a suite that cannot run here (no GPU, a missing library): a usage error, so
#: that a script asking for it by name does not read a skip as success.
CANNOT_RUN = 2
#: The provider distributions' import names, whose entry points a source tree does not install.
PROVIDER_PACKAGES = ("ir_kernels_triton", "ir_kernels_cuda")


class CannotRun(Exception):
    """The suite cannot run on this machine; the message says why."""


#: Errors of the device itself (an illegal address, a launch failure). CUDA keeps such an error
#: for every later call of the process, so a suite stops at the first one instead of recording
#: every candidate after it as failed; the rows saved before it stay.
DEVICE_FAULTS: tuple[type[BaseException], ...] = tuple(
    t for t in (getattr(torch, "AcceleratorError", None),) if isinstance(t, type)
)


def parser(suite: str, description: str) -> argparse.ArgumentParser:
    """An argument parser with the options every suite takes."""
    parser = argparse.ArgumentParser(
        prog=f"python -m ir_stack.bench.{suite}", description=description
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("bench-results"),
        help=f"directory for {suite}-<device>.json, .md and .png (default: %(default)s)",
    )
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repetitions")
    return parser


def require_positive_ints(owner: str, obj: object, names: Iterable[str]) -> None:
    """Raise `ValueError` naming ``<owner>.<name>`` where an attribute of `obj` among `names`
    is not a positive int (a bool is not one)."""
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{owner}.{name}: got {value!r}; expected a positive int")


def require_gpu(suite: str) -> None:
    """Raise `CannotRun` where no CUDA GPU is visible."""
    if not torch.cuda.is_available():
        raise CannotRun(f"{suite}: no CUDA GPU here; this suite runs on one only")


def load_providers() -> list[str]:
    """Load every kernel provider and return the names of those loaded: the ``ir.providers``
    entry points of the installed distributions, then, for a provider package run from a
    source tree (no entry points), the modules its ``pyproject.toml`` names; those that
    ``IR_DISABLE_PROVIDERS`` names are left out, as discovery leaves them."""
    disabled = {n.strip() for n in os.environ.get(ir_dispatch.DISABLE_ENV, "").split(",")}
    loaded = [load.name for load in ir_dispatch.provider_loads() if load.status == "loaded"]
    for package in PROVIDER_PACKAGES:
        try:
            module = importlib.import_module(package)
        except ImportError as error:
            logger.info("provider package %s not importable: %s", package, error)
            continue
        pyproject = Path(str(module.__file__)).parents[2] / "pyproject.toml"
        if not pyproject.is_file():
            continue
        project = tomllib.loads(pyproject.read_text()).get("project", {})
        for name, target in project.get("entry-points", {}).get(ir_dispatch.GROUP, {}).items():
            if name in loaded or name in disabled:
                continue
            module_name, _, function = target.partition(":")
            try:
                provider = importlib.import_module(module_name)
                if function:
                    getattr(provider, function)()
            except (
                Exception
            ) as error:  # a provider that fails to load is skipped, as discovery does
                logger.warning("provider %s (%s) failed to load: %s", name, target, error)
                continue
            loaded.append(name)
    return loaded


def run_ranks(
    suite: str, run_rank: Callable[[int, int, argparse.Namespace], None], args: argparse.Namespace
) -> int:
    """Run a multi-process suite's `run_rank(rank, world, args)` on each of ``args.tp`` ranks:
    in this process under ``torchrun`` (whose world must be ``--tp``), else in as many
    processes started here (NCCL on GPUs, gloo on the CPU). Returns the exit status;
    `CANNOT_RUN` where the world or the GPUs do not match ``--tp``."""
    import torch.distributed as dist

    from ir_spec import process_groups

    from ..demo import launched_by_torchrun

    if launched_by_torchrun():
        world = int(os.environ["WORLD_SIZE"])
        if args.tp not in (1, world):
            print(f"{suite}: --tp {args.tp}; torchrun started {world} processes")
            return CANNOT_RUN
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        try:
            run_rank(dist.get_rank(), world, args)
        finally:
            dist.destroy_process_group()
        return 0
    gpus = torch.cuda.device_count()
    if 0 < gpus < args.tp:
        print(f"{suite}: --tp {args.tp} needs as many GPUs; {gpus} visible")
        return CANNOT_RUN
    process_groups.run_in_world(run_rank, args.tp, args, backend="nccl" if gpus else "gloo")
    return 0
