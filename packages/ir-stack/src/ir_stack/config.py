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

CONFIG_ENV = "IR_STACK_CONFIG"


@dataclass(frozen=True)
class Config:
    """Everything ``ir_stack.compile`` needs.

    Attributes:
        priority: op name -> provider list (prepended to the platform defaults).
        passes: the ir-passes switches.
    """

    priority: Mapping[str, list[str]] = field(default_factory=dict)
    passes: PassConfig = field(default_factory=PassConfig)

    @classmethod
    def from_toml(cls, path: str | Path) -> "Config":
        """Read ``[priority]`` (op = [providers]) and ``[passes]`` (PassConfig fields)."""
        data = tomllib.loads(Path(path).read_text())
        return cls().merged(data, origin=str(path))

    def merged(self, data: Mapping[str, Any], *, origin: str) -> "Config":
        """A copy with the ``priority`` and ``passes`` tables of `data` applied."""
        unknown = set(data) - {"priority", "passes"}
        if unknown:
            raise ValueError(
                f"{origin}: unknown sections {sorted(unknown)}; expected priority, passes"
            )
        priority = dict(self.priority)
        for op, providers in dict(data.get("priority", {})).items():
            priority[op] = list(ir_dispatch.parse_priority_env(f"{op}={','.join(providers)}")[op])
        fields = {f.name for f in dataclasses.fields(PassConfig)}
        passes_data = dict(data.get("passes", {}))
        bad = set(passes_data) - fields
        if bad:
            raise ValueError(
                f"{origin}: unknown pass switches {sorted(bad)}; expected {sorted(fields)}"
            )
        return Config(priority, dataclasses.replace(self.passes, **passes_data))

    @classmethod
    def load(cls, argv: Sequence[str] = (), env: Mapping[str, str] | None = None) -> "Config":
        """TOML file named by ``IR_STACK_CONFIG``, then ``IR_OP_PRIORITY``, then
        ``--ir-op-priority.<op>=...`` flags in `argv`."""
        env = os.environ if env is None else env
        config = cls.from_toml(env[CONFIG_ENV]) if env.get(CONFIG_ENV) else cls()
        priority = dict(config.priority)
        if env.get(ir_dispatch.PRIORITY_ENV):
            priority.update(ir_dispatch.parse_priority_env(env[ir_dispatch.PRIORITY_ENV]))
        priority.update(ir_dispatch.parse_priority_args(argv))
        return Config(priority, config.passes)

    def apply(self) -> None:
        """Make this configuration's priorities the process-wide ones."""
        ir_dispatch.set_priority({op: list(p) for op, p in self.priority.items()})
