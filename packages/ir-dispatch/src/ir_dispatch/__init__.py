"""ir-dispatch: the one selection rule for ir-spec ops, in eager mode and at compile time.

Importing ``ir_dispatch`` installs it as ir-spec's dispatcher (`install` does it again after
someone replaced it; every function here raises `RuntimeError` while another dispatcher is
installed, so a half-configured process cannot go unnoticed). ``IR_OP_PRIORITY`` (its names
validated against the ``ir.providers`` entry points, loaded then), ``IR_BATCH_INVARIANT`` and
``IR_DISPATCH_STATS`` apply before the first selection or change of the selection state
(`read_environment`; a malformed value raises there, naming the variable); boolean variables
take ``1/0, true/false, yes/no, on/off`` (`parse_switch`). ``IR_DISABLE_PROVIDERS`` and
``IR_PLATFORM`` are read on first use. Plugins come through entry points, loaded by one
isolating loader (`ir_dispatch.plugins`): kernel providers (``ir.providers``) and platforms
(``ir.platforms``: name, detection, default priorities per mode, extra passes).

Rule for `supports_args` authors: decide on dtypes, layouts and static sizes (hidden size, head
size, group size), never on the number of tokens. Eager calls cache the choice per op under a key
of exactly those properties, so a predicate that looks at the token count would see only the
first call's.

The contract (``__all__``): `set_priority`, `priority`, `effective_priority`, `select`,
`explain` (an `Explanation`: a `ProviderVerdict` a provider, each with its `Verdict`),
`parse_priority_args` and `split_priority_args`; `install`; `mode`; `set_batch_invariant`;
`collect_stats` and `stats`; `detect_platform` (a `Platform`), `platform_origin`,
`installed_platforms` and `platform_loads` (each a `PluginLoad`: the ``ir.platforms`` entry
points, `ir_dispatch.platforms`), and `provider_loads` (each a `ProviderLoad`). Names
imported ``as`` themselves below stay importable here for existing callers but are outside
it: import them from their modules.
"""

import logging

import ir_spec

from ._version import __version__
from .cli import parse_priority_args, split_priority_args
from .cli import parse_priority_env as parse_priority_env
from .defaults import EAGER as EAGER
from .defaults import INDUCTOR as INDUCTOR
from .defaults import MODES as MODES
from .defaults import default_priority as default_priority
from .discovery import DISABLE_ENV as DISABLE_ENV
from .discovery import GROUP as GROUP
from .discovery import ProviderLoad, provider_loads
from .discovery import reset_discovery as reset_discovery
from .installation import _Installed
from .platforms import (
    Platform,
    detect_platform,
    installed_platforms,
    platform_loads,
    platform_origin,
)
from .plugins import PluginLoad
from .selection import (
    Explanation,
    PriorityDispatcher,
    ProviderVerdict,
    Verdict,
    effective_priority,
    explain,
    select,
    stats,
)
from .selection import reset_stats as reset_stats
from .state import batch_invariant as batch_invariant
from .state import (
    collect_stats,
    mode,
    priority,
    refresh_fast_path,
    set_batch_invariant,
    set_priority,
)
from .state import current_mode as current_mode
from .state import read_environment as read_environment
from .state import selection_state as selection_state
from .state import user_priority as user_priority
from .switches import env_switch as env_switch
from .switches import parse_switch

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
    "Explanation",
    "Platform",
    "PluginLoad",
    "ProviderLoad",
    "ProviderVerdict",
    "Verdict",
    "__version__",
    "collect_stats",
    "detect_platform",
    "effective_priority",
    "explain",
    "install",
    "installed_platforms",
    "mode",
    "parse_priority_args",
    "parse_switch",
    "platform_loads",
    "platform_origin",
    "priority",
    "provider_loads",
    "select",
    "set_batch_invariant",
    "set_priority",
    "split_priority_args",
    "stats",
]
