"""The autotuned choices of compiled pieces (``PassConfig.autotune``), kept with them.

A piece compiled with autotuning embeds its measured choices in its code; the decisions
themselves (every candidate's time, the choice, the priority's choice) are stored as the
compile cache entry's metadata (`metadata_of`), so a piece loaded on a warm start reports the
same choices without timing anything again (`restore`). Both record them in
``counters.autotune_decisions`` under the compile label.
"""

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from ir_passes.autotune import Decision
from ir_passes.report import PassReport, new_report

from .counters import counters

logger = logging.getLogger("ir_piecewise")

#: the key of the decisions in a cache entry's metadata
METADATA_KEY = "autotune"


def decisions_of(reports: Iterable[PassReport]) -> dict[str, Decision]:
    """Graph node name -> decision, over the reports of one piece's compilation."""
    found: dict[str, Decision] = {}
    for report in reports:
        found.update(report.autotune)
    return found


def metadata_of(decisions: Mapping[str, Decision]) -> dict[str, Any]:
    """The cache entry metadata holding `decisions` (empty where there are none)."""
    if not decisions:
        return {}
    return {METADATA_KEY: {name: d.as_dict() for name, d in decisions.items()}}


def record(label: str, piece: str, decisions: Mapping[str, Decision]) -> None:
    """Count `piece`'s decisions under compile `label` (``<piece>.<node>`` -> decision)."""
    if decisions:
        per_label = counters.autotune_decisions.setdefault(label, {})
        per_label.update({f"{piece}.{name}": d for name, d in decisions.items()})


def restore(label: str, piece: str, metadata: Mapping[str, Any]) -> None:
    """For a piece loaded from the cache: its stored decisions into the counters and a new
    report (``passes_ran`` False, `ir_passes.last_report`). Metadata that does not hold valid
    decisions is logged and left out: the piece's code, which embeds the choices, still runs."""
    stored = metadata.get(METADATA_KEY)
    if not stored:
        return
    try:
        if not isinstance(stored, dict):
            raise ValueError(f"got {stored!r}; expected node -> decision")
        decisions = {str(name): Decision.from_dict(d) for name, d in stored.items()}
    except ValueError as exc:
        logger.warning("ir_piecewise: %s %s: unreadable autotune metadata: %s", piece, label, exc)
        return
    report = new_report()
    report.autotune.update(decisions)
    record(label, piece, decisions)
