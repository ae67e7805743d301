"""What the kernel families share: where the kernels run and what the launchers ask of the
device (`device`), how rows are addressed (`rows`), programmatic dependent launch
(`programmatic`), launch plans (`plans`), rows spread over thread-block clusters (`clusters`),
the kernels as torch ops (`torch_ops`) and the launch table (`tuning`).

The programmatic-launch controls and the kernels' first step are importable from here too.
"""

from .programmatic import (
    await_previous_grid,
    launch_options,
    programmatic_launch,
    programmatic_launch_enabled,
    set_programmatic_launch,
)

__all__ = [
    "await_previous_grid",
    "launch_options",
    "programmatic_launch",
    "programmatic_launch_enabled",
    "set_programmatic_launch",
]
