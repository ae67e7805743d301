"""Helpers every provider's tests use: sample inputs and tolerance-aware comparison; and one
every package's packaging test uses (`assert_installed_version`)."""

from __future__ import annotations

import contextlib
import math
import tempfile
import unittest
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from .autograd import DIFFERENTIABLE_DTYPES
from .catalog.norm import rms_norm
from .catalog.rotary import make_cos_sin_cache
from .op import IrOp
from .process_groups import GROUP_ARGUMENT, run_in_world
from .registry import ops
from .sampling import SampleSpec

__all__ = [
    "ACTIVATION_DTYPES",
    "LARGE_CASE_ELEMENTS",
    "NONFINITE_CASES",
    "NONFINITE_CASE_IDS",
    "NONFINITE_OPTIONS",
    "SampleSpec",
    "assert_close",
    "assert_gelu_accurate_in_the_negative_tail",
    "assert_impl_matches_native",
    "assert_installed_version",
    "assert_matches_native_on_the_second_gpu",
    "assert_nonfinite_like_native",
    "assert_rotary_reads_only_the_table",
    "catalog_ops",
    "clone_args",
    "fused_add_rms_norm_inplace",
    "grad_leaves",
    "large_case_turn",
    "matrix_spec",
    "needs_process_group",
    "nonfinite_variant_ids",
    "nonfinite_variants",
    "results_of",
    "rotary_embedding_inplace",
    "run_in_world",
    "sample_inputs",
    "single_process_ops",
    "taking_turns",
    "weighted_sum",
]


#: The inputs of a `test_matches_native`-style case (``hidden`` x ``tokens`` elements) from which
#: its test takes turns with others on a GPU (`taking_turns`): at this size a case holds
#: gigabytes of inputs, outputs, references and comparison copies.
LARGE_CASE_ELEMENTS = 1 << 26


@contextlib.contextmanager
def taking_turns(name: str) -> Iterator[None]:
    """Hold the machine-wide lock `name` (a file in the temporary directory) while the block
    runs, so processes that together would exhaust a shared resource take turns: the
    pytest-xdist workers of a kernel test suite, each allocating gigabytes for its largest
    cases on one GPU. Released when the block ends, however it ends (and by the system when
    the process dies); a no-op where the platform has no ``fcntl``."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    with open(Path(tempfile.gettempdir()) / f"ir-spec-{name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def large_case_turn(params: Mapping[str, Any]) -> contextlib.AbstractContextManager[None]:
    """The turn a test case of parameters `params` (a pytest ``callspec.params``) waits for:
    on a GPU, a case of ``hidden`` x ``tokens`` >= `LARGE_CASE_ELEMENTS` takes turns with the
    other large cases on the same GPU (`taking_turns`); any other case runs at once."""
    elements = int(params.get("hidden", 0)) * int(params.get("tokens", 0))
    if elements < LARGE_CASE_ELEMENTS or not torch.cuda.is_available():
        return contextlib.nullcontext()
    return taking_turns(f"large-cases-gpu{torch.cuda.current_device()}")


#: The activation dtypes every catalog op defines.
ACTIVATION_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def catalog_ops() -> list[IrOp]:
    """The ops of ir-spec's catalog, without any op a program or a test declared since."""
    return [op for op in ops if op.native.__module__.startswith(f"{__package__}.catalog.")]


def needs_process_group(op: IrOp) -> bool:
    """Whether `op` is a collective: it takes a process group's name (a parameter called
    ``group_name``), so it runs, and its input generator works, only where torch.distributed
    is initialised. ir-spec's generic single-process tests leave these ops out
    (`single_process_ops`); their tests run in several processes (`run_in_world`)."""
    return GROUP_ARGUMENT in op.parameter_names


def single_process_ops() -> list[IrOp]:
    """Every declared op that runs without a process group (see `needs_process_group`)."""
    return [op for op in ops if not needs_process_group(op)]


def grad_leaves(args: Sequence[Any]) -> tuple[tuple[Any, ...], list[torch.Tensor]]:
    """`args` with every tensor of a differentiable dtype replaced by a fresh copy that is a
    leaf requiring grad, and those leaves in order."""
    out, leaves = [], []
    for a in args:
        if isinstance(a, torch.Tensor) and a.dtype in DIFFERENTIABLE_DTYPES:
            a = a.detach().clone().requires_grad_(True)
            leaves.append(a)
        out.append(a)
    return tuple(out), leaves


def weighted_sum(*outputs: torch.Tensor) -> torch.Tensor:
    """A float32 scalar of `outputs`, each weighted linearly from -1 to 2 over its elements, so
    that no output's gradient is uniform (nor sums to zero)."""
    terms = [
        (t.float() * torch.linspace(-1.0, 2.0, t.numel(), device=t.device).view(t.shape)).sum()
        for t in outputs
    ]
    return torch.stack(terms).sum()


def sample_inputs(op: IrOp, spec: SampleSpec | None = None, **fields: Any) -> tuple[Any, ...]:
    """Fresh random positional arguments for `op` (a `SampleSpec`, or its fields as keywords)."""
    if op.input_generator is None:
        raise ValueError(f"op {op.name!r} has no input generator (register_input_generator)")
    if spec is None:
        spec = SampleSpec(**fields)
    elif fields:
        raise TypeError("sample_inputs: pass either a SampleSpec or its fields, not both")
    return op.input_generator(spec)


def clone_args(args: Sequence[Any]) -> tuple[Any, ...]:
    """Copies of the tensor arguments with the same sizes and strides (rows padded apart stay
    padded apart, so a "strided" test gives the implementation strided rows), other arguments
    as they are."""
    return tuple(_same_layout_copy(a) if isinstance(a, torch.Tensor) else a for a in args)


def _same_layout_copy(t: torch.Tensor) -> torch.Tensor:
    # clone(preserve_format) keeps the strides of a dense tensor only: padded rows would come
    # back contiguous. An expanded (stride-0) tensor keeps its one stored element per row.
    if t.is_contiguous() or any(stride == 0 for stride in t.stride()):
        return t.clone(memory_format=torch.preserve_format)
    out = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
    return out.copy_(t)


def assert_close(
    op: IrOp, actual: Any, expected: Any, *, msg: str = "", equal_nan: bool = False
) -> None:
    """Compare results (a tensor or a tuple of them) with the op's tolerance per dtype;
    `equal_nan`: NaN where the expected result has NaN passes (infinities must match always).

    fp8 results are compared as float32 values with the e4m3 tolerance. The comparison runs on
    the results' device (copying large GPU results to the CPU would dominate a test's time).
    """
    act = actual if isinstance(actual, tuple | list) else (actual,)
    exp = expected if isinstance(expected, tuple | list) else (expected,)
    if len(act) != len(exp):
        raise AssertionError(f"ir.{op.name}: {len(act)} results, expected {len(exp)}. {msg}")
    for i, (a, e) in enumerate(zip(act, exp, strict=True)):
        if a.shape != e.shape or a.dtype != e.dtype:
            raise AssertionError(
                f"ir.{op.name} result {i}: shape/dtype {tuple(a.shape)}/{a.dtype}, expected "
                f"{tuple(e.shape)}/{e.dtype}. {msg}"
            )
        tol = op.tolerance(e.dtype)
        prefix = f"ir.{op.name} result {i}:"

        def describe(message: str, prefix: str = prefix) -> str:
            return f"{prefix} {message} {msg}"

        torch.testing.assert_close(
            a.float(),
            e.float().to(a.device),
            atol=tol.atol,
            rtol=tol.rtol,
            equal_nan=equal_nan,
            msg=describe,
        )


def matrix_spec(
    dtype: torch.dtype,
    hidden: int,
    tokens: int,
    layout: str,
    *,
    device: str,
    seed: int = 0,
    **options: Any,
) -> SampleSpec:
    """One cell of the provider test matrix: `layout` is ``"contiguous"``, ``"strided"`` (rows
    13 elements apart from their width) or ``"3d"`` (``[2, tokens // 2]`` leading shape)."""
    batch = (2, tokens // 2 or 1) if layout == "3d" and tokens > 1 else (tokens,)
    return SampleSpec(
        batch_shape=batch,
        hidden_size=hidden,
        dtype=dtype,
        device=device,
        seed=seed + hidden + tokens,
        row_padding=13 if layout == "strided" else 0,
        options=options,
    )


#: Input-generator options beyond the defaults that every provider is tested on: (op name,
#: options for `SampleSpec.options`).
OPTION_VARIANTS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("rms_norm", {"weight": False}),
    ("rms_norm", {"variance_size": 5}),
    ("rms_norm", {"weight_dtype": torch.float32}),
    ("fused_add_rms_norm", {"weight": False}),
    ("fused_add_rms_norm", {"variance_size": 7}),
    ("fused_add_rms_norm", {"weight_dtype": torch.float32}),
    ("gelu_and_mul", {"approximate": "tanh"}),
    ("dynamic_quant_fp8", {"scale_ub": True}),
    ("rms_norm_dynamic_quant_fp8", {"weight": False}),
    ("rms_norm_dynamic_quant_fp8", {"scale_ub": True}),
    ("rms_norm_dynamic_quant_fp8", {"weight_dtype": torch.float32}),
    ("rms_norm_static_quant_fp8", {"weight": False}),
    ("rms_norm_static_quant_fp8", {"weight_dtype": torch.float32}),
    ("fused_add_rms_norm_static_quant_fp8", {"weight_dtype": torch.float32}),
    ("group_quant_fp8", {"column_major_scales": True}),
    ("group_quant_fp8", {"group_size": 64}),
    ("group_quant_fp8", {"group_size": 256}),
    ("rotary_embedding", {"is_neox_style": False}),
    ("rotary_embedding", {"rotary_dim": 32}),
    ("rotary_embedding", {"rotary_dim": 32, "is_neox_style": False}),
    ("rotary_embedding", {"cache_dtype": torch.float16, "head_size": 64}),
    ("rotary_embedding", {"cache_dtype": torch.bfloat16, "is_neox_style": False}),
    ("rotary_embedding", {"head_size": 36, "rotary_dim": 18}),
    ("qk_norm_rotary_embedding", {"is_neox_style": False}),
    ("qk_norm_rotary_embedding", {"weight": False}),
    ("qk_norm_rotary_embedding", {"weight_dtype": torch.float32}),
    ("qk_norm_rotary_embedding", {"head_size": 64, "rotary_dim": 32}),
    ("qk_norm_rotary_embedding", {"head_size": 256, "is_neox_style": False}),
    ("write_kv_cache", {"padding_slots": True}),
    ("write_kv_cache", {"block_size": 1}),
    ("rotary_embedding_write_kv_cache", {"padding_slots": True}),
    ("rotary_embedding_write_kv_cache", {"is_neox_style": False, "rotary_dim": 32}),
    ("rotary_embedding_write_kv_cache", {"head_size": 64, "block_size": 7}),
    ("fused_add_rms_norm_dynamic_quant_fp8", {"scale_ub": True}),
    ("fused_add_rms_norm_dynamic_quant_fp8", {"weight": False}),
    ("rms_norm_group_quant_fp8", {"column_major_scales": True}),
    ("rms_norm_group_quant_fp8", {"group_size": 64, "weight": False}),
    ("fused_add_rms_norm_group_quant_fp8", {"column_major_scales": True}),
    ("fused_add_rms_norm_group_quant_fp8", {"weight_dtype": torch.float32}),
    ("silu_and_mul_group_quant_fp8", {"column_major_scales": True}),
    ("silu_and_mul_group_quant_fp8", {"group_size": 64}),
)
#: pytest ids of `OPTION_VARIANTS`.
OPTION_VARIANT_IDS = [f"{name}-{options}" for name, options in OPTION_VARIANTS]


def results_of(op: IrOp, args: Sequence[Any], result: Any) -> tuple[Any, ...]:
    """What a call of `op` with `args` produced: its results, then the arguments it writes
    (`IrOp.mutates`, such as a KV cache), so that ops that store are compared like the rest."""
    outs = () if result is None else result if isinstance(result, tuple) else (result,)
    names = list(op.signature.parameters)
    return (*outs, *(args[names.index(m)] for m in op.mutates))


def assert_impl_matches_native(
    op: IrOp, provider: str, args: tuple[Any, ...], *, check_accepts: bool = True
) -> None:
    """Provider `provider`'s implementation accepts `args` and matches the native function
    within the op's tolerance, in its results and in the arguments it writes; an in-place one
    returns its activation arguments.
    `check_accepts=False` skips asking `supports_args` (for a build that runs elsewhere than
    the provider's device, such as the CUDA kernels emulated on the CPU)."""
    impl = op.impls[provider]
    if check_accepts:
        assert impl.accepts(args), f"{provider} rejected {op.name} arguments it should take"
    inputs = clone_args(args)
    native_inputs = clone_args(args)
    expected = results_of(op, native_inputs, op.native(*native_inputs))
    actual = impl.fn(*inputs)
    assert_close(op, results_of(op, inputs, actual), expected)
    if impl.inplace:
        outs = actual if isinstance(actual, tuple) else (actual,)
        for out, i in zip(outs, op.activation_indices, strict=True):
            assert out is inputs[i], "an in-place implementation returns its activations"


#: What `assert_nonfinite_like_native` writes into a row, and where: (value, column), the
#: column as a fraction of the row (0: its first element, 1: its last).
NONFINITE_CASES: tuple[tuple[float, float], ...] = (
    (math.nan, 0.0),
    (math.inf, 1.0),
    (-math.inf, 0.5),
)
#: pytest ids of `NONFINITE_CASES`.
NONFINITE_CASE_IDS = ["nan-first", "inf-last", "-inf-middle"]
#: The input-generator options each op is checked with by `assert_nonfinite_like_native`
#: beyond its defaults: (op name, options), as `OPTION_VARIANTS`.
NONFINITE_OPTIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("dynamic_quant_fp8", {"scale_ub": True}),
    ("rms_norm_dynamic_quant_fp8", {"scale_ub": True}),
    ("fused_add_rms_norm_dynamic_quant_fp8", {"scale_ub": True}),
)


def nonfinite_variants(provider_prefix: str) -> list[tuple[IrOp, str, dict[str, Any]]]:
    """What a provider's non-finite test runs: (op, provider, input options) for every
    implementation whose provider name starts with `provider_prefix` (``"cuda"`` takes
    ``cuda_inplace`` too), first with each op's default inputs, then with `NONFINITE_OPTIONS`.
    The ops that need a process group are left out: they run in worlds of processes."""
    variants: list[tuple[IrOp, str, dict[str, Any]]] = [
        (op, p, {})
        for op in single_process_ops()
        for p in op.impls
        if p.startswith(provider_prefix)
    ]
    for name, options in NONFINITE_OPTIONS:
        op = getattr(ops, name)
        variants += [(op, p, options) for p in op.impls if p.startswith(provider_prefix)]
    return variants


def nonfinite_variant_ids(variants: Sequence[tuple[IrOp, str, dict[str, Any]]]) -> list[str]:
    """pytest ids of `nonfinite_variants`: ``op-provider-{options}``."""
    return [f"{op.name}-{provider}-{options}" for op, provider, options in variants]


def assert_nonfinite_like_native(
    op: IrOp, fn: Callable[..., Any], args: tuple[Any, ...], *, value: float, column: float
) -> None:
    """`value` (NaN or an infinity) written into the last row of `op`'s first activation in
    `args`, at `column` (a fraction of the row): `fn` (an implementation of `op`; an in-place
    one is given copies) gives NaN and infinities where the native function does and matches
    it elsewhere within the op's tolerance. The native functions carry a row's NaN into its
    peak (torch's ``amax``, ``minimum`` and ``clamp`` keep NaN), so one NaN makes a dynamic
    scale and the whole row (or group) NaN, and an infinity in a norm's row makes its outputs
    0 and NaN; a kernel whose reductions drop NaN, as a hardware maximum does, gives a finite
    scale instead."""
    if not (math.isnan(value) or math.isinf(value)):
        raise ValueError(f"assert_nonfinite_like_native: value={value!r}, expected NaN or inf")
    args = clone_args(args)
    x = args[op.activation_indices[0]]
    if x.numel() == 0:
        raise ValueError(f"assert_nonfinite_like_native: {op.name}'s activation has no rows")
    index = round(column * (x.shape[-1] - 1))
    x[(*(size - 1 for size in x.shape[:-1]), index)] = value
    native_args, fn_args = clone_args(args), clone_args(args)
    expected = results_of(op, native_args, op.native(*native_args))
    actual = results_of(op, fn_args, fn(*fn_args))
    assert_close(op, actual, expected, equal_nan=True, msg=f"({value} at column {index})")


def assert_matches_native_on_the_second_gpu(op: IrOp, provider: str) -> None:
    """Rows on GPU 1 while GPU 0 is current, as in a model split over GPUs by a ``device_map``:
    `provider`'s implementation matches the native function on bf16 strided rows of an odd
    width and on a decode batch of 8192-wide rows (which Hopper providers spread over
    clusters), and leaves GPU 0 current. Needs two CUDA devices."""
    assert torch.cuda.current_device() == 0
    for hidden, tokens, layout in ((769, 7, "strided"), (8192, 4, "contiguous")):
        spec = matrix_spec(torch.bfloat16, hidden, tokens, layout, device="cuda:1")
        assert_impl_matches_native(op, provider, sample_inputs(op, spec))
        assert torch.cuda.current_device() == 0


def fused_add_rms_norm_inplace(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A reference in-place ``fused_add_rms_norm`` for tests: writes ``x + x_residual`` into
    `x_residual` and the normalized result into `x`, and returns them."""
    x_residual.add_(x)
    x.copy_(rms_norm.native(x_residual, weight, epsilon, variance_size))
    return x, x_residual


def rotary_embedding_inplace(
    positions: torch.Tensor,
    x_query: torch.Tensor,
    x_key: torch.Tensor,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox_style: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A reference in-place ``rotary_embedding`` for tests, written as an out-of-tree provider
    in plain PyTorch would be: the native function, its results copied into `x_query` and
    `x_key`, which it returns."""
    query, key = ops.rotary_embedding.native(
        positions, x_query, x_key, head_size, cos_sin_cache, is_neox_style
    )
    x_query.copy_(query)
    x_key.copy_(key)
    return x_query, x_key


def assert_gelu_accurate_in_the_negative_tail(
    gelu_and_mul: Callable[[torch.Tensor, str], torch.Tensor], dtype: torch.dtype, device: str
) -> None:
    """An implementation's gelu(a) * 1 for a over [-8, 8] within one unit of `dtype` at 1.0,
    relative, of the exact float64 values (float32: 3e-5). Stricter than the op's tolerances,
    which the native float32 form 0.5 * (1 + erf(a / sqrt 2)) meets only absolutely: it loses
    every digit below about a = -5. For kernels that compute Phi from its smaller tail."""
    a = torch.linspace(-8, 8, 4001, dtype=torch.float64).to(dtype)
    x = torch.cat([a, torch.ones_like(a)])[None].to(device)
    out = gelu_and_mul(x, "none")
    exact = a.double() * 0.5 * torch.erfc(-a.double() / math.sqrt(2))
    info = torch.finfo(dtype)
    rtol = 3e-5 if dtype == torch.float32 else info.eps
    torch.testing.assert_close(out[0].cpu().double(), exact, rtol=rtol, atol=info.tiny * info.eps)


def assert_rotary_reads_only_the_table(
    rotary_embedding: Callable[..., tuple[torch.Tensor, torch.Tensor]],
    dtype: torch.dtype,
    device: str,
    *,
    positions_dtype: torch.dtype,
    rotary_dim: int,
    is_neox_style: bool,
    aligned: bool = True,
) -> None:
    """What a kernel must do with positions outside the table (negative, ``max_position`` and
    beyond), where the native function fails in torch's indexing: those tokens' rotated
    elements are NaN, their elements past `rotary_dim` are their inputs', and every other
    token gets bitwise what it gets when all positions are in the table. `rotary_embedding`
    takes the op's arguments (an in-place one may overwrite its inputs: it is given copies,
    which start one element past a 16-byte boundary unless `aligned`); heads of 64 elements,
    4 query and 2 key heads, a table of 16 positions."""
    max_position, head_size = 16, 64
    outside = [-1, max_position, max_position + 1000, 2**31 - 1]
    if positions_dtype == torch.int64:
        # a 32-bit read of the low word alone would find row 2 here
        outside += [2**32 + 2, -(2**32) + 2]
    inside = [0, 5, max_position - 1, 3, 7, 1]
    positions = torch.tensor(inside[:3] + outside + inside[3:], dtype=positions_dtype)
    bad = (positions < 0) | (positions >= max_position)
    gen = torch.Generator().manual_seed(0)
    tokens = positions.numel()
    query = torch.randn(tokens, 4 * head_size, generator=gen).to(dtype)
    key = torch.randn(tokens, 2 * head_size, generator=gen).to(dtype)
    cache = make_cos_sin_cache(max_position, rotary_dim)
    positions, query, key, cache = (t.to(device) for t in (positions, query, key, cache))

    def copy(t: torch.Tensor) -> torch.Tensor:
        start = 0 if aligned else 1
        flat = torch.empty(t.numel() + start, dtype=t.dtype, device=t.device)
        return flat[start:].view(t.shape).copy_(t)

    def run(pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q, k = rotary_embedding(pos, copy(query), copy(key), head_size, cache, is_neox_style)
        return q.cpu(), k.cpu()

    got = run(positions)
    in_table = run(torch.where(bad.to(device), 0, positions))
    bad = bad.cpu()
    for out, clean, given in zip(got, in_table, (query.cpu(), key.cpu()), strict=True):
        assert torch.equal(out[~bad], clean[~bad]), "tokens in the table changed"
        heads = out[bad].unflatten(-1, (-1, head_size))
        assert heads[..., :rotary_dim].isnan().all(), "positions outside the table not NaN"
        passed = given[bad].unflatten(-1, (-1, head_size))[..., rotary_dim:]
        assert torch.equal(heads[..., rotary_dim:], passed), "elements past rotary_dim changed"


def assert_installed_version(module: ModuleType, distribution: str) -> None:
    """`module.__version__` is the version in the installed `distribution`'s metadata. Skips
    the calling pytest test where the distribution is not installed (packages run from the
    source tree through ``PYTHONPATH``, as on the GPU machine): there is no metadata then."""
    try:
        installed = version(distribution)
    except PackageNotFoundError:
        # unittest's skip, which pytest reports as one: ir-spec imports torch alone
        raise unittest.SkipTest(
            "run from the source tree (PYTHONPATH), not installed: no metadata to compare"
        ) from None
    assert module.__version__ == installed, (module.__name__, module.__version__, installed)
