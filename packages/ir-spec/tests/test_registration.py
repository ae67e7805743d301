"""register_op / register_impl: what they build and every refusal DESIGN.md lists."""

import itertools
from typing import Any

import pytest
import torch
from torch import Tensor

import ir_spec
from ir_spec import ops, register_op
from ir_spec.testing import catalog_ops

_counter = itertools.count()


def fresh(prefix: str = "t") -> str:
    """A new op name: torch ops cannot be removed, so each test declares its own."""
    return f"_{prefix}_{next(_counter)}"


def test_bare_decorator_builds_op() -> None:
    def scale2(x: Tensor, factor: float = 2.0) -> Tensor:
        return x * factor

    scale2.__name__ = fresh("scale")
    op = register_op(scale2)
    assert isinstance(op, ir_spec.IrOp)
    assert op.name == scale2.__name__
    assert op.native is scale2
    assert op.activations == ("x",)
    assert op.allow_inplace is False
    assert list(op.impls) == ["native"]
    assert op.impls["native"].provider == "native"
    assert op.torch_op.default is getattr(torch.ops.ir, op.name).default
    assert "Tensor x, float factor=2." in str(op.torch_op.default._schema)
    assert getattr(ops, op.name) is op
    assert op.name in [o.name for o in ops]
    x = torch.randn(3)
    torch.testing.assert_close(op(x), x * 2)
    torch.testing.assert_close(op(x, factor=3.0), x * 3)


def test_keyword_decorator_options() -> None:
    name = fresh("opts")

    @register_op(name=name, activations=["a"], allow_inplace=True)
    def whatever(a: Tensor, b: Tensor) -> Tensor:
        return a + b

    assert whatever.name == name
    assert getattr(ops, name) is whatever
    assert name in ops
    assert whatever.activations == ("a",)
    assert whatever.allow_inplace
    assert hasattr(torch.ops.ir, name)
    assert "Tensor(a0!) a" in str(getattr(torch.ops.ir, name).maybe_inplace._schema)


def test_impls_mapping_is_read_only() -> None:
    with pytest.raises(TypeError):
        ops.rms_norm.impls["x"] = ops.rms_norm.native_impl  # type: ignore[index]


def test_unknown_op_lists_known() -> None:
    with pytest.raises(AttributeError, match="rms_norm") as info:
        _ = ops.no_such_op
    assert "no_such_op" in str(info.value)


def test_ops_namespace_iterates_catalog() -> None:
    names = {op.name for op in ops}
    assert {
        "rms_norm",
        "fused_add_rms_norm",
        "silu_and_mul",
        "gelu_and_mul",
        "static_quant_fp8",
        "dynamic_quant_fp8",
        "group_quant_fp8",
        "rotary_embedding",
        "rms_norm_static_quant_fp8",
        "fused_add_rms_norm_static_quant_fp8",
        "rms_norm_dynamic_quant_fp8",
        "silu_and_mul_static_quant_fp8",
    } <= names


def test_catalog_ops_leave_out_ops_declared_elsewhere() -> None:
    """Tests declare throwaway ops (torch ops cannot be removed); a provider's test of "every
    catalog op" must not see them."""

    def f(x: Tensor) -> Tensor:
        return x.clone()

    declared = register_op(name=fresh())(f)
    assert declared in list(ops)
    catalog = catalog_ops()
    assert declared not in catalog
    assert len(catalog) == 26  # 19 single-process ops and 7 collectives
    assert {op.name for op in catalog} <= {op.name for op in ops}


@pytest.mark.parametrize("bad", ["1abc", "has-dash", "", "class", "default", "maybe_inplace"])
def test_invalid_op_name(bad: str) -> None:
    def f(x: Tensor) -> Tensor:
        return x.clone()

    with pytest.raises(ValueError, match="op name"):
        register_op(name=bad)(f)


def test_duplicate_op_name() -> None:
    with pytest.raises(ValueError, match="duplicate op name 'rms_norm'"):

        @register_op
        def rms_norm(x: Tensor) -> Tensor:
            return x.clone()


def test_missing_annotation() -> None:
    def f(x, y: float) -> Tensor:  # type: ignore[no-untyped-def]
        return x * y

    with pytest.raises(TypeError, match="parameter 'x' has no type annotation"):
        register_op(name=fresh())(f)


def test_missing_return_annotation() -> None:
    def f(x: Tensor):  # type: ignore[no-untyped-def]
        return x.clone()

    with pytest.raises(TypeError, match="no return annotation"):
        register_op(name=fresh())(f)


def test_keyword_only_parameter() -> None:
    def f(x: Tensor, *, eps: float) -> Tensor:
        return x * eps

    with pytest.raises(TypeError, match="'eps' is keyword-only"):
        register_op(name=fresh())(f)


def test_allow_inplace_needs_matching_outputs() -> None:
    def f(x: Tensor, x_other: Tensor) -> Tensor:
        return x + x_other

    with pytest.raises(ValueError, match="as many tensor outputs as activations"):
        register_op(name=fresh(), allow_inplace=True)(f)


def test_activation_must_be_tensor_parameter() -> None:
    def f(x: Tensor, y: float) -> Tensor:
        return x * y

    with pytest.raises(ValueError, match="activation 'z' is not a parameter"):
        register_op(name=fresh(), activations=["z"])(f)
    with pytest.raises(TypeError, match="activation 'y' must be annotated Tensor"):
        register_op(name=fresh(), activations=["y"])(f)


def _declare_simple() -> ir_spec.IrOp:
    def f(x: Tensor, eps: float = 1e-6) -> Tensor:
        return x + eps

    return register_op(name=fresh("simple"))(f)


def test_reserved_and_duplicate_provider() -> None:
    op = _declare_simple()
    with pytest.raises(ValueError, match="reserved"):
        op.register_impl("native")(lambda x, eps=1e-6: x)
    op.register_impl("mine")(lambda x, eps=1e-6: x)
    with pytest.raises(ValueError, match="provider 'mine' already registered"):
        op.register_impl("mine")(lambda x, eps=1e-6: x)
    with pytest.raises(ValueError, match="provider name"):
        op.register_impl("bad name")


@pytest.mark.parametrize(
    "impl",
    [
        lambda y, eps=1e-6: y,  # name
        lambda eps, x: x,  # order, default
        lambda x, eps=1e-5: x,  # default value
        lambda x, eps: x,  # missing default
        lambda x, eps=1e-6, extra=0: x,  # extra parameter
        lambda x, *, eps=1e-6: x,  # keyword-only
    ],
)
def test_impl_parameters_must_match(impl: Any) -> None:
    op = _declare_simple()
    with pytest.raises(TypeError, match="expected the native function's"):
        op.register_impl("p")(impl)
    assert "p" not in op.impls


def test_supports_args_parameters_must_match() -> None:
    op = _declare_simple()
    with pytest.raises(TypeError, match="supports_args of 'p'"):
        op.register_impl("p", supports_args=lambda x: True)
    with pytest.raises(TypeError, match="expected a callable"):
        op.register_impl("p", supports_args=True)  # type: ignore[arg-type]


def test_supported_must_be_bool() -> None:
    op = _declare_simple()
    with pytest.raises(TypeError, match="'supported'"):
        op.register_impl("p", supported=1)  # type: ignore[arg-type]


def test_inplace_requires_allow_inplace() -> None:
    with pytest.raises(ValueError, match="without allow_inplace"):
        ops.rms_norm.register_impl("p", inplace=True)
    with pytest.raises(AttributeError, match="no maybe_inplace"):
        _ = ops.rms_norm.maybe_inplace


def test_impl_attributes_and_unregister() -> None:
    op = _declare_simple()

    def pred(x: Tensor, eps: float = 1e-6) -> bool:
        return x.dtype == torch.float32

    @op.register_impl("fancy", supported=False, supports_args=pred, batch_invariant=True)
    def fancy(x: Tensor, eps: float = 1e-6) -> Tensor:
        return x

    impl = op.impls["fancy"]
    assert (
        impl.provider,
        impl.fn,
        impl.supported,
        impl.supports_args,
        impl.inplace,
        impl.batch_invariant,
    ) == ("fancy", fancy, False, pred, False, True)
    assert op.unregister_impl("fancy") is impl
    assert "fancy" not in op.impls
    with pytest.raises(ValueError, match="no provider 'fancy'"):
        op.unregister_impl("fancy")
    with pytest.raises(ValueError, match="cannot be removed"):
        op.unregister_impl("native")


def _store(x: Tensor, cache: Tensor, index: int) -> None:
    cache[index].copy_(x)


def test_mutated_parameters_enter_the_schema() -> None:
    op = register_op(name=fresh(), mutates=["cache"])(_store)
    assert op.mutates == ("cache",)
    (written,) = [a for a in op.torch_op.default._schema.arguments if a.is_write]
    assert written.name == "cache"
    x, cache = torch.randn(4), torch.randn(3, 4)
    version = cache._version
    assert op(x, cache, 1) is None
    assert torch.equal(cache[1], x)
    assert cache._version > version, "a stored argument's version counter moves, as in torch"
    cache2 = cache.clone()
    op.torch_op.default(-x, cache2, 2)
    assert torch.equal(cache2[2], -x)


@pytest.mark.parametrize(
    ("mutates", "error", "match"),
    [
        (["nope"], ValueError, "mutated parameter 'nope' is not a parameter"),
        (["index"], TypeError, "must be annotated Tensor"),
        (["x"], ValueError, "both an activation and mutated"),
        (["cache", "cache"], ValueError, "names a parameter twice"),
        ("cache", TypeError, "expected a list of parameter names"),
    ],
)
def test_bad_mutated_parameters_are_refused(mutates: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        register_op(name=fresh(), mutates=mutates)(_store)


def test_ops_that_store_run_without_a_gradient() -> None:
    """A gradient through a store into a cache has no meaning for inference: the op takes its
    direct path even when an input requires grad, and stores the value."""
    op = register_op(name=fresh(), mutates=["cache"])(_store)
    x, cache = torch.randn(4, requires_grad=True), torch.zeros(3, 4)
    op(x, cache, 0)
    assert torch.equal(cache[0], x.detach())


@pytest.mark.parametrize("name", ["self", "_impl_", "_cache_"])
def test_parameter_names_of_the_entry_points_are_refused(name: str) -> None:
    source = f"def f({name}: Tensor) -> Tensor:\n    return {name}.clone()\n"
    namespace: dict[str, Any] = {"Tensor": Tensor}
    exec(source, namespace)
    with pytest.raises(ValueError, match=f"parameter name '{name}' is reserved"):
        register_op(name=fresh())(namespace["f"])


def test_ops_pickle_by_reference() -> None:
    """A model holding ops (or the `ops` namespace) as attributes is pickled when Dynamo saves
    its trace; each op is saved by name and loaded as the one declared op of that name."""
    import pickle

    for op in ops:
        assert pickle.loads(pickle.dumps(op)) is op
    assert pickle.loads(pickle.dumps(ops)) is ops
    assert pickle.loads(pickle.dumps({"layer": [ops.silu_and_mul]}))["layer"][0] is ops.silu_and_mul


def test_unpickling_an_undeclared_op_names_it() -> None:
    import pickle

    data = pickle.dumps(ops.rms_norm).replace(b"rms_norm", b"no_such_")
    with pytest.raises(pickle.UnpicklingError, match="no_such_"):
        pickle.loads(data)
