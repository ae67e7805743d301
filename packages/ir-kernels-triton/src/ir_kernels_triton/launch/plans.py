"""Launch plans: an eager launch remembered per key, so that repeated calls skip the work
between the op and the GPU.

A launch goes through the launcher's configuration rules (row split, warps, register cap, what
streams from memory) and then Triton's argument binding and specialization (dtype and 16-byte
alignment of each pointer, each integer's value class) before Triton's C launcher runs. At
decode sizes that host work takes several times as long as the C launch itself.

A launcher first computes a *key* that determines all of it: the shape, strides, dtype and
16-byte alignment of every tensor, the scalar arguments that pick the configuration, the
current device and the global switches. The first launch of a key runs the usual path and
remembers the compiled kernel, its grid and its full argument list; later launches of that key
put the call's tensors (and float scalars) into their slots and call the C launcher directly.
Results are the same bits: the kernel, grid and every other argument are the ones the usual
path chose for that key.

Plans are used on a GPU only (never in the interpreter), with Triton 3.6 or later: its launch
passes every parameter, constexprs included, to the compiled kernel's launcher, the form a plan
replays (`MIN_TRITON`). They can be turned off:
``IR_TRITON_LAUNCH_PLANS=0`` in the environment, or `set_launch_plans(False)`. Each launcher
keeps at most `PLAN_CAPACITY` plans, and starts afresh when full.
"""

import functools
import inspect
import logging
import os
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from .device import interpreting, triton_version
from .programmatic import programmatic_launch_enabled

logger = logging.getLogger(__name__)

#: Plans a launcher keeps before it drops them all (a serving process meets a few hundred
#: shapes; prefill of every length up to 8192 would fill a few of these).
PLAN_CAPACITY = 4096

#: Launch options of `JITFunction.__getitem__(grid)(...)` that are not kernel parameters:
#: they are compiled into the kernel, which a plan keeps.
_LAUNCH_OPTIONS = frozenset(
    {"num_warps", "num_stages", "num_ctas", "maxnreg", "launch_pdl", "launch_cooperative_grid"}
)


def _env_enabled() -> bool:
    value = os.environ.get("IR_TRITON_LAUNCH_PLANS", "1").strip().lower()
    if value in ("0", "false", "off", "no"):
        return False
    if value not in ("1", "true", "on", "yes", ""):
        logger.warning(
            "IR_TRITON_LAUNCH_PLANS=%r: expected 1 or 0 (on or off); launch plans stay on", value
        )
    return True


#: The oldest Triton whose launch a plan replays (see the module's docstring).
MIN_TRITON = (3, 6)


def _triton_launcher() -> tuple[Any, Any] | None:
    """Triton's runtime knobs and driver where its compiled kernels can be launched directly."""
    if triton_version() < MIN_TRITON:
        return None
    try:
        from triton import knobs
        from triton.compiler.compiler import CompiledKernel
        from triton.runtime import driver
    except ImportError:
        return None
    if not all(hasattr(CompiledKernel, name) for name in ("run", "launch_metadata")):
        return None
    return knobs, driver


_LAUNCHER = None if interpreting() else _triton_launcher()
_enabled = _LAUNCHER is not None and _env_enabled()


def launch_plans_enabled() -> bool:
    """Whether eager launches are replayed from plans (see the module's docstring)."""
    return _enabled


def set_launch_plans(enabled: bool) -> bool:
    """Replay eager launches from plans from now on (where Triton allows it) or not; returns
    the previous setting. Turning them off drops no plan; turning them on where Triton's
    launcher cannot be reached (the interpreter, an older Triton) leaves them off."""
    global _enabled
    if not isinstance(enabled, bool):
        raise TypeError(f"set_launch_plans: enabled must be a bool, got {enabled!r}")
    previous, _enabled = _enabled, enabled and _LAUNCHER is not None
    return previous


@contextmanager
def launch_plans(enabled: bool) -> Iterator[None]:
    """`set_launch_plans(enabled)` inside the block, the previous setting after it."""
    previous = set_launch_plans(enabled)
    try:
        yield
    finally:
        set_launch_plans(previous)


def layout_key(t: torch.Tensor | None) -> Hashable:
    """What a launch may read of a tensor beside its memory: shape, strides, dtype and the
    address modulo 16 (Triton specializes pointers on 16-byte alignment)."""
    if t is None:
        return None
    return (t.shape, t.stride(), t.dtype, t.data_ptr() & 15)


def current_device() -> int:
    """The device Triton launches on (the current CUDA device)."""
    return torch.cuda.current_device()


def launch_key(
    selectors: tuple[Hashable, ...], first: torch.Tensor, *tensors: torch.Tensor | None
) -> tuple[Hashable, ...]:
    """A launcher's key: the current device and `first`'s, the programmatic-launch switch, the
    launcher's own `selectors` (scalar arguments and flags that pick its configuration) and the
    `layout_key` of `first` and every other tensor."""
    return (
        current_device(),
        first.get_device(),
        programmatic_launch_enabled(),
        selectors,
        layout_key(first),
        *(layout_key(t) for t in tensors),
    )


class LaunchPlan:
    """One remembered launch: a compiled kernel, its grid and its full argument list, with the
    positions (`slots`) that each replay fills with the call's own values."""

    __slots__ = ("_args", "_compiled", "_grid", "_slots", "detail")

    def __init__(
        self,
        compiled: Any,
        grid: tuple[int, int, int],
        args: list[Any],
        slots: tuple[int, ...],
        detail: Any = None,
    ) -> None:
        self._compiled = compiled
        self._grid = grid
        self._args = args
        self._slots = slots
        #: what the launcher noted about the launch (the norm: the split its rule asked for)
        self.detail = detail

    def arguments(self, values: Sequence[Any]) -> list[Any]:
        """The kernel's full argument list with `values` in the slots."""
        args = list(self._args)
        for slot, value in zip(self._slots, values, strict=True):
            args[slot] = value
        return args

    def launch(self, values: Sequence[Any]) -> None:
        """Launch the kernel on the current stream with `values` in the slots."""
        assert _LAUNCHER is not None  # plans are recorded only where it exists
        knobs, driver = _LAUNCHER
        args = self.arguments(values)
        compiled, (g0, g1, g2) = self._compiled, self._grid
        device = driver.active.get_current_device()
        stream = driver.active.get_current_stream(device)
        runtime = knobs.runtime
        enter_hook, exit_hook = runtime.launch_enter_hook, runtime.launch_exit_hook
        # as Triton's own launch does; without an enter hook the metadata is None
        metadata = (
            None if enter_hook is None else compiled.launch_metadata(self._grid, stream, *args)
        )
        compiled.run(
            g0,
            g1,
            g2,
            stream,
            compiled.function,
            compiled.packed_metadata,
            metadata,
            enter_hook,
            exit_hook,
            *args,
        )


class LaunchPlans:
    """The plans of one launcher, by key."""

    def __init__(self, name: str, capacity: int = PLAN_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"LaunchPlans({name!r}): capacity must be at least 1, got {capacity}")
        self.name = name
        self.capacity = capacity
        self._plans: dict[Hashable, LaunchPlan] = {}

    def get(self, key: Hashable) -> LaunchPlan | None:
        """The plan of `key`, or None (none yet, or plans turned off)."""
        return self._plans.get(key) if _enabled else None

    def replay(self, key: Hashable, values: Sequence[Any]) -> bool:
        """Launch `key`'s plan with `values` in its slots, if there is one."""
        plan = self.get(key)
        if plan is None:
            return False
        plan.launch(values)
        return True

    def record(
        self,
        key: Hashable,
        kernel: Any,
        compiled: Any,
        grid: tuple[int, ...],
        args: Sequence[Any],
        kwargs: dict[str, Any],
        slots: tuple[int, ...],
        detail: Any = None,
    ) -> None:
        """Remember the launch ``kernel[grid](*args, **kwargs)`` that returned `compiled`
        under `key`. `slots` are the positions in `args` a replay fills (every tensor, and the
        floats); every other argument must follow from the key. The plan keeps none of the
        call's tensors. Nothing is recorded with plans off, or where the launch is not a plain
        one (no compiled kernel returned, a runtime parameter passed by keyword, a tensor
        outside the slots)."""
        if not _enabled or compiled is None or not hasattr(compiled, "run"):
            return
        full = _full_arguments(kernel, args, kwargs)
        if full is None:
            logger.debug("%s: launch not planned (%s)", self.name, sorted(kwargs))
            return
        for slot in slots:
            full[slot] = None  # a plan keeps no tensor of the call alive
        if any(isinstance(value, torch.Tensor) for value in full):
            logger.debug("%s: a tensor outside the slots, launch not planned", self.name)
            return
        if len(self._plans) >= self.capacity:
            logger.debug("%s: %d launch plans, starting afresh", self.name, len(self._plans))
            self._plans.clear()
        grid3 = (grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1)
        self._plans[key] = LaunchPlan(compiled, grid3, full, slots, detail)

    def clear(self) -> None:
        """Drop every plan."""
        self._plans.clear()

    def __len__(self) -> int:
        return len(self._plans)


@functools.cache
def _parameters(fn: Any) -> tuple[tuple[str, bool, Any], ...]:
    """(name, is constexpr, default) of each parameter of a kernel's Python function."""
    return tuple(
        (p.name, "constexpr" in str(p.annotation), p.default)
        for p in inspect.signature(fn).parameters.values()
    )


def _full_arguments(kernel: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> list[Any] | None:
    """Every parameter's value of ``kernel[grid](*args, **kwargs)`` in order (constexprs from
    `kwargs` or their defaults), or None where a runtime parameter was passed by keyword, a
    constexpr has no value, or a keyword is neither a parameter nor a launch option."""
    params = _parameters(kernel.fn)
    full = list(args)
    for name, is_constexpr, default in params[len(args) :]:
        if not is_constexpr or (name not in kwargs and default is inspect.Parameter.empty):
            return None
        full.append(kwargs.get(name, default))
    if set(kwargs) - {name for name, _, _ in params} - _LAUNCH_OPTIONS:
        return None
    return full


#: Every launcher's plans, by name (`clear_launch_plans` drops them all).
ALL_PLANS: dict[str, LaunchPlans] = {}


def plans_for(name: str) -> LaunchPlans:
    """The plans of launcher `name`, created on first use."""
    plans = ALL_PLANS.get(name)
    if plans is None:
        plans = ALL_PLANS[name] = LaunchPlans(name)
    return plans


def clear_launch_plans() -> None:
    """Drop the plans of every launcher (the next launch of each key runs the usual path)."""
    for plans in ALL_PLANS.values():
        plans.clear()
