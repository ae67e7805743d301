"""`selection_state`: cheap, and different whenever a selection may differ."""

import ir_dispatch


def test_selection_state_changes_with_priorities_scopes_and_modes() -> None:
    ir_dispatch.set_priority()
    base = ir_dispatch.selection_state()
    assert ir_dispatch.selection_state() == base
    hash(base)
    with ir_dispatch.priority(rms_norm=["native"]):
        scoped = ir_dispatch.selection_state()
        assert scoped != base
    assert ir_dispatch.selection_state() == base
    ir_dispatch.set_priority(rms_norm=["native"])
    changed = ir_dispatch.selection_state()
    assert changed != base
    ir_dispatch.set_batch_invariant(True)
    assert ir_dispatch.selection_state() != changed
    ir_dispatch.set_batch_invariant(False)
    ir_dispatch.set_priority()
