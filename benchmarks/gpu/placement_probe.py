"""Whether where an op's tensors land in GPU memory moves its replayed time, and with it the
kernel grid's verdict at a shape.

The grid (`ir_stack.bench.kernels`) times every candidate of a shape on one set of inputs, and
its run-to-run spread comes from runs whose inputs the caching allocator puts back at the same
addresses. A few shapes keep losing there by 1-4 % while same-process A/Bs of the same kernels
(`cuda_ab.py`) find them level. Here each shape's inputs are made afresh at `--placements`
places: behind a pad of a different size, all kept alive so that no place is reused. Every
provider is timed at every place, in rotated order, twice (`median_us`: the grid's CUDA-graph
replay median): the spread within a place and the spread across places side by side.

`--other NAME=DIR` builds another source of the cuda kernels (`cuda_ab.py`'s builds) and times
the cuda provider on it as candidate ``cuda@NAME`` beside the providers. Outputs are not
compared here: `cuda_ab.py` checks a build's outputs against this tree's.

Usage (GPU machine, packages on PYTHONPATH, `benchmarks/gpu` too):
  python benchmarks/gpu/placement_probe.py [--shapes OP:TOKENSxWIDTH,...]
      [--providers cuda,triton] [--other NAME=DIR ...] [--placements 8] [--json OUT] [--md OUT]
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import statistics
from pathlib import Path
from typing import Any

import torch
from probe_tools import bf16_inputs, pad_to_new_place

from ir_stack.bench.kernels import replayed_us

#: The shapes the cuda provider lost in round 69's grid by 1-4 %, and two it won (controls).
DEFAULT_SHAPES = (
    "gelu_and_mul:16x5632",
    "silu_and_mul_static_quant_fp8:16x5632",
    "fused_add_rms_norm:1x4096",
    "rms_norm_static_quant_fp8:128x2048",
    "rms_norm:1024x2048",
    "rms_norm_static_quant_fp8:1x8192",
    "gelu_and_mul:128x5632",
    "silu_and_mul_static_quant_fp8:128x5632",
    "static_quant_fp8:128x2048",
    "fused_add_rms_norm:1x8192",
    "rms_norm:1x8192",
    "rms_norm_dynamic_quant_fp8:16x8192",
)


def parse_shape(text: str) -> tuple[str, int, int]:
    """``OP:TOKENSxWIDTH`` as (op, tokens, width); width is the op's hidden size (the gates'
    output width, as in the grid)."""
    try:
        name, dims = text.split(":")
        tokens, width = (int(v) for v in dims.split("x"))
    except ValueError:
        raise SystemExit(
            f"--shapes: {text!r} is not OP:TOKENSxWIDTH (e.g. rms_norm:16x4096)"
        ) from None
    return name, tokens, width


def median_us(fn: Any) -> float:
    """`fn`'s CUDA-graph replay time, median, µs, after one call (the grid's method)."""
    fn()
    torch.cuda.synchronize()
    return replayed_us(fn, 25)


def probe_shape(
    name: str,
    tokens: int,
    width: int,
    providers: list[str],
    placements: int,
    keep: list[Any],
    others: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Every provider (and the cuda provider on each of `others`' builds, ``cuda@NAME``) at
    every place, twice each in rotated order."""
    others = others or {}
    candidates = providers + [f"cuda@{n}" for n in others]
    rng = random.Random(tokens * 100003 + width)
    places = []
    for p in range(placements):
        pad_to_new_place(rng, keep)
        torch.manual_seed(tokens + width)
        op, args = bf16_inputs(name, tokens, width)
        keep.append(args)
        fns = {prov: functools.partial(op.impls[prov].fn, *args) for prov in providers}
        fns |= {f"cuda@{n}": _on_build(op.impls["cuda"].fn, args, ns) for n, ns in others.items()}
        first = next(a for a in args if isinstance(a, torch.Tensor))
        times: dict[str, list[float]] = {c: [] for c in candidates}
        for r in range(2):
            k = (p + r) % len(candidates)
            for prov in candidates[k:] + candidates[:k]:
                times[prov].append(median_us(fns[prov]))
        places.append({"x_ptr_mod_2mb": first.data_ptr() % (2 << 20), "us": times})
    return {"op": name, "tokens": tokens, "width": width, "places": places}


def _on_build(fn: Any, args: tuple[Any, ...], namespace: Any) -> Any:
    """`fn(*args)` with the cuda provider calling `namespace` (another build's ops)."""
    from cuda_ab import kernels

    def run() -> Any:
        with kernels(namespace):
            return fn(*args)

    return run


def summarize(record: dict[str, Any], providers: list[str]) -> dict[str, Any]:
    """Per provider: the fastest of each place, their median, min and max, and the largest
    difference of a place's two timings; the ratio of the first provider to the second at each
    place (fastest against fastest, ``ratio``), and of each other build to the cuda provider
    (``cuda@NAME/cuda``)."""
    out: dict[str, Any] = {}
    for prov in providers:
        best = [min(pl["us"][prov]) for pl in record["places"]]
        within = max(abs(pl["us"][prov][0] - pl["us"][prov][1]) for pl in record["places"])
        out[prov] = {
            "median": statistics.median(best),
            "min": min(best),
            "max": max(best),
            "within_place": within,
        }
    if len(providers) >= 2:
        out["ratio"] = _ratios(record, *providers[:2])
    for build in (p for p in providers if p.startswith("cuda@")):
        out[f"{build}/cuda"] = _ratios(record, build, "cuda")
    return out


def _ratios(record: dict[str, Any], a: str, b: str) -> dict[str, float]:
    """`a`'s fastest over `b`'s at each place: median, min, max, and the places `a` is ahead."""
    ratios = [min(pl["us"][a]) / min(pl["us"][b]) for pl in record["places"]]
    return {
        "median": statistics.median(ratios),
        "min": min(ratios),
        "max": max(ratios),
        "wins": sum(r <= 1.0 for r in ratios),
    }


def _cell(v: dict[str, float]) -> str:
    return f"{v['median']:.3f} ({v['max'] - v['min']:.3f}, {v['within_place']:.3f})"


def markdown(records: list[dict[str, Any]], providers: list[str], device: str) -> str:
    a, b = providers[:2]
    builds = [p for p in providers if p.startswith("cuda@")]
    lines = [
        f"# Placement probe — {device}",
        "",
        f"torch {torch.__version__}; bf16; CUDA-graph replay medians (µs), the fastest of two "
        f"timings at each of {len(records[0]['places'])} places. `within` is the largest "
        "difference of a place's two timings; `across` is max - min of the places' fastest.",
        "",
        f"| op | shape | {a} median (across, within) | {b} median (across, within) | "
        f"{a}/{b} median [min, max] | places {a} <= {b} |"
        + "".join(
            f" {c} median (across, within) | {c}/cuda median [min, max] | places {c} <= cuda |"
            for c in builds
        ),
        "|---|---|---|---|---|---|" + "---|---|---|" * len(builds),
    ]
    for rec in records:
        s = rec["summary"]
        places = len(rec["places"])
        lines.append(
            f"| {rec['op']} | {rec['tokens']}x{rec['width']} | {_cell(s[a])} | {_cell(s[b])} | "
            f"{_ratio_cell(s['ratio'], places)} |"
            + "".join(f" {_cell(s[c])} | {_ratio_cell(s[c + '/cuda'], places)} |" for c in builds)
        )
    return "\n".join(lines) + "\n"


def _ratio_cell(r: dict[str, float], places: int) -> str:
    return f"{r['median']:.3f} [{r['min']:.3f}, {r['max']:.3f}] | {r['wins']}/{places}"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--shapes", default=",".join(DEFAULT_SHAPES))
    parser.add_argument("--providers", default="cuda,triton")
    parser.add_argument("--placements", type=int, default=8)
    parser.add_argument("--other", action="append", default=[], metavar="NAME=DIR")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--md", type=Path)
    opts = parser.parse_args()
    if opts.placements < 1:
        raise SystemExit(f"--placements must be at least 1, got {opts.placements}")
    import ir_kernels_triton  # noqa: F401  (registers the providers)

    providers = opts.providers.split(",")
    others: dict[str, Any] = {}
    if opts.other:
        from cuda_ab import build_all, named_source

        others = build_all(dict(named_source(text) for text in opts.other))
        if "cuda" not in providers:
            providers.insert(0, "cuda")
    if "cuda" in providers:
        import ir_kernels_cuda.impls  # noqa: F401

    keep: list[Any] = []
    records = []
    for text in opts.shapes.split(","):
        name, tokens, width = parse_shape(text)
        rec = probe_shape(name, tokens, width, providers, opts.placements, keep, others)
        rec["summary"] = summarize(rec, providers + [f"cuda@{n}" for n in others])
        records.append(rec)
        print(json.dumps({k: rec[k] for k in ("op", "tokens", "width", "summary")}), flush=True)
    device = torch.cuda.get_device_name()
    if opts.json:
        opts.json.write_text(json.dumps({"device": device, "records": records}, indent=1))
    if opts.md and len(providers) >= 2:
        opts.md.write_text(markdown(records, providers + [f"cuda@{n}" for n in others], device))


if __name__ == "__main__":
    main()
