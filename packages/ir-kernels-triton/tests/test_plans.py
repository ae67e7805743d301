"""Launch plans (`ir_kernels_triton.launch.plans`): a replayed launch passes the kernel exactly
what the usual path would for the same call.

Plans need Triton's compiled-kernel launcher, so here (interpreter or not) the kernels are
replaced by fakes that record each launch's grid and full argument list instead of running;
the launchers' own configuration code runs as usual. The GPU test matrix runs the real thing.
"""

from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from ir_kernels_triton.activations import gated as pk
from ir_kernels_triton.kv_cache import kernel as kv
from ir_kernels_triton.launch import device, plans, tuning
from ir_kernels_triton.norms import group as gn
from ir_kernels_triton.norms import kernel as nk
from ir_kernels_triton.norms import rules as nr
from ir_kernels_triton.quant import dynamic as dq
from ir_kernels_triton.quant import group as gq
from ir_kernels_triton.quant import static as sq
from ir_kernels_triton.rotary import kernel as rk
from ir_kernels_triton.rotary import qk_norm as qk
from ir_spec import IrOp, ops
from ir_spec.testing import clone_args, matrix_spec, results_of, sample_inputs, single_process_ops

Launch = tuple[str, str, tuple[int, int, int], list[Any]]


class FakeCompiled:
    """Stands for a compiled kernel: `run` records a replayed launch."""

    function = "function"
    packed_metadata = "metadata"

    def __init__(self, name: str, launches: list[Launch]) -> None:
        self.name, self.launches = name, launches

    def run(self, g0: int, g1: int, g2: int, stream: Any, *rest: Any) -> None:
        assert rest[:2] == ("function", "metadata")
        self.launches.append(("replay", self.name, (g0, g1, g2), list(rest[5:])))

    def launch_metadata(self, *args: Any) -> None:
        return None


class FakeKernel:
    """Stands for a `triton.jit` kernel: a launch records its grid and full arguments."""

    def __init__(self, real: Any, launches: list[Launch]) -> None:
        self.fn, self.launches = real.fn, launches

    def __getitem__(self, grid: tuple[int, ...]) -> Callable[..., FakeCompiled]:
        def launch(*args: Any, **kwargs: Any) -> FakeCompiled:
            full = plans._full_arguments(self, args, kwargs)
            assert full is not None
            grid3 = (*grid, *(1,) * (3 - len(grid)))
            self.launches.append(("first", self.fn.__name__, grid3, full))
            return FakeCompiled(self.fn.__name__, self.launches)

        return launch


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Launch]]:
    """Plans turned on over fake kernels; yields the list of launches."""
    recorded: list[Launch] = []
    for module, name in (
        (nk, "norm_kernel"),
        (pk, "flat_gated_kernel"),
        (pk, "gated_kernel"),
        (sq, "flat_static_quant_kernel"),
        (sq, "static_quant_kernel"),
        (dq, "dynamic_quant_kernel"),
        (gq, "group_quant_kernel"),
        (rk, "rotary_kernel"),
        (gn, "group_norm_kernel"),
        (qk, "qk_norm_rotary_kernel"),
        (kv, "write_kv_cache_kernel"),
        (kv, "rotary_write_kv_cache_kernel"),
    ):
        monkeypatch.setattr(module, name, FakeKernel(getattr(module, name), recorded))
    runtime = SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)
    active = SimpleNamespace(get_current_device=lambda: 0, get_current_stream=lambda d: 7)
    monkeypatch.setattr(
        plans, "_LAUNCHER", (SimpleNamespace(runtime=runtime), SimpleNamespace(active=active))
    )
    monkeypatch.setattr(plans, "current_device", lambda: 0)
    monkeypatch.setattr(plans, "_enabled", True)
    plans.clear_launch_plans()
    yield recorded
    plans.clear_launch_plans()


def _same_arguments(replayed: list[Any], usual: list[Any]) -> bool:
    if len(replayed) != len(usual):
        return False
    for a, b in zip(replayed, usual, strict=True):
        if isinstance(b, torch.Tensor):
            if not isinstance(a, torch.Tensor) or a.data_ptr() != b.data_ptr():
                return False
        elif type(a) is not type(b) or a != b:
            return False
    return True


Maker = Callable[[], Callable[[], None]]


def _check_replay(launches: list[Launch], make: Maker) -> Launch:
    """Launch `make`'s call (fresh tensors each time it makes one) to record its plan, then a
    new one, which must replay it, then the new one again with plans off: the replay must
    pass what the usual path passes. Returns the replayed launch."""
    make()()
    assert launches[-1][0] == "first"
    call = make()
    call()
    replayed = launches[-1]
    assert replayed[0] == "replay", "the second call of one layout should replay its plan"
    with plans.launch_plans(False):
        call()
    usual = launches[-1]
    assert usual[0] == "first"
    assert replayed[1:3] == usual[1:3]
    assert _same_arguments(replayed[3], usual[3]), (replayed[3], usual[3])
    return replayed


def _norm_case(
    hidden: int,
    rows_: int = 3,
    dtype: torch.dtype = torch.float16,
    weight: bool = True,
    residual: bool = False,
    in_place: bool = False,
    quant: int = nr.QUANT_NONE,
    ub: bool = False,
    variance_size: int | None = None,
    row_stride: int | None = None,
) -> Maker:
    def make() -> Callable[[], None]:
        width = row_stride or hidden
        x = torch.randn(rows_, width, dtype=dtype)[:, :hidden]
        w = torch.rand(hidden, dtype=dtype) if weight else None
        r = torch.randn(rows_, hidden, dtype=dtype) if residual else None
        fp8 = quant != nr.QUANT_NONE
        out = (
            x
            if in_place
            else torch.empty(rows_, hidden, dtype=torch.float8_e4m3fn if fp8 else dtype)
        )
        r_out = (r if in_place else torch.empty_like(r)) if r is not None else None
        scale = torch.rand(1) + 0.5 if quant == nr.QUANT_STATIC else None
        scale_out = torch.empty(rows_, 1) if quant == nr.QUANT_DYNAMIC else None
        scale_ub = torch.rand(1) + 0.5 if ub else None
        eps = float(torch.rand(1)) * 1e-5
        return lambda: nk.launch_norm(
            x,
            w,
            eps,
            variance_size,
            out,
            residual=r,
            residual_out=r_out,
            quant=quant,
            scale=scale,
            scale_out=scale_out,
            scale_ub=scale_ub,
        )

    return make


NORM_CASES = {
    "weight fp16 odd": _norm_case(769),
    "no weight fp32 variance": _norm_case(64, dtype=torch.float32, weight=False, variance_size=32),
    "strided rows": _norm_case(72, row_stride=100),
    "3 rows wider than one pass": _norm_case(20000, dtype=torch.float32),
    "fused add": _norm_case(769, residual=True),
    "fused add in place": _norm_case(512, residual=True, in_place=True),
    "static fp8": _norm_case(256, quant=nr.QUANT_STATIC),
    "dynamic fp8 with bound": _norm_case(256, quant=nr.QUANT_DYNAMIC, ub=True),
    "fused add static fp8": _norm_case(256, residual=True, quant=nr.QUANT_STATIC),
}


@pytest.mark.parametrize("case", NORM_CASES)
def test_norm_replay_passes_what_the_usual_path_does(launches: list[Launch], case: str) -> None:
    _check_replay(launches, NORM_CASES[case])


@pytest.mark.parametrize(
    "in_place_first", [False, True], ids=["out of place first", "in place first"]
)
def test_split_plan_is_not_replayed_over_an_overlap(
    launches: list[Launch], monkeypatch: pytest.MonkeyPatch, in_place_first: bool
) -> None:
    """Out of place, a row is shared between programs; in place (the same key) it must not be
    (a program reads its whole row). Each call replays its own plan, in either order."""
    monkeypatch.setattr(nr, "sm_count", lambda t: 132)
    out_of_place = _norm_case(8192, rows_=2, residual=True)
    in_place = _norm_case(8192, rows_=2, residual=True, in_place=True)
    order = [in_place, out_of_place] if in_place_first else [out_of_place, in_place]
    for make in order:
        launch = _check_replay(launches, make)
        assert launch[2] == (
            (2, 1, 1) if make is in_place else (2, tuning.COMMON.norms.row_split, 1)
        )
    for make in order:
        make()()
        assert launches[-1][0] == "replay"
        assert launches[-1][2] == (
            (2, 1, 1) if make is in_place else (2, tuning.COMMON.norms.row_split, 1)
        )


def test_plans_keep_no_tensor(launches: list[Launch]) -> None:
    cases = (*NORM_CASES.values(), *POINTWISE_CASES.values(), *FUSED_CASES.values())
    for make in (*cases, _rotary_case(False)):
        make()()
    kept = [plan._args for store in plans.ALL_PLANS.values() for plan in store._plans.values()]
    assert len(kept) == len(cases) + 1
    assert not any(isinstance(value, torch.Tensor) for args in kept for value in args)


def test_a_new_layout_takes_the_usual_path(launches: list[Launch]) -> None:
    x = torch.randn(2 * 64 + 1)
    w = torch.rand(64)
    aligned, shifted = x[:128].view(2, 64), x[1:129].view(2, 64)
    for t in (aligned, aligned, shifted, shifted, x[:64].view(1, 64)):
        nk.launch_norm(t, w, 1e-6, None, torch.empty(t.shape))
    assert [kind for kind, *_ in launches] == ["first", "replay", "first", "replay", "first"]


def test_tuning_overrides_are_not_planned(launches: list[Launch]) -> None:
    x, w = torch.randn(2, 64), torch.rand(64)
    for _ in range(2):
        nk.launch_norm(x, w, 1e-6, None, torch.empty(2, 64), num_warps=2)
        pk.launch_gated(x, torch.empty(2, 32), pk.ACT_SILU, flat=(64, 1))
    assert [kind for kind, *_ in launches] == ["first"] * 4
    assert all(len(p) == 0 for p in plans.ALL_PLANS.values())


def _pointwise_case(kind: str, strided: bool = False, **options: Any) -> Maker:
    def make() -> Callable[[], None]:
        rows_, width = 5, 2 * 96
        x = torch.randn(rows_, width + (32 if strided else 0), dtype=torch.float16)[:, :width]
        scale = torch.rand(1) + 0.5
        if kind == "gated":
            out = torch.empty(rows_, width // 2, dtype=torch.float16)
            return lambda: pk.launch_gated(x, out, options["act"], options.get("scale"))
        if kind == "gated_fp8":
            out = torch.empty(rows_, width // 2, dtype=torch.float8_e4m3fn)
            return lambda: pk.launch_gated(x, out, pk.ACT_SILU, scale)
        q = torch.empty(rows_, width, dtype=torch.float8_e4m3fn)
        if kind == "static":
            return lambda: sq.launch_static_quant(x, scale, q)
        if kind == "dynamic":
            s = torch.empty(rows_, 1)
            ub = scale if options.get("ub") else None
            return lambda: dq.launch_dynamic_quant(x, ub, q, s)
        s = (
            torch.empty(width // 64, rows_).t()
            if options.get("column_major")
            else torch.empty(rows_, width // 64)
        )
        return lambda: gq.launch_group_quant(x, 64, q, s)

    return make


POINTWISE_CASES = {
    "silu flat": _pointwise_case("gated", act=pk.ACT_SILU),
    "gelu tanh strided": _pointwise_case("gated", strided=True, act=pk.ACT_GELU_TANH),
    "silu fp8": _pointwise_case("gated_fp8"),
    "static quant flat": _pointwise_case("static"),
    "static quant strided": _pointwise_case("static", strided=True),
    "dynamic quant": _pointwise_case("dynamic"),
    "dynamic quant with bound": _pointwise_case("dynamic", ub=True),
    "group quant": _pointwise_case("group"),
    "group quant column-major": _pointwise_case("group", strided=True, column_major=True),
}


@pytest.mark.parametrize("case", POINTWISE_CASES)
def test_pointwise_replay_passes_what_the_usual_path_does(
    launches: list[Launch], case: str
) -> None:
    _check_replay(launches, POINTWISE_CASES[case])


def _rotary_case(in_place: bool, neox: bool = True, rotary_dim: int = 32) -> Maker:
    def make() -> Callable[[], None]:
        tokens, head = 3, 64
        positions = torch.randint(0, 16, (tokens,))
        q = torch.randn(tokens, 4 * head, dtype=torch.float16)
        k = torch.randn(tokens, 2 * head, dtype=torch.float16)
        cache = torch.randn(16, rotary_dim)
        q_out, k_out = (q, k) if in_place else (torch.empty_like(q), torch.empty_like(k))
        return lambda: rk.launch_rotary(positions, q, k, head, cache, neox, q_out, k_out)

    return make


@pytest.mark.parametrize(
    "case",
    [
        _rotary_case(in_place=False),
        _rotary_case(in_place=True),
        _rotary_case(in_place=False, neox=False, rotary_dim=64),
    ],
    ids=["partial rotation", "in place", "gpt-j"],
)
def test_rotary_replay_passes_what_the_usual_path_does(launches: list[Launch], case: Maker) -> None:
    _check_replay(launches, case)


def _group_norm_case(hidden: int, group: int, residual: bool, column_major: bool) -> Maker:
    def make() -> Callable[[], None]:
        rows_ = 3
        x = torch.randn(rows_, hidden, dtype=torch.float16)
        r = torch.randn(rows_, hidden, dtype=torch.float16) if residual else None
        r_out = torch.empty_like(x) if residual else None
        w = torch.rand(hidden, dtype=torch.float16)
        q = torch.empty(rows_, hidden, dtype=torch.float8_e4m3fn)
        groups = hidden // group
        s = torch.empty(groups, rows_).t() if column_major else torch.empty(rows_, groups)
        eps = float(torch.rand(1)) * 1e-5
        return lambda: gn.launch_group_norm(x, w, eps, group, q, s, residual=r, residual_out=r_out)

    return make


def _silu_group_case() -> Maker:
    def make() -> Callable[[], None]:
        x = torch.randn(5, 2 * 128, dtype=torch.float16)
        q = torch.empty(5, 128, dtype=torch.float8_e4m3fn)
        s = torch.empty(5, 2)
        return lambda: gq.launch_group_quant(x, 64, q, s, act=pk.ACT_SILU)

    return make


def _qk_norm_case(in_place: bool, weights: bool = True, rotary_dim: int = 64) -> Maker:
    def make() -> Callable[[], None]:
        tokens, head = 3, 64
        positions = torch.randint(0, 16, (tokens,))
        q = torch.randn(tokens, 4 * head, dtype=torch.float16)
        k = torch.randn(tokens, 2 * head, dtype=torch.float16)
        w = torch.rand(head, dtype=torch.float16) if weights else None
        cache = torch.randn(16, rotary_dim)
        q_out, k_out = (q, k) if in_place else (torch.empty_like(q), torch.empty_like(k))
        eps = float(torch.rand(1)) * 1e-5
        return lambda: qk.launch_qk_norm_rotary(
            positions, q, k, w, w, eps, head, cache, True, q_out, k_out
        )

    return make


def _cache_case(rotary: bool, in_place: bool = False, rotary_dim: int = 64) -> Maker:
    def make() -> Callable[[], None]:
        tokens, head = 3, 64
        positions = torch.randint(0, 16, (tokens,))
        q = torch.randn(tokens, 4 * head, dtype=torch.float16)
        k, v = (torch.randn(tokens, 2 * head, dtype=torch.float16) for _ in range(2))
        k_cache, v_cache = (torch.zeros(4, 8, 2, head, dtype=torch.float16) for _ in range(2))
        slots = torch.randperm(32)[:tokens]
        if not rotary:
            return lambda: kv.launch_write_kv_cache(k, v, k_cache, v_cache, slots)
        cache = torch.randn(16, rotary_dim)
        q_out, k_out = (q, k) if in_place else (torch.empty_like(q), torch.empty_like(k))
        return lambda: kv.launch_rotary_write_kv_cache(
            positions, q, k, v, head, cache, False, k_cache, v_cache, slots, q_out, k_out
        )

    return make


FUSED_CASES = {
    "group norm": _group_norm_case(256, 64, residual=False, column_major=False),
    "fused add group norm column-major": _group_norm_case(256, 64, True, column_major=True),
    "group norm wider than one pass": _group_norm_case(20000, 16, True, column_major=False),
    "silu group quant": _silu_group_case(),
    "qk norm": _qk_norm_case(in_place=False),
    "qk norm in place, no weights, partial": _qk_norm_case(True, weights=False, rotary_dim=32),
    "write kv cache": _cache_case(rotary=False),
    "rotary write kv cache": _cache_case(rotary=True),
    "rotary write kv cache in place, partial": _cache_case(True, in_place=True, rotary_dim=32),
}


@pytest.mark.parametrize("case", FUSED_CASES)
def test_fused_op_replay_passes_what_the_usual_path_does(launches: list[Launch], case: str) -> None:
    _check_replay(launches, FUSED_CASES[case])


def test_plan_store_bounds_and_refusals(launches: list[Launch]) -> None:
    store = plans.LaunchPlans("test", capacity=2)
    kernel = FakeKernel(nk.norm_kernel, launches)
    compiled = FakeCompiled("norm_kernel", launches)
    good = dict(SPLIT=1)
    parameters = plans._parameters(nk.norm_kernel.fn)
    args = [None] * sum(not is_c for _, is_c, _ in parameters)
    for key in range(3):
        store.record(key, kernel, compiled, (1,), args, {"BLOCK": 8}, (0,))
    assert len(store) == 0  # constexprs without values or defaults: not planned
    constexprs = {name: 1 for name, is_c, default in parameters if is_c}
    for key in range(3):
        store.record(key, kernel, compiled, (1,), args, {**constexprs, **good}, (0,))
    assert len(store) == 1  # full at 2: dropped, then the third recorded
    store.record("kw", kernel, compiled, (1,), args[:-1], {**constexprs, "epsilon": 1.0}, (0,))
    assert store.get("kw") is None  # a runtime parameter by keyword
    store.record("odd", kernel, compiled, (1,), args, {**constexprs, "BOGUS": 1}, (0,))
    assert store.get("odd") is None
    with pytest.raises(ValueError, match="capacity must be at least 1"):
        plans.LaunchPlans("bad", capacity=0)


def test_switches() -> None:
    with pytest.raises(TypeError, match="enabled must be a bool"):
        plans.set_launch_plans(1)  # type: ignore[arg-type]
    if plans._LAUNCHER is None:  # the interpreter: plans stay off whatever is asked
        with plans.launch_plans(True):
            assert not plans.launch_plans_enabled()


def test_environment_switch(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("IR_TRITON_LAUNCH_PLANS", "0")
    assert not plans._env_enabled()
    monkeypatch.setenv("IR_TRITON_LAUNCH_PLANS", "maybe")
    assert plans._env_enabled()
    assert "IR_TRITON_LAUNCH_PLANS='maybe'" in caplog.text


# ------------------------------------------------------------------- on the GPU, for real
PROVIDERS = [(op, p) for op in single_process_ops() for p in op.impls if p.startswith("triton")]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="plans replay compiled kernels")
@pytest.mark.parametrize(("tokens", "hidden"), [(1, 8192), (2, 8192), (7, 769), (300, 2048)])
@pytest.mark.parametrize(("op", "provider"), PROVIDERS, ids=[f"{o.name}-{p}" for o, p in PROVIDERS])
def test_replayed_launches_give_the_usual_bits(
    monkeypatch: pytest.MonkeyPatch, op: IrOp, provider: str, tokens: int, hidden: int
) -> None:
    """Every provider function, called with plans off, then twice with them on (the second
    call replayed): bitwise the same outputs, in-place variants included."""
    replays = []
    launch = plans.LaunchPlan.launch
    monkeypatch.setattr(
        plans.LaunchPlan, "launch", lambda self, values: replays.append(1) or launch(self, values)
    )
    spec = matrix_spec(torch.bfloat16, hidden, tokens, "contiguous", device="cuda", seed=tokens)
    args = sample_inputs(op, spec)
    fn = op.impls[provider].fn

    def run() -> list[torch.Tensor]:
        call_args = clone_args(args)
        # the results, and the caches an op stores into
        return [t.float() for t in results_of(op, call_args, fn(*call_args))]

    plans.clear_launch_plans()
    with plans.launch_plans(False):
        usual = run()
    with plans.launch_plans(True):
        first, replayed = run(), run()
    assert len(replays) == 1
    for got in (first, replayed):
        for a, b in zip(got, usual, strict=True):
            assert torch.equal(a, b)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="plans replay compiled kernels")
def test_in_place_call_after_a_split_plan_gives_the_usual_bits() -> None:
    """At 2 x 8192 the out-of-place fused add shares each row between programs; the in-place
    call of the same layout has the same key and must not (`launch_norm`)."""
    gen = torch.Generator(device="cuda").manual_seed(5)
    x, r = (torch.randn(2, 8192, device="cuda", generator=gen).bfloat16() for _ in range(2))
    w = torch.rand(8192, device="cuda", generator=gen).bfloat16()
    expected = ops.fused_add_rms_norm.native(x, r, w, 1e-6)
    out_of_place = ops.fused_add_rms_norm.impls["triton"].fn
    in_place = ops.fused_add_rms_norm.impls["triton_inplace"].fn
    plans.clear_launch_plans()
    with plans.launch_plans(True):
        usual = [out_of_place(x, r, w, 1e-6) for _ in range(2)]
        placed = [in_place(x.clone(), r.clone(), w, 1e-6) for _ in range(2)]
    for got in (*usual, *placed):
        torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2)
        assert all(torch.equal(a, b) for a, b in zip(got, usual[0], strict=True))


def test_older_triton_gets_no_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    import triton

    monkeypatch.setattr(triton, "__version__", "3.5.1")
    assert plans._triton_launcher() is None
    monkeypatch.setattr(triton, "__version__", "3.6.0+git1234")
    assert device.triton_version() == (3, 6)
