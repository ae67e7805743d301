"""Suite ``hf``: transformers models converted to IR ops against the originals, on a GPU.

For each family (`ir_stack.bench.hf_families`; a Llama of Llama 3.2 1B's shape by default), in
one process, the forward (a batch of one-token sequences, no KV cache, and one prompt) in these
ways:

- ``hf eager``: the model as transformers runs it (the reference of every way's logits);
- ``hf torch.compile``: stock ``torch.compile`` of that model with Inductor's CUDA graphs (as
  ``mode="reduce-overhead"``), what a user would otherwise run;
- ``ir eager``: after ``convert_hf_model`` (the IR ops on the kernels selected for the GPU),
  and ``ir eager, plans off`` the same with the Triton kernels' launch plans turned off;
- ``ir compile``: ``ir_passes.compile`` of the converted model (Inductor's CUDA graphs too),
  default priorities: the simple ops run as Inductor's code;
- ``ir compile, kernels, no add fusion`` / ``ir compile, kernels``: the same with the op
  kernels ahead of Inductor's code, without and with the fusion of each residual add and the
  norm after it into ``fused_add_rms_norm``;
- ``liger eager`` / ``liger torch.compile``: a copy of the original with Liger-Kernel's
  patches for its family (its loss kernels off), where ``liger_kernel`` is installed and
  patches the family.

Forward times are ``triton.testing.do_bench`` medians (µs). Then transformers' ``generate``
(`ir_stack.bench.hf_generate`): greedy tokens with a static KV cache, the decoding forward
compiled with CUDA graphs, original against converted, µs a token.

Then the QK-norm + RoPE fusion on a converted transformers Qwen3 (Qwen3 4B's shape, random
weights, ``--fusion-layers`` layers, 8 by default; family ``qwen3 (rotary fusions)`` in the
result), forward without a KV cache as above, for decode batches of 1 and 32 one-token
sequences and a 2048-token prompt: ``hf eager``, then ``ir_passes.compile`` with the op kernels
first and Inductor's CUDA graphs, ``enable_qk_norm_rope_fusion`` off and on (at every token
count); the rows say how often it fired. The rotary + KV-cache fusion has no row here: a
converted model keeps transformers' cache, which no ``write_kv_cache`` writes (the ``e2e``
suite's Qwen3-style reference model has it). ``--no-fusion-rows`` leaves them out.

    ir-stack bench --only hf [--quick]
    python -m ir_stack.bench.hf --out DIR [--families llama,gemma3] [--layers N] [--skip WAY]

Writes ``DIR/hf-<device>.json``, ``.md`` and ``.png`` (`ir_stack.bench.hf_report`).
"""

from __future__ import annotations

import argparse
import copy
import functools
import importlib.metadata
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

import ir_dispatch
import ir_passes
from ir_kernels_triton import launch_plans
from ir_spec import ops

from . import common, results, timing

KEY = ["family", "way", "workload"]
METRICS = [results.Metric("us", "µs")]
SHAPES = {"decode 16 x 1": (16, 1), "prompt 1 x 1024": (1, 1024)}
#: Inductor's CUDA graphs (what ``mode="reduce-overhead"`` turns on; ``ir_passes.compile``
#: passes its hooks as options, which torch.compile does not take beside a mode)
GRAPHS: dict[str, str | int | bool | Callable[..., Any]] = {"triton.cudagraphs": True}
#: the ops a converted model calls, whose kernels the ``kernels`` ways put ahead of Inductor's
KERNEL_OPS = ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "gelu_and_mul", "rotary_embedding")
#: (name, fuse, kernels first) of each compiled way of the converted model
COMPILED = [
    ("ir compile", True, False),
    ("ir compile, kernels, no add fusion", False, True),
    ("ir compile, kernels", True, True),
]
#: the ways `--skip` may leave out (all but ``hf eager``, the reference of the logits)
SKIPPABLE = (
    "hf torch.compile",
    "ir eager, plans off",
    "ir eager",
    *(name for name, _, _ in COMPILED),
    "liger eager",
    "liger torch.compile",
)


#: the fusion rows' family name, workloads ((batch, tokens), forward without a KV cache) and
#: ways (name -> whether ``enable_qk_norm_rope_fusion`` is on)
FUSION_FAMILY = "qwen3 (rotary fusions)"
FUSION_SHAPES = {"decode b=1": (1, 1), "decode b=32": (32, 1), "prefill 2048": (1, 2048)}
FUSION_WAYS = {
    "ir compile, kernels, qk_norm fusion off": False,
    "ir compile, kernels, qk_norm fusion on": True,
}


def kernels_first(names: Sequence[str] = KERNEL_OPS) -> dict[str, list[str]]:
    """The priority putting the registered kernel providers ahead of native for `names`."""
    return {
        name: [p for p in ("triton", "cuda") if p in getattr(ops, name).impls] + ["native"]
        for name in names
    }


def liger_copy(model: Any) -> tuple[Any | None, str]:
    """A copy of `model` with Liger-Kernel's patches for its family, or None and why not.

    Liger patches some functions of the family's transformers module too (its rope), not only
    the copy: take the copy's ways after the ways of every other model.
    """
    try:
        from liger_kernel.transformers import _apply_liger_kernel_to_instance
        from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN
    except ImportError as error:
        return None, f"liger_kernel is not installed ({error})"
    model_type = model.config.model_type
    if model_type not in MODEL_TYPE_TO_APPLY_LIGER_FN:
        return None, f"Liger-Kernel has no patch for model type {model_type!r}"
    patched = copy.deepcopy(model)
    # inference computes logits: no loss kernels (the fused one would not return them)
    _apply_liger_kernel_to_instance(patched, cross_entropy=False, fused_linear_cross_entropy=False)
    return patched, f"liger-kernel {importlib.metadata.version('liger-kernel')}"


def forward_of(model: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    def forward(ids: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = model(ids, use_cache=False).logits
        return logits

    return forward


def measure(
    name: str, fn: Callable[[torch.Tensor], torch.Tensor], inputs: dict[str, torch.Tensor]
) -> dict[str, Any]:
    """Warm `fn` up on every shape (compiling, where it compiles), then time each shape
    (``do_bench`` on a GPU; on the CPU, where tests run the fusion rows, `timing.cpu_us`)."""
    on_cuda = next(iter(inputs.values())).is_cuda
    start = time.perf_counter()
    logits = {shape: fn(ids).clone() for shape, ids in inputs.items()}
    for ids in inputs.values():  # reduce-overhead records its graphs on the later calls
        for _ in range(3):
            fn(ids)
    if on_cuda:
        torch.cuda.synchronize()
    warm_s = time.perf_counter() - start
    if on_cuda:
        from triton.testing import do_bench

        times = {
            shape: 1e3 * float(do_bench(lambda ids=ids: fn(ids), warmup=50, rep=300))
            for shape, ids in inputs.items()
        }
    else:
        times = {
            shape: timing.cpu_us(functools.partial(fn, ids), budget_s=0.05).median_us
            for shape, ids in inputs.items()
        }
    print(f"{name}: warm-up {warm_s:.0f} s, {times}", flush=True)
    return {"name": name, "warmup_s": warm_s, "us": times, "logits": logits}


def forward_ways(
    family: str, layers: int, skip: set[str], eager_only: bool
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every way's forward rows for one family, and the facts of the run (what was converted,
    what the passes did, the Liger ways' note)."""
    import transformers  # noqa: F401  (a clear ImportError before any model is built)

    from .hf_families import FAMILIES, build, convert

    config = FAMILIES[family][2]
    model = build(family, layers)
    gen = torch.Generator("cuda").manual_seed(1)
    inputs = {
        shape: torch.randint(0, config["vocab_size"], size, device="cuda", generator=gen)
        for shape, size in SHAPES.items()
    }
    runs = []
    reports: dict[str, Any] = {}
    # no compiled graph from an earlier run's cache: the passes' reports below are this run's
    with (
        torch.no_grad(),
        torch._inductor.config.patch(fx_graph_cache=False),
        torch._functorch.config.patch(enable_autograd_cache=False),
    ):
        runs.append(measure("hf eager", forward_of(model), inputs))
        if not eager_only and "hf torch.compile" not in skip:
            stock = torch.compile(forward_of(model), options=GRAPHS, dynamic=False)
            runs.append(measure("hf torch.compile", stock, inputs))
            torch._dynamo.reset()
        liger_ways = {"liger eager"} if eager_only else {"liger eager", "liger torch.compile"}
        if liger_ways <= skip:  # no copy, and no patch of the family's module
            liger, liger_note = None, "left out (`--skip`)"
        else:
            liger, liger_note = liger_copy(model)  # before the conversion changes the model
        converted = convert(family, model)
        if "ir eager, plans off" not in skip:
            with launch_plans(False):
                runs.append(measure("ir eager, plans off", forward_of(model), inputs))
        if "ir eager" not in skip:
            runs.append(measure("ir eager", forward_of(model), inputs))
        for name, fuse, kernels in [] if eager_only else COMPILED:
            if name in skip:
                continue
            torch._dynamo.reset()
            with ir_dispatch.priority(**(kernels_first() if kernels else {})):
                compiled = ir_passes.compile(
                    forward_of(model),
                    config=ir_passes.PassConfig(fuse=fuse),
                    options=GRAPHS,
                    dynamic=False,
                )
                runs.append(measure(name, compiled, inputs))
            report = ir_passes.last_report()
            reports[name] = {
                "fusions": dict(report.fusions) if report else {},
                "selected": {op: sorted(set(p.values())) for op, p in report.selected_impls.items()}
                if report
                else {},
            }
        if liger is not None:
            if "liger eager" not in skip:
                runs.append(measure("liger eager", forward_of(liger), inputs))
            if not eager_only and "liger torch.compile" not in skip:
                torch._dynamo.reset()
                compiled = torch.compile(forward_of(liger), options=GRAPHS, dynamic=False)
                try:  # a third party's kernels under Dynamo: a failure is a result too
                    runs.append(measure("liger torch.compile", compiled, inputs))
                except Exception as error:
                    liger_note += f"; its torch.compile failed: {type(error).__name__}: {error}"
    reference = runs[0]["logits"]
    rows = [
        {
            "family": family,
            "way": run["name"],
            "workload": shape,
            "us": run["us"][shape],
            "max_abs_diff": float(
                (run["logits"][shape].float() - reference[shape].float()).abs().max()
            ),
            "warmup_s": run["warmup_s"],
        }
        for run in runs
        for shape in SHAPES
    ]
    facts = {"layers": layers, "converted": converted, "liger": liger_note, "passes": reports}
    return rows, facts


def fusion_rows(
    model: Any,
    converter: Callable[[Any], dict[str, int]],
    shapes: dict[str, tuple[int, int]],
    *,
    force: bool = False,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The fusion rows of a transformers Qwen3 `model` (on a GPU or, for tests, the CPU):
    ``hf eager``, then converted by `converter` and compiled with the QK-norm + RoPE fusion
    off and on (`FUSION_WAYS`), per workload of `shapes`; and the facts (conversion, the
    fusions each way fired). `force` fuses where the fused op would run natively."""
    device = next(model.parameters()).device
    on_cuda = device.type == "cuda"
    gen = torch.Generator(device).manual_seed(2)
    vocab = model.config.vocab_size
    inputs = {
        shape: torch.randint(0, vocab, size, device=device, generator=gen)
        for shape, size in shapes.items()
    }
    runs = []
    reports: dict[str, Any] = {}
    priority = kernels_first((*KERNEL_OPS, "qk_norm_rotary_embedding"))
    with (
        torch.no_grad(),
        torch._inductor.config.patch(fx_graph_cache=False),
        torch._functorch.config.patch(enable_autograd_cache=False),
    ):
        runs.append(measure("hf eager", forward_of(model), inputs))
        converted = converter(model)
        for name, on in FUSION_WAYS.items():
            torch._dynamo.reset()
            passes = ir_passes.PassConfig(
                enable_qk_norm_rope_fusion=on, qk_norm_rope_max_tokens=None, force_fusion=force
            )
            with ir_dispatch.priority(**priority), ir_passes.collect_reports() as collected:
                compiled = ir_passes.compile(
                    forward_of(model),
                    config=passes,
                    options=GRAPHS if on_cuda else {},
                    dynamic=False,
                )
                runs.append(measure(name, compiled, inputs))
            fired: dict[str, int] = {}
            for report in collected:
                for pattern, count in report.fusions.items():
                    fired[pattern] = fired.get(pattern, 0) + count
            selected: dict[str, set[str]] = {}
            for report in collected:
                for op, providers in report.selected_impls.items():
                    selected.setdefault(op, set()).update(providers.values())
            reports[name] = {
                "fusions": fired,
                "selected": {op: sorted(p) for op, p in sorted(selected.items())},
            }
    reference = runs[0]["logits"]
    pattern = ir_passes.QK_NORM_ROPE_PATTERN
    fired_qk = {name: report["fusions"].get(pattern, 0) for name, report in reports.items()}
    rows = [
        {
            "family": FUSION_FAMILY,
            "way": run["name"],
            "workload": shape,
            "us": run["us"][shape],
            "max_abs_diff": float(
                (run["logits"][shape].float() - reference[shape].float()).abs().max()
            ),
            "warmup_s": run["warmup_s"],
        }
        | ({"qk_norm_fusions_fired": fired_qk[run["name"]]} if run["name"] in fired_qk else {})
        for run in runs
        for shape in shapes
    ]
    layers = model.config.num_hidden_layers
    facts = {
        "layers": layers,
        "converted": converted,
        "liger": "not run for the fusion rows",
        "passes": reports,
    }
    return rows, facts


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    from .hf_families import FAMILIES

    parser = common.parser("hf", (__doc__ or "").split("\n")[0])
    parser.add_argument(
        "--families",
        default="llama",
        help=f"some of {', '.join(sorted(FAMILIES))} ('' for none: the fusion rows alone)",
    )
    parser.add_argument("--layers", type=int, help="default: each family's own (4 with --quick)")
    parser.add_argument("--eager-only", action="store_true", help="only the eager forward ways")
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=SKIPPABLE,
        metavar="WAY",
        help="leave out this forward way (repeatable): " + ", ".join(SKIPPABLE),
    )
    parser.add_argument(
        "--generate-batches",
        default=None,
        help="batch sizes of the generate ways, for the first family ('' for none; default: "
        "1,16, or 1 with --quick)",
    )
    parser.add_argument("--prompt", type=int, default=128, help="generate: prompt tokens")
    parser.add_argument(
        "--new", type=int, help="generate: new tokens (default 128, 32 with --quick)"
    )
    parser.add_argument(
        "--rounds", type=int, help="generate: timed rounds (default 5, 2 with --quick)"
    )
    parser.add_argument(
        "--fusion-rows",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the QK-norm + RoPE fusion on a converted Qwen3 (default: on)",
    )
    parser.add_argument(
        "--fusion-layers", type=int, default=8, help="its layers (default %(default)s)"
    )
    parser.add_argument(
        "--force-fusion",
        action="store_true",
        help="fuse where the fused op would run natively too",
    )
    args = parser.parse_args(argv)
    args.families = [family for family in args.families.split(",") if family]
    unknown = sorted(set(args.families) - set(FAMILIES))
    if unknown:
        parser.error(f"--families: unknown {unknown}; expected some of {sorted(FAMILIES)}")
    if args.generate_batches is None:
        args.generate_batches = "1" if args.quick else "1,16"
    try:
        args.generate_batches = [int(b) for b in args.generate_batches.split(",") if b]
    except ValueError:
        parser.error(f"--generate-batches {args.generate_batches!r}: expected sizes such as 1,16")
    args.new = args.new or (32 if args.quick else 128)
    args.rounds = args.rounds or (2 if args.quick else 5)
    for name in ("layers", "prompt", "new", "rounds", "fusion_layers"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} {value}: expected a positive number")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite; exit status 2 without a GPU or transformers."""
    args = parse_args(argv)
    try:
        common.require_gpu("hf")
        import transformers  # noqa: F401
    except common.CannotRun as error:
        print(error)
        return common.CANNOT_RUN
    except ImportError:
        print("hf: transformers is not installed (pip install ir-stack[hf])")
        return common.CANNOT_RUN
    from .hf_families import default_layers
    from .hf_generate import generate_rows

    print("providers:", common.load_providers())
    device = results.current_device("cuda")
    result = results.new_result(
        "hf",
        "transformers models: converted against the original, eager and compiled",
        device,
        {"families": args.families, "layers": args.layers, "quick": args.quick}
        | {"skip": sorted(args.skip), "eager_only": args.eager_only}
        | {"generate_batches": args.generate_batches, "prompt": args.prompt, "new": args.new}
        | {"fusion_rows": args.fusion_rows, "fusion_layers": args.fusion_layers},
        KEY,
        METRICS,
    )
    families: dict[str, Any] = {}
    for family in args.families:
        layers = args.layers or (4 if args.quick else default_layers(family))
        rows, families[family] = forward_ways(family, layers, set(args.skip), args.eager_only)
        result.rows += rows
        result.facts = {"families": families}
        results.save(result, args.out, render_too=False)  # a run cut short keeps each family
    if args.fusion_rows:
        from .hf_families import build, convert

        rows, families[FUSION_FAMILY] = fusion_rows(
            build("qwen3", args.fusion_layers),
            lambda model: convert("qwen3", model),
            FUSION_SHAPES,
            force=args.force_fusion,
        )
        result.rows += rows
        result.facts = {"families": families}
        results.save(result, args.out, render_too=False)
    for batch in args.generate_batches if args.families else []:
        family = args.families[0]
        layers = args.layers or (4 if args.quick else default_layers(family))
        result.rows += generate_rows(
            family, layers, batch, args.prompt, args.new, args.rounds, kernels_first()
        )
        results.save(result, args.out, render_too=False)
    path = results.save(result, args.out)
    print(path.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
