"""ir-dispatch: the one selection rule for ir-spec ops, in eager mode and at compile time.

Importing ``ir_dispatch`` installs it as ir-spec's dispatcher (`install` does it again after
someone replaced it; every function here raises `RuntimeError` while another dispatcher is
installed, so a half-configured process cannot go unnoticed). ``IR_OP_PRIORITY`` (its names
validated against the ``ir.providers`` entry points, loaded then), ``IR_BATCH_INVARIANT`` and
``IR_DISPATCH_STATS`` apply before the first selection or change of the selection state
(`read_environment`; a malformed value raises there, naming the variable); boolean variables
take ``1/0, true/false, yes/no, on/off`` (`parse_switch`). ``IR_DISABLE_PROVIDERS`` and
``IR_PLATFORM`` are read on first use.

Rule for `supports_args` authors: decide on dtypes, layouts and static sizes (hidden size, head
size, group size), never on the number of tokens. Eager calls cache the choice per op under a key
of exactly those properties, so a predicate that looks at the token count would see only the
first call's.
"""

import logging

import ir_spec

from ._version import __version__
from .cli import ENV as PRIORITY_ENV
from .cli import parse_priority_args, parse_priority_env, split_priority_args
from .defaults import EAGER, INDUCTOR, MODES, default_priority
from .discovery import DISABLE_ENV, GROUP, ProviderLoad, provider_loads, reset_discovery
from .installation import _Installed
from .platforms import Platform, detect_platform
from .selection import (
    Explanation,
    PriorityDispatcher,
    ProviderVerdict,
    Verdict,
    effective_priority,
    explain,
    reset_stats,
    select,
    stats,
)
from .state import (
    batch_invariant,
    collect_stats,
    current_mode,
    mode,
    priority,
    read_environment,
    refresh_fast_path,
    selection_state,
    set_batch_invariant,
    set_priority,
    user_priority,
)
from .switches import env_switch, parse_switch

logger = logging.getLogger("ir_dispatch")


def install() -> PriorityDispatcher:
    """Install ir-dispatch as ir-spec's dispatcher (done on import); return it."""
    dispatcher = _Installed.dispatcher
    if not isinstance(dispatcher, PriorityDispatcher):
        dispatcher = PriorityDispatcher()
        _Installed.dispatcher = dispatcher
    previous = ir_spec.set_dispatcher(dispatcher)
    ir_spec.use_choice_scope(True)
    refresh_fast_path()
    if previous is not dispatcher and not isinstance(previous, ir_spec.NativeDispatcher):
        logger.warning("ir_dispatch replaced ir_spec's dispatcher %r", previous)
    return dispatcher


install()

__all__ = [
    "DISABLE_ENV",
    "EAGER",
    "GROUP",
    "INDUCTOR",
    "MODES",
    "PRIORITY_ENV",
    "Explanation",
    "Platform",
    "PriorityDispatcher",
    "ProviderLoad",
    "ProviderVerdict",
    "Verdict",
    "__version__",
    "batch_invariant",
    "collect_stats",
    "current_mode",
    "default_priority",
    "detect_platform",
    "effective_priority",
    "env_switch",
    "explain",
    "install",
    "mode",
    "parse_priority_args",
    "parse_priority_env",
    "parse_switch",
    "priority",
    "provider_loads",
    "read_environment",
    "reset_discovery",
    "reset_stats",
    "select",
    "selection_state",
    "set_batch_invariant",
    "set_priority",
    "split_priority_args",
    "stats",
    "user_priority",
]
