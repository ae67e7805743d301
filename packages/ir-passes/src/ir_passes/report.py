"""`PassReport`: what the passes did in one compilation; `last_report` per thread, and
`collect_reports` for every compilation of a block (a piecewise model compiles several)."""

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from .autotune import Decision


@dataclass
class PassReport:
    """What one compilation's passes did.

    Attributes:
        selected_impls: op name -> {graph node name -> provider} chosen by lowering.
        functionalized: ``maybe_inplace`` calls turned into the default overload.
        donated_inputs: indices of graph inputs passed to ``maybe_inplace`` as activations.
        inplace_checks: ``maybe_inplace`` calls given a check at run time that their tensor
            arguments share no memory (an in-place implementation is selected, and graph
            inputs or layouts leave it open at compile time).
        clones_inserted: clones lowering added for in-place implementations.
        clones_removed: of those, clones proven unneeded and removed.
        fusions: fusion pattern -> number of times it fired.
        skipped: ``"<switch>: <node>: <reason>"`` for each match a fusion left alone for a
            reason worth knowing (a world of one rank, a token count that does not divide
            among the ranks, a device the fused op does not run on); also logged.
        platform_passes: the extra passes of the platform in force that ran, as
            ``<platform>:<pass>`` (`ir_dispatch.Platform.passes`).
        passes_ran: True when the post-grad passes (fusion, lowering, clone elimination) ran.
            False when Inductor's caches served the compiled code: the passes did not run
            again and their effect is in the cached code. The pre-grad functionalization runs
            before Inductor's cache lookups, so ``functionalized`` may be set either way.
        autotune: graph node name -> the measured decision lowering made for it
            (``PassConfig.autotune``: every candidate's time, the choice, the priority's
            choice); empty with autotuning off. A piece ir-piecewise loads from its compile
            cache gets the decisions stored with it.
    """

    selected_impls: dict[str, dict[str, str]] = field(default_factory=dict)
    functionalized: int = 0
    donated_inputs: set[int] = field(default_factory=set)
    inplace_checks: int = 0
    clones_inserted: int = 0
    clones_removed: int = 0
    fusions: Counter[str] = field(default_factory=Counter)
    skipped: list[str] = field(default_factory=list)
    platform_passes: list[str] = field(default_factory=list)
    passes_ran: bool = False
    autotune: dict[str, Decision] = field(default_factory=dict)

    @property
    def autotune_changed(self) -> dict[str, Decision]:
        """The decisions of `autotune` that chose otherwise than the priority."""
        return {name: d for name, d in self.autotune.items() if d.changed}


_local = threading.local()


def new_report() -> PassReport:
    """Start the report of a new compilation in this thread."""
    report = PassReport()
    _local.report = report
    _local.claimed = False
    for collected in getattr(_local, "collectors", ()):
        collected.append(report)
    return report


@contextmanager
def collect_reports() -> Iterator[list[PassReport]]:
    """The reports of every compilation this thread starts inside the block, in order (each
    piece of a piecewise model is one; `last_report` keeps only the last). Blocks nest: an
    outer block gets the inner block's reports too. A compilation served whole from Inductor's
    caches starts a report whose ``passes_ran`` is False."""
    collected: list[PassReport] = []
    collectors: list[list[PassReport]] = getattr(_local, "collectors", [])
    _local.collectors = [*collectors, collected]
    try:
        yield collected
    finally:
        _local.collectors = collectors


def claim_report() -> PassReport:
    """The report the pre-grad pass fills: the one `compile` started for this compilation if
    no pass has claimed it yet, else a new one."""
    report: PassReport | None = getattr(_local, "report", None)
    if report is None or getattr(_local, "claimed", False):
        report = new_report()
    _local.claimed = True
    return report


def current_report() -> PassReport:
    """The report being filled in this thread (a new one if none)."""
    report: PassReport | None = getattr(_local, "report", None)
    return report if report is not None else new_report()


def last_report() -> PassReport | None:
    """The report of the most recent compilation in this thread, or None."""
    report: PassReport | None = getattr(_local, "report", None)
    return report
