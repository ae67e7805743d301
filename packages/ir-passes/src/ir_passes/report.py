"""`PassReport`: what the passes did in one compilation; `last_report` per thread."""

import threading
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class PassReport:
    """What one compilation's passes did.

    Attributes:
        selected_impls: op name -> {graph node name -> provider} chosen by lowering.
        functionalized: ``maybe_inplace`` calls turned into the default overload.
        donated_inputs: indices of graph inputs passed to ``maybe_inplace`` as activations.
        clones_inserted: clones lowering added for in-place implementations.
        clones_removed: of those, clones proven unneeded and removed.
        fusions: fusion pattern -> number of times it fired.
        passes_ran: False when the compilation was served from Inductor's caches (the passes
            did not run again; their effect is in the cached code).
    """

    selected_impls: dict[str, dict[str, str]] = field(default_factory=dict)
    functionalized: int = 0
    donated_inputs: set[int] = field(default_factory=set)
    clones_inserted: int = 0
    clones_removed: int = 0
    fusions: Counter[str] = field(default_factory=Counter)
    passes_ran: bool = False


_local = threading.local()


def new_report() -> PassReport:
    """Start the report of a new compilation in this thread."""
    report = PassReport()
    _local.report = report
    return report


def claim_report() -> PassReport:
    """The report the pre-grad pass fills: the one `compile` started for this compilation if
    no pass has used it yet, else a new one."""
    report: PassReport | None = getattr(_local, "report", None)
    if report is None or report.passes_ran:
        report = new_report()
    report.passes_ran = True
    return report


def current_report() -> PassReport:
    """The report being filled in this thread (a new one if none)."""
    report: PassReport | None = getattr(_local, "report", None)
    return report if report is not None else new_report()


def last_report() -> PassReport | None:
    """The report of the most recent compilation in this thread, or None."""
    report: PassReport | None = getattr(_local, "report", None)
    return report
