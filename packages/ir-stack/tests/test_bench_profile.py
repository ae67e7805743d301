"""The profile suite's CPU side: kernel categories, the per-step breakdown, the weight bytes a
step reads, and its report."""

from pathlib import Path
from typing import Any

import pytest

from ir_stack.bench import profile, results
from ir_stack.models import TINY, LlamaModel


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "matrix products"),
        ("nvjet_hsh_128x64_64x4_2x1_v_bz_coopA_TNN", "matrix products"),
        ("_partial_kernel", "attention"),
        ("flash_fwd_kernel", "attention"),
        ("void at::native::index_put_kernel_impl<...>", "cache writes"),
        ("_write_kv_cache_kernel", "cache writes"),
        ("void ir_cuda::(anonymous namespace)::row_kernel<__nv_bfloat16>(...)", "IR ops"),
        ("_norm_kernel", "IR ops"),
        ("triton_per_fused_add_mul_rsqrt_0", "Inductor fused"),
        ("void at::native::vectorized_elementwise_kernel<4, ...>", "other"),
    ],
)
def test_kernels_fall_into_their_categories(name: str, expected: str) -> None:
    assert profile.category(name, {"_norm_kernel"}) == expected


def test_breakdown_is_a_steps_worth() -> None:
    events = [("gemm_a", 10.0), ("gemm_b", 30.0), ("triton_poi_fused_0", 4.0), ("memcpy", 2.0)]
    parts = profile.breakdown(events * 2, steps=2, ir_names=())
    assert parts.us == {"matrix products": 40.0, "Inductor fused": 4.0, "other": 2.0}
    assert parts.kernels == {"matrix products": 2, "Inductor fused": 1, "other": 1}
    assert parts.total_us == 46.0
    assert parts.top == {
        "matrix products": [("gemm_b", 30.0), ("gemm_a", 10.0)],
        "Inductor fused": [("triton_poi_fused_0", 4.0)],
        "other": [("memcpy", 2.0)],
    }


def test_kernel_names_are_shortened_for_the_table() -> None:
    name = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
        "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)"
    )
    assert profile.short_name(name) == "at::native::vectorized_elementwise_kernel"
    assert profile.short_name("triton_per_fused_add_mul_rsqrt_0") == (
        "triton_per_fused_add_mul_rsqrt_0"
    )
    assert len(profile.short_name("k" * 100)) == 60


def test_the_triton_providers_kernels_are_known_by_name() -> None:
    pytest.importorskip("triton")
    names = profile.ir_kernel_names()
    assert names, "the Triton provider's @triton.jit kernels"
    assert all(profile.category(n, names) in ("IR ops", "cache writes", "attention") for n in names)


def test_a_decode_step_reads_every_weight_but_the_embedding_table() -> None:
    model = LlamaModel(TINY)
    everything = sum(p.numel() * p.element_size() for p in model.parameters())
    table = model.embed.weight
    row = table.shape[1] * table.element_size()
    assert profile.weight_bytes(model, tokens=3) == everything - table.numel() * 4 + 3 * row


def test_a_prompt_counts_every_linear_layer_and_each_layers_causal_attention() -> None:
    model = LlamaModel(TINY)
    c = TINY
    per_layer = c.hidden_size * (c.num_heads + 2 * c.num_kv_heads) * c.head_dim  # qkv
    per_layer += c.num_heads * c.head_dim * c.hidden_size  # output projection
    per_layer += 3 * c.hidden_size * c.intermediate_size  # gate, up and down
    linear = c.num_layers * per_layer + c.hidden_size * c.vocab_size  # and the logits
    width = c.num_layers * c.num_heads * c.head_dim
    # 12 tokens attend over 6 positions on average: 2 products of 2 FLOPs an element
    expected = 2 * linear * 12 + 2 * 2 * 12 * 6 * width
    assert profile.matrix_flops(model, 12, 12, width) == expected


def made_up_result(params: dict[str, Any]) -> results.Result:
    """An empty profile result of a made-up GPU, its bandwidth and throughput set."""
    result = results.new_result(
        "profile",
        "profile of a made-up run",
        results.Device("Made-up GPU", "made-up", "cuda"),
        params,
        profile.KEY,
        profile.METRICS,
    )
    result.facts = {"copy_bandwidth_gbps": 3000.0, "dense_bf16_tflops": 700.0}
    return result


def test_the_report_renders_from_a_result(tmp_path: Path) -> None:
    result = made_up_result({"model": "tiny", "iters": 2})
    result.rows = [
        {"model": "tiny", "workload": "decode b=1", "category": "step", "us": 50.0,
         "kernels": 30, "graph_step_ms": 0.06, "floor_ms": 0.04, "step_over_floor": 1.5},
        {"model": "tiny", "workload": "decode b=1", "category": "matrix products", "us": 40.0,
         "kernels": 20, "share": 0.8, "top_kernels": "gemm_b 30.0; gemm_a 10.0"},
        {"model": "tiny", "workload": "decode b=1", "category": "other", "us": 10.0,
         "kernels": 10, "share": 0.2},
    ]  # fmt: skip
    path = results.save(result, tmp_path)
    table = path.with_suffix(".md").read_text()
    # matrix products / floor: the matrix products' row over the step's floor_ms, here 1
    assert "| decode b=1 | 0.06 | 50 | 30 | 0.04 | 1.5 | 1 | - | - |" in table
    assert "| matrix products | 40 | 80.0 % | 20 | gemm_b 30.0; gemm_a 10.0 |" in table
    assert "| other | 10 | 20.0 % | 10 | - |" in table  # a result saved before the column
    assert path.with_suffix(".png").stat().st_size > 0


def test_matrix_products_are_read_by_shape_from_a_real_profile() -> None:
    """The operators' recorded input shapes give each matrix product's ``m x k x n``: a
    linear layer's ``addmm`` and a plain ``mm`` of the same shape merge, another shape stays
    apart, counted a step (here on the CPU, its time the operators' own)."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    linear = torch.nn.Linear(64, 96)
    x, other = torch.randn(3, 64), torch.randn(96, 8)
    with torch_profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(2):
            y = linear(x)
            torch.mm(x, linear.weight.t())
            torch.mm(y, other)
    products = profile.matrix_products(
        prof.key_averages(group_by_input_shape=True), steps=2, time_us=lambda a: 1.0
    )
    by_shape = {(p.m, p.k, p.n): p for p in products}
    assert set(by_shape) == {(3, 64, 96), (3, 96, 8)}
    assert by_shape[3, 64, 96].calls == 2  # an addmm and an mm a step
    assert by_shape[3, 96, 8].calls == 1
    assert by_shape[3, 64, 96].category == "matrix product 3x64x96"
    assert by_shape[3, 64, 96].weight_bytes(2) == 64 * 96 * 2


def test_a_scaled_product_counts_a_byte_a_weight_and_other_operators_are_ignored() -> None:
    class Average:
        def __init__(self, key: str, shapes: list[list[int]], count: int) -> None:
            self.key, self.input_shapes, self.count = key, shapes, count
            self.self_device_time_total = 10.0 * count

    averages = [
        Average("aten::_scaled_mm", [[1, 256], [256, 512], [], []], 4),
        Average("aten::bmm", [[2, 1, 8], [2, 8, 5]], 4),
        Average("aten::mm", [[1, 7]], 4),  # shapes cut short: skipped
        Average("aten::add", [[1, 5], [1, 5]], 4),
    ]
    (product,) = profile.matrix_products(averages, steps=4)
    assert (product.m, product.k, product.n, product.scaled) == (1, 256, 512, True)
    assert (product.calls, product.us) == (1.0, 10.0)
    assert product.weight_bytes(2) == 256 * 512
    # 131072 bytes in 10 µs: 13.1 GB/s, a hundredth of 1310.72 GB/s
    assert product.fraction_of_copy(2, 1310.72) == pytest.approx(0.01)
    assert product.category == "matrix product 1x256x512 fp8"


def test_a_decode_steps_shapes_get_a_table_of_their_own(tmp_path: Path) -> None:
    result = made_up_result({"model": "tiny", "iters": 2})
    result.rows = [
        {"model": "tiny", "workload": "decode b=1", "category": "step", "us": 50.0,
         "kernels": 30, "graph_step_ms": 0.06, "floor_ms": 0.04, "step_over_floor": 1.5},
        {"model": "tiny", "workload": "decode b=1", "category": "matrix products", "us": 40.0,
         "kernels": 20, "share": 1.0},
        {"model": "tiny", "workload": "decode b=1", "category": "matrix product 1x2048x512",
         "us": 8.0, "kernels": 4.0, "weight_bytes": 2097152, "fraction_of_copy": 0.35},
        {"model": "tiny", "workload": "decode b=1", "category": "matrix product 1x2048x8192",
         "us": 32.0, "kernels": 16.0, "weight_bytes": 33554432, "fraction_of_copy": 0.92},
    ]  # fmt: skip
    table = results.save(result, tmp_path).with_suffix(".md").read_text()
    assert "| shape m x k x n | calls a step | µs a step | µs a call | weight MB | of copy |" in (
        table
    )
    big, small = (
        table.index("| 1x2048x8192 | 16 | 32 | 2 | 33.6 | 0.92 |"),
        table.index("| 1x2048x512 | 4 | 8 | 2 | 2.1 | 0.35 |"),
    )
    assert big < small  # longest first
    # the shapes are not categories, nor is the category a shape: each table has its own
    assert table.count("| matrix products | 40 |") == 1
    assert "| matrix product 1x2048" not in table
    assert "| s | 20 |" not in table


def test_ranges_named_on_the_gpu_timeline_are_not_kernels() -> None:
    """A profile recording the CPU too puts Inductor's ``## Call CompiledFxGraph`` ranges on
    the GPU's timeline, as long as the kernels in them: they are not counted."""

    class Event:
        def __init__(self, name: str, device: str, us: float, annotation: bool = False) -> None:
            self.name, self.device_type, self.device_time = name, device, us
            self.is_user_annotation = annotation

    events = [
        Event("## Call CompiledFxGraph abc ##", "cuda", 50.0, annotation=True),
        Event("nvjet_gemm", "cuda", 30.0),
        Event("triton_poi_fused_0", "cuda", 20.0),
        Event("aten::mm", "cpu", 40.0),
        Event("Memset", "cuda", 0.0),
    ]
    assert profile.kernel_events(events, "cuda") == [
        ("nvjet_gemm", 30.0),
        ("triton_poi_fused_0", 20.0),
    ]


def test_the_suite_refuses_to_run_without_a_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    if profile.torch.cuda.is_available():
        pytest.skip("a GPU is here")
    assert profile.main(["--out", "unused", "--model", "tiny"]) == 2
    assert "no CUDA GPU" in capsys.readouterr().out


def test_a_cache_store_counts_only_the_slots_it_writes() -> None:
    """The kernel grid's minimum traffic of an op that stores into a KV cache: what it reads
    and returns, and one slot's row a real token, never the whole cache."""
    from ir_spec import ops
    from ir_spec.testing import sample_inputs
    from ir_stack.bench.kernels import min_traffic_bytes

    op = ops.write_kv_cache
    key, value, key_cache, value_cache, slots = sample_inputs(
        op, hidden_size=64, batch_shape=(9,), options={"padding_slots": True}
    )
    real = int((slots >= 0).sum())
    assert 0 < real < 9
    moved = min_traffic_bytes(op, (key, value, key_cache, value_cache, slots), ())
    row = 64 * key.element_size()
    assert moved == 2 * 9 * row + slots.numel() * slots.element_size() + 2 * real * row


def test_several_models_get_a_model_column_and_headings_of_their_own(tmp_path: Path) -> None:
    result = made_up_result({"model": "tiny", "iters": 2, "hf": ["llama"]})
    for model, us in (("tiny", 50.0), ("transformers llama", 70.0)):
        result.rows += [
            {"model": model, "workload": "decode b=1", "category": "step", "us": us,
             "kernels": 30, "graph_step_ms": us / 1e3, "floor_ms": 0.04},
            {"model": model, "workload": "decode b=1", "category": "other", "us": us,
             "kernels": 30, "share": 1.0},
        ]  # fmt: skip
    path = results.save(result, tmp_path)
    table = path.with_suffix(".md").read_text()
    assert "| model | workload | graph step (ms) |" in table
    assert "| transformers llama | decode b=1 | 0.07 | 70 |" in table
    tiny, llama = table.index("## tiny: decode b=1"), table.index("## transformers llama: decode")
    assert tiny < llama
    assert "| other | 70 | 100.0 % |" in table[llama:]
    assert "the ir_stack backend, reduce-overhead" in table
    assert path.with_suffix(".png").stat().st_size > 0


def test_a_tied_output_projection_is_read_whole_and_the_table_a_row_a_token() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, vocab_size=100, tie_word_embeddings=True,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    layers = sum(p.numel() for p in model.model.layers.parameters()) + 32  # + the final norm
    assert profile.weight_bytes(model, tokens=2) == 4 * (layers + 100 * 32 + 2 * 32)


def test_each_finished_model_is_handed_over_so_a_stopped_run_keeps_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`run` hands the result to `model_done` after the reference model and after each
    transformers model (`main` saves it there); the GPU's measurements are stood in for."""
    import argparse

    import torch

    monkeypatch.setattr(profile.timing, "copy_bandwidth_gbps", lambda: 3000.0)
    monkeypatch.setattr(profile, "dense_matrix_tflops", lambda dtype: 700.0)
    monkeypatch.setattr(
        profile,
        "profile_kernels",
        lambda step, steps: profile.ProfiledSteps([("gemm", 5.0)] * steps),
    )

    def hf_rows(args: argparse.Namespace, family: str, measure: Any) -> list[dict[str, Any]]:
        return [{"model": family, "workload": "decode b=1", "category": "step"}]

    monkeypatch.setattr(profile, "hf_rows", hf_rows)
    args = argparse.Namespace(
        model="tiny", fp8=False, batches="1", prefill=0, context=8, iters=1,
        hf=["llama", "qwen3"], hf_layers=None,
    )  # fmt: skip
    handed: list[list[str]] = []
    profile.run(args, torch.device("cpu"), lambda r: handed.append([x["model"] for x in r.rows]))
    reference = ["tiny", "tiny"]  # decode b=1: its step and its one category
    assert handed == [reference, [*reference, "llama"], [*reference, "llama", "qwen3"]]


def test_autotune_profiles_the_reference_model_again_under_its_own_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--autotune`` adds the reference model compiled with ``PassConfig(autotune=True)``,
    its rows named ``<model> autotuned``, handed over once it is done."""
    import torch

    from ir_stack import compiler

    monkeypatch.setattr(profile.timing, "copy_bandwidth_gbps", lambda: 3000.0)
    monkeypatch.setattr(profile, "dense_matrix_tflops", lambda dtype: 700.0)
    monkeypatch.setattr(
        profile,
        "profile_kernels",
        lambda step, steps: profile.ProfiledSteps([("gemm", 5.0)] * steps),
    )
    autotuned: list[bool] = []

    def compile_spy(model: torch.nn.Module, config: Any) -> Any:
        autotuned.append(config.passes.autotune)
        return compiler.compile(model, config)

    monkeypatch.setattr(profile, "ir_stack_compile", compile_spy)
    sizes = ["--model", "tiny", "--batches", "1", "--prefill", "0", "--iters", "1"]
    args = profile.parse_args(["--out", "unused", *sizes, "--autotune", "--hf", ""])
    handed: list[list[str]] = []
    result = profile.run(
        args, torch.device("cpu"), lambda r: handed.append([x["model"] for x in r.rows])
    )
    assert autotuned == [False, False, True, True]  # profiled and replayed, each selection
    assert handed == [["tiny", "tiny"], ["tiny", "tiny", "tiny autotuned", "tiny autotuned"]]
    assert result.params["autotune"] is True
