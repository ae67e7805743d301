"""How calls run: the dispatcher hook, in-place semantics of both overloads, torch ops, errors."""

import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor

from ir_spec import ops
from ir_spec.testing import (
    assert_close,
    clone_args,
    fused_add_rms_norm_inplace,
    results_of,
    sample_inputs,
    single_process_ops,
)


@pytest.fixture
def inplace_provider(prefer: Callable[[str], None], temporary_impls: list[Any]) -> None:
    ops.fused_add_rms_norm.register_impl("test_inplace", inplace=True)(fused_add_rms_norm_inplace)
    temporary_impls.append((ops.fused_add_rms_norm, "test_inplace"))
    prefer("test_inplace")


def test_native_dispatcher_by_default() -> None:
    code = "import ir_spec; print(type(ir_spec.get_dispatcher()).__name__)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "NativeDispatcher"


def test_dispatcher_selects_and_registration_invalidates(
    prefer: Callable[[str], None], temporary_impls: list[Any]
) -> None:
    x, w, eps, _ = sample_inputs(ops.rms_norm, hidden_size=32)
    prefer("test_marker")
    native = ops.rms_norm(x, w, eps)  # cached: native (nothing named test_marker yet)

    @ops.rms_norm.register_impl("test_marker")
    def marker(
        x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
    ) -> Tensor:
        return torch.full_like(x, 7.0)

    temporary_impls.append((ops.rms_norm, "test_marker"))
    assert torch.all(ops.rms_norm(x, w, eps) == 7.0)  # the registration dropped the cache
    assert torch.all(ops.rms_norm.torch_op.default(x, w, eps) == 7.0)
    ops.rms_norm.unregister_impl("test_marker")
    assert torch.equal(ops.rms_norm(x, w, eps), native)


def test_supports_args_consulted(prefer: Callable[[str], None], temporary_impls: list[Any]) -> None:
    def only_fp16(
        x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
    ) -> bool:
        return x.dtype == torch.float16

    ops.rms_norm.register_impl("test_fp16", supports_args=only_fp16)(
        lambda x, weight, epsilon, variance_size=None: torch.zeros_like(x)
    )
    temporary_impls.append((ops.rms_norm, "test_fp16"))
    prefer("test_fp16")
    for dtype, expect_zero in ((torch.float16, True), (torch.float32, False)):
        x, w, eps, _ = sample_inputs(ops.rms_norm, hidden_size=32, dtype=dtype)
        assert bool(torch.all(ops.rms_norm(x, w, eps) == 0)) == expect_zero


def test_default_overload_never_mutates(inplace_provider: None) -> None:
    args = sample_inputs(ops.fused_add_rms_norm, hidden_size=769, row_padding=3)
    before = clone_args(args)
    out, residual = ops.fused_add_rms_norm(*args)
    for a, b in zip(args, before, strict=True):
        if isinstance(a, Tensor):
            assert torch.equal(a, b)
    for o in (out, residual):
        assert all(
            o.untyped_storage().data_ptr() != a.untyped_storage().data_ptr()
            for a in args
            if isinstance(a, Tensor)
        )
    assert_close(ops.fused_add_rms_norm, (out, residual), ops.fused_add_rms_norm.native(*before))
    torch_out = ops.fused_add_rms_norm.torch_op.default(*args)
    for a, b in zip(args, before, strict=True):
        if isinstance(a, Tensor):
            assert torch.equal(a, b)
    assert_close(ops.fused_add_rms_norm, torch_out, (out, residual))


def test_maybe_inplace_aliases_with_inplace_impl(inplace_provider: None) -> None:
    x, r, w, eps, _ = sample_inputs(ops.fused_add_rms_norm, hidden_size=64)
    expected = ops.fused_add_rms_norm.native(x, r, w, eps)
    out, residual = ops.fused_add_rms_norm.maybe_inplace(x, r, w, eps)
    assert out is x
    assert residual is r
    assert_close(ops.fused_add_rms_norm, (out, residual), expected)


def test_maybe_inplace_with_out_of_place_impl_leaves_inputs() -> None:
    x, r, w, eps, _ = sample_inputs(ops.fused_add_rms_norm, hidden_size=64)
    before = clone_args((x, r))
    out, residual = ops.fused_add_rms_norm.maybe_inplace(x, r, w, eps)
    assert out is not x
    assert torch.equal(x, before[0])
    assert torch.equal(residual, before[0] + before[1])


def test_torch_maybe_inplace_results_never_alias(inplace_provider: None) -> None:
    x, r, w, eps, _ = sample_inputs(ops.fused_add_rms_norm, hidden_size=64)
    expected = ops.fused_add_rms_norm.native(x, r, w, eps)
    out, residual = ops.fused_add_rms_norm.torch_op.maybe_inplace(x, r, w, eps)
    assert out.data_ptr() != x.data_ptr()
    assert residual.data_ptr() != r.data_ptr()
    assert_close(ops.fused_add_rms_norm, (out, residual), expected)
    assert_close(ops.fused_add_rms_norm, (x, r), expected)  # the activations were overwritten


@pytest.mark.parametrize("op", single_process_ops(), ids=lambda op: op.name)
def test_opcheck(op: Any) -> None:
    for spec in ({"hidden_size": 64}, {"hidden_size": 40, "row_padding": 3, "batch_shape": (2, 3)}):
        args = sample_inputs(op, **spec)
        torch.library.opcheck(op.torch_op.default, args)
        if op.allow_inplace:
            torch.library.opcheck(op.torch_op.maybe_inplace, clone_args(args))


@pytest.mark.parametrize("op", single_process_ops(), ids=lambda op: op.name)
def test_one_fx_node_under_dynamo(op: Any) -> None:
    torch._dynamo.reset()
    graphs: list[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    args = sample_inputs(op, hidden_size=64)
    tensors = [i for i, a in enumerate(args) if isinstance(a, Tensor)]

    def call(*tensor_args: Tensor) -> Any:
        full = list(args)
        for i, t in zip(tensors, tensor_args, strict=True):
            full[i] = t
        return op(*full)

    compiled = torch.compile(call, backend=backend, fullgraph=True)
    compiled_args = clone_args(args)
    result = compiled(*[compiled_args[i] for i in tensors])
    eager_args = clone_args(args)
    assert_close(
        op,
        results_of(op, compiled_args, result),
        results_of(op, eager_args, op(*eager_args)),
    )
    targets = [n.target for n in graphs[0].graph.nodes if n.op == "call_function"]
    ir_nodes = [t for t in targets if str(t).startswith("ir.")]
    assert ir_nodes == [op.torch_op.default]
    assert all(t.__name__ == "getitem" for t in targets if t not in ir_nodes)


def test_maybe_inplace_records_its_overload() -> None:
    torch._dynamo.reset()
    graphs: list[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    @torch.compile(backend=backend, fullgraph=True)
    def f(x: Tensor, r: Tensor, w: Tensor) -> Any:
        return ops.fused_add_rms_norm.maybe_inplace(x, r, w, 1e-6)

    x, r, w, _, _ = sample_inputs(ops.fused_add_rms_norm, hidden_size=32)
    f(x.clone(), r.clone(), w)
    targets = [n.target for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert ops.fused_add_rms_norm.torch_op.maybe_inplace in targets


BAD_INPUTS: list[tuple[str, Callable[[], Any], str]] = [
    ("rms_norm", lambda: ops.rms_norm(torch.randn(()), None, 1e-6), "'x'.*rank >= 1"),
    ("rms_norm", lambda: ops.rms_norm(torch.randn(4, 8), torch.ones(9), 1e-6), "'weight'.*size 8"),
    (
        "rms_norm",
        lambda: ops.rms_norm(
            torch.randn(4, 8, dtype=torch.bfloat16), torch.ones(8, dtype=torch.float16), 1e-6
        ),
        "'weight'.*expected dtype torch.bfloat16 \\(as x\\) or float32",
    ),
    (
        "rms_norm",
        lambda: ops.rms_norm(torch.randn(4, 8), torch.ones(8, dtype=torch.bfloat16), 1e-6),
        "'weight'.*expected dtype float32 on cpu",
    ),
    (
        "rms_norm",
        lambda: ops.rms_norm(torch.randn(4, 8, dtype=torch.float64), None, 1e-6),
        "'x'.*float64.*expected dtype float32, float16 or bfloat16",
    ),
    ("rms_norm", lambda: ops.rms_norm(torch.randn(4, 8), None, -1.0), "'epsilon'"),
    ("rms_norm", lambda: ops.rms_norm(torch.randn(4, 8), None, 1e-6, 9), "'variance_size'"),
    (
        "fused_add_rms_norm",
        lambda: ops.fused_add_rms_norm(torch.randn(4, 8), torch.randn(3, 8), None, 1e-6),
        "'x_residual'",
    ),
    ("silu_and_mul", lambda: ops.silu_and_mul(torch.randn(4, 7)), "'x'.*even last dimension"),
    ("gelu_and_mul", lambda: ops.gelu_and_mul(torch.randn(4, 8), "fast"), "'approximate'"),
    ("static_quant_fp8", lambda: ops.static_quant_fp8(torch.randn(4, 8), torch.ones(2)), "'scale'"),
    ("group_quant_fp8", lambda: ops.group_quant_fp8(torch.randn(4, 100), 128), "'x'.*divisible"),
    (
        "rotary_embedding",
        lambda: ops.rotary_embedding(
            torch.zeros(3, dtype=torch.long),
            torch.randn(4, 64),
            torch.randn(4, 64),
            64,
            torch.randn(10, 64),
            True,
        ),
        "'positions'.*shape",
    ),
    (
        "rotary_embedding",
        lambda: ops.rotary_embedding(
            torch.zeros(4, dtype=torch.long),
            torch.randn(4, 64),
            torch.randn(4, 64),
            32,
            torch.randn(10, 64),
            True,
        ),
        "'cos_sin_cache'",
    ),
    (
        "rotary_embedding",
        lambda: ops.rotary_embedding(
            torch.zeros(4, dtype=torch.long),
            torch.randn(4, 64),
            torch.randn(4, 64),
            64,
            torch.randn(0, 64),
            True,
        ),
        "'cos_sin_cache'.*at least one position",
    ),
]


@pytest.mark.parametrize(
    ("name", "call", "pattern"), BAD_INPUTS, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD_INPUTS)]
)
def test_bad_input_names_op_and_argument(name: str, call: Callable[[], Any], pattern: str) -> None:
    with pytest.raises(ValueError, match=f"ir.{name}: argument {pattern}"):
        call()
    # and again: a rejected call must not be cached as valid
    with pytest.raises(ValueError, match=f"ir.{name}"):
        call()


def test_bad_input_after_good_call_with_same_key() -> None:
    x = torch.randn(4, 8)
    ops.fused_add_rms_norm(x, torch.randn(4, 8), None, 1e-6)
    with pytest.raises(ValueError, match="'x_residual'"):
        ops.fused_add_rms_norm(x, torch.randn(3, 8), None, 1e-6)
    q = torch.randn(4, 64)
    cache = ops.rotary_embedding.native(
        torch.zeros(0, dtype=torch.long), q[:0], q[:0], 64, torch.randn(10, 64), True
    )
    assert cache[0].shape == (0, 64)
    ops.rotary_embedding(torch.zeros(4, dtype=torch.long), q, q, 64, torch.randn(10, 64), True)
    with pytest.raises(ValueError, match="'positions'"):
        ops.rotary_embedding(torch.zeros(3, dtype=torch.long), q, q, 64, torch.randn(10, 64), True)


def test_bad_input_under_compile_raises_at_trace_time() -> None:
    torch._dynamo.reset()

    @torch.compile(backend="eager", fullgraph=True)
    def f(x: Tensor) -> Tensor:
        return ops.silu_and_mul(x)

    with pytest.raises(Exception, match=r"ir.silu_and_mul: argument 'x'.*even last dimension"):
        f(torch.randn(4, 7))


def test_bad_positional_count_is_type_error() -> None:
    with pytest.raises(TypeError):
        ops.rms_norm(torch.randn(2, 4))
    with pytest.raises(TypeError):
        ops.rms_norm(torch.randn(2, 4), None, 1e-6, bogus=1)


def test_keyword_arguments_and_defaults() -> None:
    x, w, eps, _ = sample_inputs(ops.rms_norm, hidden_size=32)
    a = ops.rms_norm(x, w, eps)
    b = ops.rms_norm(x=x, weight=w, epsilon=eps, variance_size=None)
    assert torch.equal(a, b)


def test_zero_tokens() -> None:
    for op in single_process_ops():
        args = sample_inputs(op, hidden_size=64, batch_shape=(0,))
        before = clone_args(args)
        out = op(*args)
        for o in () if out is None else out if isinstance(out, tuple) else (out,):
            assert o.shape[0] == 0
        # nothing to store: the arguments an op writes (a KV cache) stay as they were
        for stored, old in zip(
            results_of(op, args, None), results_of(op, before, None), strict=True
        ):
            assert torch.equal(stored, old)


def test_cheap_fakes_match_native_layouts_for_permuted_inputs() -> None:
    """The fakes of rms_norm, the gated activations and rotary build outputs without running
    the native math; opcheck compares their layouts with the real outputs'."""
    torch.manual_seed(0)
    permuted = torch.randn(3, 2, 64).transpose(0, 1)  # dense, not row-major
    weight = torch.randn(64)
    torch.library.opcheck(ops.rms_norm.torch_op.default, (permuted, weight, 1e-6, None))
    torch.library.opcheck(ops.silu_and_mul.torch_op.default, (permuted,))
    torch.library.opcheck(ops.gelu_and_mul.torch_op.default, (permuted, "tanh"))
    positions = torch.randint(0, 16, (2, 3))
    cache = torch.randn(16, 16)
    args = (positions, permuted, permuted.clone(), 16, cache, True)
    torch.library.opcheck(ops.rotary_embedding.torch_op.default, args)


def test_shares_memory_compares_storages() -> None:
    from ir_spec import shares_memory

    x = torch.randn(4, 8)
    assert shares_memory(x, x)
    assert shares_memory(x[1:], x[:1])  # other views of one buffer
    assert not shares_memory(x, x.clone())


def test_row_view_addresses_rows_by_one_stride() -> None:
    from ir_spec import row_view

    contiguous = row_view(torch.randn(6, 40))
    assert contiguous is not None
    assert contiguous.shape == (6, 40)
    strided = torch.randn(6, 53)[:, :40]  # rows 53 apart
    view = row_view(strided)
    assert view is not None
    assert view.stride() == (53, 1)
    assert view.data_ptr() == strided.data_ptr()
    three_d = row_view(torch.randn(2, 3, 40))
    assert three_d is not None
    assert three_d.shape == (6, 40)
    assert row_view(torch.randn(3, 2, 40).transpose(0, 1)) is None  # needs a copy
    assert row_view(torch.randn(40, 6).t()) is None  # last dimension not contiguous
    assert row_view(torch.tensor(1.0)) is None


def test_clone_args_keeps_padded_rows_apart() -> None:
    """A "strided" test cell hands its copies to the implementation: their rows must stay
    padded apart, or no provider test ever sees a row stride other than the width."""
    rows = torch.randn(5, 77)[:, :64]
    (copy,) = clone_args((rows,))
    assert copy.stride() == rows.stride()
    assert not copy.is_contiguous()
    assert torch.equal(copy, rows)
    assert copy.data_ptr() != rows.data_ptr()


def test_row_view_of_a_fake_tensor_that_needs_a_copy_is_none() -> None:
    """Fake tensors (compiled code's implementation selection) refuse such a view with
    `ValueError`, not `RuntimeError`: rows of a stride-0 expand over two leading dims."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from ir_spec import row_view

    with FakeTensorMode():
        expanded = torch.randn(2, 5, 64)[..., :1, :32].expand(2, 5, 32)
        assert row_view(expanded) is None
        padded = row_view(torch.randn(2, 5, 64)[..., :32])
        assert padded is not None
        assert padded.shape == (10, 32)
