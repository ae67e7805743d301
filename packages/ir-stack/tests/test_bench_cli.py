"""``ir-stack bench``: the suites that run on the CPU write their JSON, markdown and plot; a
GPU-only suite named on the CPU is refused with exit status 2; ``compare`` exits 1 on a
regression beyond the threshold; ``render`` and ``list``."""

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ir_stack.bench import dispatch, e2e, results, tp
from ir_stack.bench.results import Device, Metric


def run(*args: str, module: str = "ir_stack.cli") -> subprocess.CompletedProcess[str]:
    """`module` run with `args` in a child process with the GPUs and Triton's interpreter
    hidden: the CPU path, which must hold on GPU machines too."""
    env = {**os.environ, "COLUMNS": "200", "CUDA_VISIBLE_DEVICES": ""}
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        check=False,
    )


@pytest.mark.parametrize("suite", ["kernels", "fusions", "attention", "memory", "hf"])
def test_a_gpu_suite_named_on_the_cpu_is_refused(suite: str, tmp_path: Path) -> None:
    """Asked for by name, a suite that cannot run here fails rather than skips."""
    done = run("bench", "--only", suite, "--out", str(tmp_path / "unused"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{suite}: no CUDA GPU here; this suite runs on one only" in done.stdout
    assert not (tmp_path / "unused").exists()
    # its own command line refuses the same way
    done = run("--out", str(tmp_path / "unused"), module=f"ir_stack.bench.{suite}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no CUDA GPU here" in done.stdout


def test_bad_suite_names_and_stray_options_are_usage_errors() -> None:
    done = run("bench", "--only", "kernels,warp")
    assert done.returncode == 2
    assert "--only: unknown suite(s) ['warp']; expected some of ['kernels'," in done.stderr
    done = run("bench", "--only", "e2e,startup", "--", "--iters", "3")
    assert done.returncode == 2
    assert "options after `--` (--iters 3) need exactly one suite in --only" in done.stderr


def test_e2e_writes_json_markdown_and_plot(tmp_path: Path) -> None:
    """On the CPU, where the tiny model's modes agree within 1e-4, and so do the Qwen3-style
    tiny model's rotary-fusion modes, each firing its fusion alone; the suite's own options
    pass through after ``--``."""
    modes = "eager native,eager best kernels,torch.compile,ir_stack"
    done = run(
        "bench", "--only", "e2e", "--out", str(tmp_path), "--model", "tiny", "--",
        "--batches", "1,3", "--prefill", "8", "--context", "8", "--iters", "1", "--modes", modes,
        "--fusion-batches", "2", "--fusion-prefill", "6",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    result = results.load(tmp_path / "e2e-cpu.json")
    assert result.suite == "e2e"
    assert result.device.slug == "cpu"
    cells = {(r["model"], r["mode"], r["workload"]) for r in result.rows}
    assert cells == {
        ("tiny", m, w) for m in modes.split(",") for w in ("decode b=1", "decode b=3", "prefill 8")
    } | {("qwen3 tiny", m, w) for m in e2e.FUSION_MODES for w in ("decode b=2", "prefill 6")}
    assert all(r["max_abs_error"] < 1e-4 for r in result.rows)
    assert all(r["ms"] > 0 for r in result.rows)
    fired = {r["mode"]: r["fusions_fired"] for r in result.rows if r["model"] == "qwen3 tiny"}
    assert fired["ir_stack, rotary fusions off"] == {}
    assert set(fired["ir_stack, qk_norm+rope fused"]) == {"qk_norm+rotary_embedding"}
    assert set(fired["ir_stack, rope+kvcache fused"]) == {"rotary_embedding+write_kv_cache"}
    text = (tmp_path / "e2e-cpu.md").read_text()
    assert "| ir_stack |" in text
    assert "## qwen3 tiny" in text
    assert "- ir_stack, qk_norm+rope fused: fired `qk_norm+rotary_embedding` x" in text
    assert (tmp_path / "e2e-cpu.png").stat().st_size > 0


def test_e2e_refuses_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        e2e.main(["--out", "x", "--modes", "eager native,warp drive"])
    assert "--modes: unknown ['warp drive']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        e2e.main(["--out", "x", "--batches", "1,0"])
    assert "--batches '1,0': expected positive batch sizes" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        e2e.main(["--out", "x", "--fusion-batches", "1,x"])
    assert "--fusion-batches '1,x': expected sizes such as 1,32" in capsys.readouterr().err


def test_startup_times_a_cold_and_a_warm_start(tmp_path: Path) -> None:
    done = run(
        "bench", "--only", "startup", "--out", str(tmp_path), "--model", "tiny", "--",
        "--ways", "ir_stack.compile", "--batches", "1", "--prefill", "0", "--context", "8",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    result = results.load(tmp_path / "startup-cpu.json")
    cold, warm = result.rows
    assert (cold["cache"], warm["cache"]) == ("cold", "warm")
    assert cold["compilations"] > 0
    assert warm["compilations"] == 0  # every piece loaded from the cache the cold start filled
    assert warm["cache_hits"] > 0
    assert "warm faster by" in (tmp_path / "startup-cpu.md").read_text()


def test_dispatch_measures_the_op_call_against_the_direct_call(tmp_path: Path) -> None:
    assert dispatch.main(["--out", str(tmp_path), "--quick"]) == 0
    result = results.load(tmp_path / "dispatch-cpu.json")
    us = {(r["case"], r["call"]): r["us"] for r in result.rows}
    case = "rms_norm, trivial provider"
    assert us[(case, "op call")] > us[(case, "direct call of the provider")] > 0
    assert us[("selection", "ir_dispatch.explain")] > 0
    inplace = "fused_add_rms_norm, trivial in-place provider"
    assert (
        us[(inplace, "op call (clones first), no_grad")]
        > us[(inplace, "direct call of the provider")]
    )
    assert "overhead µs" in (tmp_path / "dispatch-cpu.md").read_text()
    # the trivial providers are gone again
    from ir_spec import ops

    assert dispatch.TRIVIAL not in ops.rms_norm.impls


def write_pair(tmp_path: Path, slower: float) -> tuple[Path, Path]:
    rng = random.Random(7)
    rows: list[dict[str, Any]] = [
        {"model": "tiny", "mode": "ir_stack", "workload": f"decode b={b}", "ms": rng.uniform(1, 9)}
        for b in (1, 8, 32)
    ]
    paths = []
    for name, factor in (("old", 1.0), ("new", slower)):
        result = results.new_result(
            "e2e",
            "End to end",
            Device("CPU (test)", "cpu", "cpu"),
            {},
            ["model", "mode", "workload"],
            [Metric("ms", "ms")],
        )
        result.rows = [
            dict(r, ms=r["ms"] * (factor if r["workload"] == "decode b=8" else 1)) for r in rows
        ]
        paths.append(results.save(result, tmp_path / name, render_too=False))
    return paths[0], paths[1]


def test_compare_exits_non_zero_on_a_regression_beyond_the_threshold(tmp_path: Path) -> None:
    old, new = write_pair(tmp_path, slower=1.25)
    out = tmp_path / "comparison.md"
    done = run("bench", "compare", str(old), str(new), "--threshold", "10", "--out", str(out))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "**1 regression(s)** beyond 10%" in out.read_text()
    assert "| tiny | ir_stack | decode b=8 | ms |" in done.stdout
    done = run("bench", "compare", str(old), str(new), "--threshold", "30")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no regression beyond 30%" in done.stdout


def test_compare_names_bad_input(tmp_path: Path) -> None:
    old, _ = write_pair(tmp_path, slower=1.0)
    done = run("bench", "compare", str(old), str(tmp_path / "nope.json"))
    assert done.returncode == 2
    assert "nope.json: cannot read it" in done.stderr
    done = run("bench", "compare", str(old), str(old), "--where", "mode")
    assert done.returncode == 2
    assert "--where 'mode': expected FIELD=VALUE[,VALUE...]" in done.stderr
    done = run("bench", "compare", str(old), str(old), "--threshold", "-5")
    assert "--threshold -5.0: expected a percentage >= 0" in done.stderr


def test_render_and_list(tmp_path: Path) -> None:
    old, _ = write_pair(tmp_path, slower=1.0)
    done = run("bench", "render", str(old))
    assert done.returncode == 0, done.stdout + done.stderr
    assert old.with_suffix(".md").exists()
    assert old.with_suffix(".png").stat().st_size > 0
    done = run("bench", "list")
    assert done.returncode == 0, done.stderr
    assert "kernels (GPU; cannot run here: no CUDA GPU here" in done.stdout
    assert "dispatch (CPU or GPU; runs here)" in done.stdout


def test_tp_starts_two_gloo_ranks_and_writes_its_result(tmp_path: Path) -> None:
    """On the CPU: two gloo ranks of the tiny model; every mode, the ir_stack one compiled
    with a pass variant, gives the single-device logits."""
    modes = "eager native,torch.compile,ir_stack"
    done = run(
        "bench", "--only", "tp", "--out", str(tmp_path), "--model", "tiny", "--",
        "--batches", "2", "--prefill", "8", "--context", "8", "--iters", "1", "--modes", modes,
        "--pass-variants=-O0",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    result = results.load(tmp_path / "tp-cpu.json")
    assert result.params["tp"] == 2
    assert result.facts["backend"] == "gloo"
    cells = {(r["mode"], r["workload"]) for r in result.rows}
    assert cells == {
        (m, w)
        for m in ("eager native", "torch.compile", "ir_stack [-O0]")
        for w in ("decode b=2", "prefill 8")
    }
    assert all(r["max_abs_error"] < 1e-4 for r in result.rows)
    assert "against the single-device model's eager native" in (tmp_path / "tp-cpu.md").read_text()


def test_tp_refuses_a_world_the_model_does_not_divide_into(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        tp.main(["--out", "x", "--model", "tiny", "--tp", "3"])
    assert "num_heads=4 does not divide among them" in capsys.readouterr().err


def test_tp_fusion_variants_run_sequence_parallel_on_compile_sizes(tmp_path: Path) -> None:
    """On the CPU: the all-reduce + norm fusion off, and sequence parallelism from 8 tokens
    (the 8-token prefill, compiled as a size of its own), both give the single-device logits;
    ``tp-fusions`` names the four variants the two-GPU run measures."""
    variants = "--pass.fuse_allreduce_rms=false;" + (
        "--pass.enable_sp=true --pass.sp_min_token_num=8 --pass.force_fusion=true"
    )
    done = run(
        "bench", "--only", "tp", "--out", str(tmp_path), "--model", "tiny", "--",
        "--batches", "2", "--prefill", "8", "--context", "8", "--iters", "1",
        "--modes", "ir_stack", f"--pass-variants={variants}",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    result = results.load(tmp_path / "tp-cpu.json")
    assert {r["mode"] for r in result.rows} == {f"ir_stack [{v}]" for v in variants.split(";")}
    assert all(r["max_abs_error"] < 1e-4 for r in result.rows)
    args = tp.parse_args(["--model", "tiny", "--pass-variants=tp-fusions"])
    assert [flags for flags, _ in args.variants] == tp.TP_FUSION_VARIANTS.split(";")
    assert args.variants[3][1].passes.fusion_on("enable_sp")


def test_tp_kernels_times_both_paths_over_two_gloo_ranks(tmp_path: Path) -> None:
    """On the CPU (kernels in the interpreter): the fused op takes the fallback path and
    agrees with the all-reduce + norm and the native composition."""
    done = run(
        "bench", "--only", "tp-kernels", "--out", str(tmp_path), "--",
        "--tokens", "1,6", "--hidden", "32", "--iters", "1",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    result = results.load(tmp_path / "tp-kernels-cpu.json")
    assert {(r["impl"], r["tokens"]) for r in result.rows} == {
        (impl, t) for impl in ("fused", "all_reduce + norm") for t in (1, 6)
    }
    assert {r["path"] for r in result.rows if r["impl"] == "fused"} == {"fallback"}
    assert all(r["max_abs_error"] < 1e-5 for r in result.rows)
    assert "| tokens | fused path |" in (tmp_path / "tp-kernels-cpu.md").read_text()
