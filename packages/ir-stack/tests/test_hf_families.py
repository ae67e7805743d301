"""The registry of model families (`ir_stack.hf.families`): the model types `convert_hf_model`
takes are read from it, its classes are transformers', and the docs' page made from it lists
every family and type; `ir_stack.hf` needs transformers and says how to install it."""

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import transformers
from packaging.version import Version

from ir_stack import hf
from ir_stack.hf import families
from ir_stack.hf.families import FAMILIES, PARTS, Family, ModelType


def test_supported_model_types_are_the_registrys_each_once() -> None:
    listed = [t.name for family in FAMILIES for t in family.model_types]
    assert tuple(listed) == hf.SUPPORTED_MODEL_TYPES
    assert len(set(listed)) == len(listed)
    for family in FAMILIES:
        for model_type in family.model_types:
            assert hf.family_of(model_type.name) is family
    assert hf.family_of("gpt2") is None
    assert hf.family_of(None) is None


def test_each_model_type_names_transformers_classes_of_that_type() -> None:
    """A model type's configuration class declares that ``model_type``, its model class takes
    that configuration (a type on another family's classes, as InternLM 3's on Llama's, is
    mapped to them by transformers' auto classes), and the multimodal class said to hold it
    exists; the installed transformers lacks them only where it is older than the release the
    registry names (`ModelType.min_transformers`, else `OLDEST_TESTED`)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    installed = Version(transformers.__version__)
    for family in FAMILIES:
        for t in family.model_types:
            since = Version(t.min_transformers or families.OLDEST_TESTED)
            if not hasattr(transformers, t.config_class):
                assert installed < since, t
                continue
            config_class = getattr(transformers, t.config_class)
            assert config_class.model_type == t.name, t
            model_class = getattr(transformers, t.model_class)
            assert issubclass(config_class, model_class.config_class) or (
                MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(t.name) == t.model_class
            ), t
            if t.held_by:
                holder, _, path = t.held_by.partition(": ")
                assert hasattr(transformers, holder), t
                assert path in families.language_model_paths(), t


def test_the_families_parts_and_facts_are_well_formed() -> None:
    for family in FAMILIES:
        assert family.converts <= set(PARTS), family.name
        assert all((family.norms, family.mlp, family.rotary)), family.name
        if "rotary" not in family.converts:
            assert family.rotary.startswith("no"), family.name
    x = (ModelType("x", "XConfig", "XForCausalLM"),)
    attention: Any = frozenset({"attention"})
    with pytest.raises(ValueError, match=r"'converts' got \['attention'\]; expected parts"):
        Family("X", x, attention, "norms", "mlp", "rotary")
    with pytest.raises(ValueError, match="'model_types' is empty"):
        Family("X", (), frozenset(), "norms", "mlp", "rotary")
    assert [f.name for f in FAMILIES if f.norms_after_rotation] == ["Hunyuan", "Llama 4 text"]
    scales = {f.name: f.query_scale for f in FAMILIES if f.query_scale}
    assert scales == {"Ministral 3": "scaling beta", "Llama 4 text": "nope temperature"}


def test_two_families_cannot_share_a_model_type() -> None:
    llama = FAMILIES[0]
    twin = Family("Twin", llama.model_types, llama.converts, "a", "b", "c")
    with pytest.raises(ValueError, match="model type 'llama' is in two families: 'Llama' and"):
        families._check_unique([llama, twin])


def test_the_models_page_lists_every_family_and_model_type() -> None:
    page = families.models_page()
    rows = [line for line in page.splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) == 2 + len(FAMILIES) + len(hf.SUPPORTED_MODEL_TYPES)  # 2 header rows
    for family in FAMILIES:
        assert f"| {family.name} | " in page
        for t in family.model_types:
            assert f"| `{t.name}` | `{t.config_class}` | `{t.model_class}` |" in page
    assert f"any of the\n{len(hf.SUPPORTED_MODEL_TYPES)} model types" in page
    # a pipe inside a cell is escaped, an empty cell is a dash
    lone = Family("A|B", (ModelType("ab", "C", "M"),), frozenset({"norms"}), "n", "m", "r")
    assert "| A\\|B | `ab` | n | m | r | - |" in families.markdown_table([lone])


def test_the_generator_writes_the_page_or_prints_it(tmp_path: Path) -> None:
    out = tmp_path / "models.md"
    assert families.main(["--markdown", "--output", str(out)]) == 0
    assert out.read_text() == families.models_page()
    done = subprocess.run(
        [sys.executable, "-m", "ir_stack.hf.families", "--markdown"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == families.models_page()
    with pytest.raises(SystemExit):
        families.main([])


def test_multimodal_models_hold_their_language_models_at_the_registrys_paths() -> None:
    assert families.language_model_paths() == (
        "language_model",
        "model.language_model",
        "model.text_model",
    )


def test_ir_stack_alone_does_not_import_transformers() -> None:
    code = "import sys, ir_stack; assert 'transformers' not in sys.modules, 'imported'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


def test_ir_stack_hf_without_transformers_names_the_extra() -> None:
    """With transformers not importable (None in ``sys.modules``, as where it is not
    installed), ``import ir_stack.hf`` raises an ImportError saying how to install it."""
    code = "import sys; sys.modules['transformers'] = None; import ir_stack.hf"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert 'ImportError: ir_stack.hf needs transformers, the "hf" extra' in done.stderr
    assert 'pip install "ir-stack[hf]"' in done.stderr
