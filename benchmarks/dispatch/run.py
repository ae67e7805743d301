"""Run the eager-overhead benchmark and write benchmarks/results/dispatch-eager-overhead.{json,md}.

Overhead = median time of the op call - median time of the direct provider call (same run).
"""

import json
import platform
import subprocess
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

HERE = Path(__file__).parent
RESULTS = HERE.parent / "results"


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw.json"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                str(HERE / "test_eager_overhead.py"),
                "-q",
                "-p",
                "no:cacheprovider",
                f"--benchmark-json={raw}",
            ],
            check=False,
        )
        if done.returncode != 0:
            return done.returncode
        data = json.loads(raw.read_text())
    medians = {b["name"]: b["stats"]["median"] * 1e9 for b in data["benchmarks"]}
    spreads = {b["name"]: b["stats"]["iqr"] * 1e9 for b in data["benchmarks"]}
    direct = medians["test_direct_provider_call"]
    rows = []
    for name, label in [
        ("test_ir_spec_op_call", "ir_spec.ops.rms_norm (ir-dispatch installed)"),
        ("test_vllm_ir_op_call_default_mode", "vllm.ir.ops.rms_norm, default (torch op)"),
        ("test_vllm_ir_op_call_unwrapped", "vllm.ir.ops.rms_norm, torch wrap disabled"),
    ]:
        if name in medians:
            rows.append(
                {
                    "call": label,
                    "median_ns": round(medians[name], 1),
                    "iqr_ns": round(spreads[name], 1),
                    "overhead_ns": round(medians[name] - direct, 1),
                }
            )
    summary = {
        "cpu": cpu_name(),
        "python": platform.python_version(),
        "torch": _version("torch"),
        "ir-spec": _version("ir-spec"),
        "ir-dispatch": _version("ir-dispatch"),
        "vllm": _version("vllm"),
        "direct_call_median_ns": round(direct, 1),
        "rows": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "dispatch-eager-overhead.json").write_text(json.dumps(summary, indent=2) + "\n")
    lines = [
        "# Eager dispatch overhead (CPU)",
        "",
        f"CPU: {summary['cpu']}; Python {summary['python']}; torch {summary['torch']}; "
        f"ir-spec {summary['ir-spec']}, ir-dispatch {summary['ir-dispatch']}; "
        f"vLLM {summary['vllm']}.",
        "",
        "A trivial rms_norm provider (returns its input) is selected by priority; overhead is "
        "the median op call minus the median direct call of the provider function "
        f"({summary['direct_call_median_ns']} ns), measured in one pytest-benchmark run "
        "(2000 calls per round, 300 rounds).",
        "",
        "| call | median (ns) | IQR (ns) | overhead (ns) |",
        "|---|---|---|---|",
        *[f"| {r['call']} | {r['median_ns']} | {r['iqr_ns']} | {r['overhead_ns']} |" for r in rows],
        "",
    ]
    (RESULTS / "dispatch-eager-overhead.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
