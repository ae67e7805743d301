"""The docs' model page (docs/models.md) is what the registry of model families generates, so
the two cannot drift apart."""

from pathlib import Path

from ir_stack.hf import families

PAGE = Path(__file__).resolve().parents[1] / "docs" / "models.md"


def test_the_committed_models_page_is_the_registrys() -> None:
    assert PAGE.read_text() == families.models_page(), (
        "docs/models.md differs from the registry: run "
        "`python -m ir_stack.hf.families --markdown --output docs/models.md`"
    )
