"""`Config`: priorities and pass switches in one object, from code, a TOML file, the
environment and the command line (later sources override earlier ones, code last)."""

import dataclasses
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ir_dispatch
from ir_passes import PassConfig
from ir_piecewise import CompilationConfig, CUDAGraphMode

from .pass_flags import SETTABLE, split_pass_args, with_settings

CONFIG_ENV = "IR_STACK_CONFIG"


@dataclass(frozen=True)
class Config:
    """Everything ``ir_stack.compile`` needs.

    Attributes:
        priority: op name -> provider list (prepended to the platform defaults).
        passes: the ir-passes configuration: optimization level, fusion switches and token
            thresholds (``[passes]`` in TOML; ``-O2``, ``--pass.<field>=<value>`` flags).
        piecewise: piecewise compilation (splitting, sizes, CUDA graphs, cache); None compiles
            the whole model as one graph with ``ir_passes.compile``.
    """

    priority: Mapping[str, list[str]] = field(default_factory=dict)
    passes: PassConfig = field(default_factory=PassConfig)
    piecewise: CompilationConfig | None = None

    @classmethod
    def from_toml(cls, path: str | Path) -> "Config":
        """Read ``[priority]`` (op = [providers]), ``[passes]`` (PassConfig fields, type-checked;
        a threshold of ``"none"`` for no limit) and
        ``[piecewise]`` (CompilationConfig fields; ``cudagraph_mode`` by name)."""
        data = tomllib.loads(Path(path).read_text())
        return cls().merged(data, origin=str(path))

    def merged(self, data: Mapping[str, Any], *, origin: str) -> "Config":
        """A copy with the ``priority``, ``passes`` and ``piecewise`` tables of `data` applied."""
        unknown = set(data) - {"priority", "passes", "piecewise"}
        if unknown:
            raise ValueError(
                f"{origin}: unknown sections {sorted(unknown)}; expected priority, passes, "
                "piecewise"
            )
        priority = dict(self.priority)
        for op, providers in dict(data.get("priority", {})).items():
            priority[op] = list(ir_dispatch.parse_priority_env(f"{op}={','.join(providers)}")[op])
        fields = set(SETTABLE)
        passes_data = dict(data.get("passes", {}))
        bad = set(passes_data) - fields
        if bad:
            raise ValueError(
                f"{origin}: unknown pass switches {sorted(bad)}; expected {sorted(fields)}"
            )
        piecewise = self.piecewise
        if "piecewise" in data:
            piecewise = _piecewise_from(dict(data["piecewise"]), piecewise, origin)
        passes = with_settings(self.passes, passes_data, origin=origin)
        return Config(priority, passes, piecewise)

    @classmethod
    def load(cls, argv: Sequence[str] = (), env: Mapping[str, str] | None = None) -> "Config":
        """TOML file named by ``IR_STACK_CONFIG``, then ``IR_OP_PRIORITY``, then
        ``--ir-op-priority.<op>=...`` flags in `argv`; the passes from the TOML file, then
        ``-O<level>`` and ``--pass.<field>=<value>`` flags (`pass_flags`)."""
        env = os.environ if env is None else env
        config = cls.from_toml(env[CONFIG_ENV]) if env.get(CONFIG_ENV) else cls()
        priority = dict(config.priority)
        if env.get(ir_dispatch.PRIORITY_ENV):
            priority.update(ir_dispatch.parse_priority_env(env[ir_dispatch.PRIORITY_ENV]))
        priority.update(ir_dispatch.parse_priority_args(argv))
        flags = split_pass_args(argv)[0]
        passes = with_settings(config.passes, flags, origin="command line", text=True)
        return Config(priority, passes, config.piecewise)

    def apply(self) -> None:
        """Make this configuration's priorities the process-wide ones."""
        ir_dispatch.set_priority({op: list(p) for op, p in self.priority.items()})


def _piecewise_from(
    table: dict[str, Any], base: CompilationConfig | None, origin: str
) -> CompilationConfig:
    fields = {f.name for f in dataclasses.fields(CompilationConfig)} - {"passes"}
    bad = set(table) - fields
    if bad:
        raise ValueError(
            f"{origin}: unknown piecewise settings {sorted(bad)}; expected {sorted(fields)}"
        )
    if "cudagraph_mode" in table:
        name = str(table["cudagraph_mode"]).upper()
        if name not in CUDAGraphMode.__members__:
            raise ValueError(
                f"{origin}: piecewise.cudagraph_mode: got {table['cudagraph_mode']!r}; expected "
                f"one of {list(CUDAGraphMode.__members__)}"
            )
        table["cudagraph_mode"] = CUDAGraphMode[name]
    for key, value in table.items():
        if isinstance(value, list):
            table[key] = tuple(value)
    return dataclasses.replace(base or CompilationConfig(), **table)
