"""The launch-configuration rules: what they may depend on, and that they stay launchable."""

from typing import Any

import pytest
import torch

from ir_kernels_triton.activations import gated as pk
from ir_kernels_triton.launch import clusters as cn
from ir_kernels_triton.launch import tuning
from ir_kernels_triton.launch.rows import next_power_of_2, warps_for
from ir_kernels_triton.norms import kernel as nk
from ir_kernels_triton.norms import rules as nr
from ir_kernels_triton.quant import dynamic as dq
from ir_kernels_triton.quant import group as gq
from ir_kernels_triton.quant import static as sq

ACTS = [pk.ACT_SILU, pk.ACT_GELU, pk.ACT_GELU_TANH]
NORMS, CLUSTERS, GATES = tuning.COMMON.norms, tuning.COMMON.clusters, tuning.COMMON.gates
H100_GBPS_PER_SM, H200_GBPS_PER_SM = 25.4, 37.2
#: Where the tests that launch kernels put their tensors (the CPU under the interpreter).
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


TOTALS = (
    1,
    5632,
    (1 << 13) + 1,
    14336,
    1 << 17,
    (1 << 17) + 1,
    1 << 19,
    (1 << 19) + 1,
    1 << 24,
    1 << 30,
)


def assert_launchable(block: int, warps: int) -> None:
    assert block & (block - 1) == 0
    assert block >= 32 * warps
    assert warps in (1, 2, 4, 8, 16)


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("quant", [False, True])
@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("gbps_per_sm", [None, H100_GBPS_PER_SM, H200_GBPS_PER_SM])
def test_flat_configs_are_launchable(
    act: int, quant: bool, streaming: bool, gbps_per_sm: float | None
) -> None:
    """Power-of-two blocks of at least one element per thread, for every size and card."""
    for total in TOTALS:
        assert_launchable(*pk.flat_config(total, streaming, act, quant, gbps_per_sm))
    for total in TOTALS:
        assert_launchable(*sq.flat_config(total, streaming))


def test_streamed_gates_follow_the_card_bandwidth() -> None:
    """Inductor's launch (1024 over 4 warps) for the streamed gates without fp8 output only on
    cards of the deep-loads class (an H200's bandwidth per SM); an H100, or no bandwidth known,
    keeps its launch."""
    big = 1 << 28
    h100, h200 = H100_GBPS_PER_SM, H200_GBPS_PER_SM
    for act in (pk.ACT_SILU, pk.ACT_GELU):
        assert pk.flat_config(big, True, act, False, h100) == pk.flat_config(big, True, act)
        assert pk.flat_config(big, True, act, False, h200) == (1024, 4)
        # within the L2, and with fp8 output, the bandwidth does not enter
        assert pk.flat_config(big, False, act, False, h200) == pk.flat_config(big, False, act)
        assert pk.flat_config(big, True, act, True, h200) == pk.flat_config(big, True, act, True)


def test_silu_past_decode_sizes_takes_eight_warps_up_to_512k_outputs() -> None:
    """Sixteen tokens of 14336 or 28672: silu,
    quantizing or not, on 1024 over 8 warps; below 128K outputs and past 512K as before, and
    gelu and the quantization alone untouched."""
    for quant in (False, True):
        for total in (16 * 14336, 16 * 28672, GATES.silu_mid_outputs):
            assert pk.flat_config(total, False, pk.ACT_SILU, quant) == (1024, 8)
        assert pk.flat_config(GATES.decode_outputs, False, pk.ACT_SILU, quant) == (512, 8)
        assert pk.flat_config(GATES.silu_mid_outputs + 1, False, pk.ACT_SILU, quant) == (
            1024,
            4,
        )
    assert pk.flat_config(16 * 28672, False, pk.ACT_GELU) == (512, 4)
    assert sq.flat_config(16 * 28672, False) == (2048, 4)


def test_register_cap_only_for_plain_16_bit_norms_beyond_few_rows() -> None:
    many = NORMS.few_rows + 1
    assert nr.max_registers_for(many, nr.QUANT_NONE, 8192, False, 0.5, 2) == 32
    assert nr.max_registers_for(many, nr.QUANT_NONE, 8192, True, 4.0, 2) == 48
    # off the GPU (no L2 share), quantizing, few rows or 32-bit rows: the compiler's choice
    assert nr.max_registers_for(many, nr.QUANT_NONE, 8192, False, None, 2) is None
    assert nr.max_registers_for(many, nr.QUANT_STATIC, 8192, False, 0.5, 2) is None
    assert nr.max_registers_for(NORMS.few_rows, nr.QUANT_NONE, 8192, False, 0.5, 2) is None
    assert nr.max_registers_for(many, nr.QUANT_NONE, 8192, False, 0.5, 4) is None


def test_streamed_wide_rms_norm_capped_only_on_deep_load_cards() -> None:
    """rms_norm of 8192-wide 16-bit rows beyond the L2 takes the cap of 32 registers on a card
    of an H200's bandwidth per SM only; narrower rows, the fused add, an H100 keep theirs."""
    many = NORMS.few_rows + 1
    h100, h200 = H100_GBPS_PER_SM, H200_GBPS_PER_SM
    assert nr.max_registers_for(many, nr.QUANT_NONE, 8192, False, 3.0, 2, h200) == 32
    assert nr.max_registers_for(many, nr.QUANT_NONE, 8192, False, 3.0, 2, h100) is None
    assert nr.max_registers_for(many, nr.QUANT_NONE, 8192, False, 3.0, 2) is None
    assert nr.max_registers_for(many, nr.QUANT_NONE, 4096, False, 3.0, 2, h200) is None
    assert nr.max_registers_for(many, nr.QUANT_NONE, 8192, True, 3.0, 2, h200) == 48
    assert nr.max_registers_for(NORMS.few_rows, nr.QUANT_NONE, 8192, False, 3.0, 2, h200) is None
    # rows read again after their sum (`reload_for`) run uncapped
    assert nr.max_registers_for(many, nr.QUANT_NONE, 8192, False, 8.0, 2, h200) is None
    assert nr.max_registers_for(many, nr.QUANT_NONE, 8192, True, 8.0, 2, h200) is None
    assert nr.max_registers_for(many, nr.QUANT_NONE, 8192, True, 8.0, 2, h100) == 48


def test_rows_read_again_only_for_wide_plain_norms_far_beyond_l2_on_deep_cards() -> None:
    """Rows are read again after their sum only for 16-bit plain norms of 8192 or more beyond
    `few_rows` rows, whose footprint exceeds `reload_l2_share` L2 sizes, on an H200-like card."""
    many, far = NORMS.few_rows + 1, NORMS.reload_l2_share + 1.0
    h100, h200 = H100_GBPS_PER_SM, H200_GBPS_PER_SM
    assert nr.reload_for(many, nr.QUANT_NONE, 8192, far, 2, h200)
    assert nr.reload_for(many, nr.QUANT_NONE, 16384, far, 2, h200)
    assert not nr.reload_for(many, nr.QUANT_NONE, 8192, far, 2, h100)
    assert not nr.reload_for(many, nr.QUANT_NONE, 8192, far, 2, None)
    assert not nr.reload_for(many, nr.QUANT_NONE, 8192, NORMS.reload_l2_share, 2, h200)
    assert not nr.reload_for(many, nr.QUANT_NONE, 8192, None, 2, h200)
    assert not nr.reload_for(many, nr.QUANT_NONE, 4096, far, 2, h200)
    assert not nr.reload_for(many, nr.QUANT_NONE, 8192, far, 4, h200)
    assert not nr.reload_for(many, nr.QUANT_DYNAMIC, 8192, far, 2, h200)
    assert not nr.reload_for(NORMS.few_rows, nr.QUANT_NONE, 8192, far, 2, h200)


def test_masks_dropped_only_for_full_uncapped_rows_beside_a_weight_of_their_width() -> None:
    full = dict(same_width=True, capped=False)
    assert nr.full_row_for(8192, None, 8192, True, **full)
    assert nr.full_row_for(8192, 8192, 8192, True, **full)
    assert not nr.full_row_for(8000, None, 8192, True, **full)
    assert not nr.full_row_for(8192, 4096, 8192, True, **full)
    assert not nr.full_row_for(8192, None, 8192, False, **full)
    assert not nr.full_row_for(8192, None, 8192, True, same_width=False, capped=False)
    assert not nr.full_row_for(8192, None, 8192, True, same_width=True, capped=True)


def test_fused_add_loads_the_weight_late_only_beyond_few_rows_near_l2() -> None:
    many = NORMS.few_rows + 1
    assert not nr.early_weight_for(many, nr.QUANT_NONE, 4096, True, 0.6)
    assert nr.early_weight_for(many, nr.QUANT_NONE, 4096, True, 3.0)
    assert nr.early_weight_for(many, nr.QUANT_NONE, 4096, True, None)
    assert nr.early_weight_for(NORMS.few_rows, nr.QUANT_NONE, 4096, True, 0.6)


def test_evict_first_window() -> None:
    assert not nr.evict_first_for(None)
    assert not nr.evict_first_for(0.9)
    assert nr.evict_first_for(1.1)
    assert not nr.evict_first_for(NORMS.evict_first_l2_share + 0.01)
    assert nr.evict_first_for(NORMS.evict_first_l2_share + 0.01, residual=True)
    assert not nr.evict_first_for(NORMS.evict_first_l2_share_residual + 0.01, residual=True)


def test_norm_warps_follow_the_row_block_only() -> None:
    """The signature is the contract: warps set the reduction order, so no batch argument."""
    for block in (8, 1024, 2048, 4096, 8192, 16384):
        for quant in (nr.QUANT_NONE, nr.QUANT_STATIC, nr.QUANT_DYNAMIC):
            for residual in (False, True):
                warps = nr.norm_warps(block, quant, residual)
                assert warps in (1, 2, 4, 8, 16)


def test_rows_split_only_at_decode_sizes() -> None:
    sms, plain, static = 132, nr.QUANT_NONE, nr.QUANT_STATIC
    assert nr.split_for(1, 8192, plain, True, sms) == NORMS.row_split
    assert nr.split_for(16, 16384, plain, True, sms) == NORMS.row_split
    assert nr.split_for(16, 8192, static, True, sms) == NORMS.row_split
    assert nr.split_for(17, 8192, plain, True, sms) == 2
    assert nr.split_for(32, 8192, static, True, sms) == 2
    assert nr.split_for(33, 8192, plain, True, sms) == 1
    assert nr.split_for(8, 4096, plain, True, sms) == NORMS.row_split
    assert nr.split_for(9, 4096, plain, True, sms) == 2
    assert nr.split_for(16, 4096, plain, True, sms) == 2
    assert nr.split_for(17, 4096, plain, True, sms) == 1
    assert nr.split_for(4, 4096, static, True, sms, residual=True) == NORMS.row_split
    assert nr.split_for(5, 4096, static, True, sms, residual=True) == 2
    # the static-fp8 norm alone: two programs a 4096 row
    assert nr.split_for(1, 4096, static, True, sms) == 2
    assert nr.split_for(16, 4096, static, True, sms) == 2
    assert nr.split_for(17, 4096, static, True, sms) == 1
    assert nr.split_for(1, 2048, plain, True, sms) == 1
    # fewer SMs than programs: fewer programs a row
    assert nr.split_for(16, 8192, plain, True, 60) == 2
    assert nr.split_for(16, 8192, plain, True, 20) == 1
    # a dynamic scale, its peak taken in the sum's reduction, runs fastest unshared
    for rows_, block in ((1, 8192), (16, 8192), (4, 4096), (8, 4096), (1, 16384)):
        assert nr.split_for(rows_, block, nr.QUANT_DYNAMIC, True, sms) == 1
    # looped rows or off the GPU: one program a row
    assert nr.split_for(1, 32768, plain, False, sms) == 1
    assert nr.split_for(1, 8192, plain, True, None) == 1


def test_in_place_rows_are_never_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    """A program sharing a row reads all of it: in place, it could read a slice another program
    has already overwritten."""
    monkeypatch.setattr(nr, "sm_count", lambda t: 132)
    x, r = torch.randn(2, 8192), torch.randn(2, 8192)
    out, res = torch.empty_like(x), torch.empty_like(x)
    assert nr.row_split(x, out, r, res, 8192, nr.QUANT_NONE, True) == NORMS.row_split
    assert nr.row_split(x, x, r, r, 8192, nr.QUANT_NONE, True) == 1
    assert nr.row_split(x, x[:1], None, None, 8192, nr.QUANT_NONE, True) == 1


def test_unaligned_rows_are_never_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton lays a row out by its alignment, so a split of unaligned rows could sum them in
    another order than one program a row does."""
    monkeypatch.setattr(nr, "sm_count", lambda t: 132)
    base = torch.randn(2 * 8200)
    out = torch.empty(2, 8192)
    aligned = base[: 2 * 8192].view(2, 8192)
    rows_8200_apart = base.as_strided((2, 8192), (8200, 1))
    one_element_in = base[1 : 1 + 2 * 8192].view(2, 8192)
    assert nr.row_split(aligned, out, None, None, 8192, nr.QUANT_NONE, True) == NORMS.row_split
    assert nr.row_split(rows_8200_apart, out, None, None, 8192, nr.QUANT_NONE, True) == 1
    assert nr.row_split(one_element_in, out, None, None, 8192, nr.QUANT_NONE, True) == 1


def test_rows_spread_over_clusters_only_for_the_fused_adds_and_dynamic_norm_at_decode_sizes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`cluster_for`: 16-bit rows of `wide_norm_width` that fill their block beside a weight,
    up to `max_rows` rows, every tensor aligned, in place too (plain rms_norm past
    `plain_norm_past_rows` rows); never where clusters do not launch (as here, off the GPU) or under
    programmatic launch."""
    from ir_kernels_triton import launch

    block, plain, static, dynamic = (
        CLUSTERS.wide_norm_width,
        nr.QUANT_NONE,
        nr.QUANT_STATIC,
        nr.QUANT_DYNAMIC,
    )

    def rows(n: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        return torch.randn(n, block, dtype=dtype)

    x, r, w = rows(16), rows(16), torch.randn(block, dtype=torch.bfloat16)
    out, res = torch.empty_like(x), torch.empty_like(x)
    assert nr.cluster_for(x, w, out, r, res, block, plain, True) == 1  # no GPU here
    monkeypatch.setattr(nr, "cluster_launches", lambda t: True)
    assert nr.cluster_for(x, w, out, r, res, block, plain, True) == CLUSTERS.norm_blocks
    assert nr.cluster_for(x, w, x, r, r, block, plain, True) == CLUSTERS.norm_blocks  # in place
    assert nr.cluster_for(x, w, out, r, res, block, static, True) == CLUSTERS.norm_blocks
    assert nr.cluster_for(x, w, out, None, None, block, dynamic, True) == CLUSTERS.norm_blocks
    assert nr.cluster_for(x, w, out, r, res, block, dynamic, True) == CLUSTERS.norm_blocks
    assert (
        nr.cluster_for(rows(1), w, out[:1], None, None, block, dynamic, True)
        == CLUSTERS.norm_blocks
    )
    # plain rms_norm past `plain_norm_past_rows` rows (its warps send their own sums); the static
    # norm keeps the split
    assert nr.cluster_for(x, w, out, None, None, block, plain, True) == CLUSTERS.norm_blocks
    n = CLUSTERS.plain_norm_past_rows
    assert nr.cluster_for(x[:n], w, out[:n], None, None, block, plain, True) == 1
    assert nr.cluster_for(x[: n + 1], w, out[: n + 1], None, None, block, plain, True) > 1
    assert nr.cluster_for(x, w, out, None, None, block, static, True) == 1
    # past decode sizes, other widths or dtypes, no weight, masked rows, unaligned tensors
    big = rows(CLUSTERS.max_rows + 1)
    assert nr.cluster_for(big, w, big, big, big, block, plain, True) == 1
    assert nr.cluster_for(x, w, out, r, res, 2048, plain, True) == 1
    x32 = rows(16, torch.float32)
    assert nr.cluster_for(x32, w.float(), x32, x32, x32, block, plain, True) == 1
    assert nr.cluster_for(x, None, out, r, res, block, plain, True) == 1
    assert nr.cluster_for(x, w, out, r, res, block, plain, False) == 1
    shifted = torch.randn(16 * block + 1, dtype=torch.bfloat16)[1:].view(16, block)
    assert nr.cluster_for(x, w, out, shifted, res, block, plain, True) == 1
    with launch.programmatic_launch(True):
        assert nr.cluster_for(x, w, out, r, res, block, plain, True) == 1


def test_rows_of_4096_spread_only_where_the_split_cannot_serve_them_well(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`cluster_for` at 4096 wide: the plain fused add only in place (out of place the split
    leads), its static-fp8 form past `split_rows_fp8` rows (where the split takes two programs a
    row); never the dynamic-fp8 or plain norms."""
    monkeypatch.setattr(nr, "cluster_launches", lambda t: True)
    block, plain, static, dynamic = 4096, nr.QUANT_NONE, nr.QUANT_STATIC, nr.QUANT_DYNAMIC
    assert block in CLUSTERS.norm_widths
    assert block < CLUSTERS.wide_norm_width
    x, r = (torch.randn(16, block, dtype=torch.bfloat16) for _ in range(2))
    w = torch.randn(block, dtype=torch.bfloat16)
    out, res = torch.empty_like(x), torch.empty_like(x)
    q = torch.empty(16, block, dtype=torch.float8_e4m3fn)
    assert nr.spreads_only_in_place(block, plain, True)
    assert not nr.spreads_only_in_place(CLUSTERS.wide_norm_width, plain, True)
    assert not nr.spreads_only_in_place(2048, plain, True)  # never spread
    assert not nr.spreads_only_in_place(block, static, True)
    assert nr.cluster_for(x, w, out, r, res, block, plain, True) == 1
    assert nr.cluster_for(x, w, x, r, r, block, plain, True) == CLUSTERS.norm_blocks  # in place
    assert nr.cluster_for(x[:1], w, x[:1], r[:1], r[:1], block, plain, True) == CLUSTERS.norm_blocks
    assert nr.cluster_for(x, w, q, r, res, block, static, True) == CLUSTERS.norm_blocks
    n = NORMS.split_rows_fp8  # the split's four programs a row serve these
    assert nr.cluster_for(x[:n], w, q[:n], r[:n], res[:n], block, static, True) == 1
    assert nr.cluster_for(x, w, q, None, None, block, static, True) == 1
    assert nr.cluster_for(x, w, q, None, None, block, dynamic, True) == 1
    assert nr.cluster_for(x, w, q, r, res, block, dynamic, True) == 1
    assert nr.cluster_for(x, w, out, None, None, block, plain, True) == 1


def test_launch_rejects_a_bad_cluster() -> None:
    """More than one block a row only where `cluster_for`'s conditions on the rows hold, and on
    a GPU where clusters launch (not here)."""
    x = torch.randn(2, CLUSTERS.wide_norm_width, dtype=torch.bfloat16)
    w = torch.randn(CLUSTERS.wide_norm_width, dtype=torch.bfloat16)
    for cluster in (3, 16, *cn.CLUSTER_SIZES):
        with pytest.raises(ValueError, match=f"cluster={cluster}"):
            nk.launch_norm(x, w, 1e-6, None, torch.empty_like(x), cluster=cluster)


def test_launch_rejects_more_blocks_a_row_than_it_has_warps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cluster's blocks split a row's warps: the dynamic-fp8 norm's rows of 4096 have 4, so
    eight blocks are a ValueError naming the count, even where clusters launch."""
    monkeypatch.setattr(nr, "cluster_launches", lambda t: True)
    x = torch.randn(2, 4096, dtype=torch.bfloat16)
    w = torch.randn(4096, dtype=torch.bfloat16)
    q = torch.empty(2, 4096, dtype=torch.float8_e4m3fn)
    assert nr.norm_warps(4096, nr.QUANT_DYNAMIC) == 4
    with pytest.raises(ValueError, match=r"cluster=8: .*divides the row's warps \(4\)"):
        nk.launch_norm(
            x, w, 1e-6, None, q, quant=nr.QUANT_DYNAMIC, scale_out=torch.empty(2, 1), cluster=8
        )


def test_dynamic_quant_rows_spread_over_clusters_only_at_decode_sizes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`quant_cluster_for`: 16-bit rows of a width in `quant_widths`, up to
    `max_rows` rows, 16-byte aligned; never where clusters do not launch (as here, off the
    GPU) or under programmatic launch."""
    from ir_kernels_triton import launch

    (width,) = sorted(CLUSTERS.quant_widths)[-1:]
    x = torch.randn(16, width, dtype=torch.bfloat16)
    q = torch.empty(16, width, dtype=torch.float8_e4m3fn)
    assert dq.quant_cluster_for(x, q) == 1  # no GPU here
    monkeypatch.setattr(dq, "cluster_launches", lambda t: True)
    assert dq.quant_cluster_for(x, q) == CLUSTERS.quant_blocks
    assert dq.quant_cluster_for(x[:1], q[:1]) == CLUSTERS.quant_blocks
    big = torch.randn(CLUSTERS.max_rows + 1, width, dtype=torch.bfloat16)
    assert dq.quant_cluster_for(big, torch.empty_like(big, dtype=q.dtype)) == 1
    assert dq.quant_cluster_for(x.float(), q) == 1
    narrow = torch.randn(16, 1024, dtype=torch.bfloat16)
    assert dq.quant_cluster_for(narrow, q[:, :1024]) == 1
    shifted = torch.randn(16 * width + 1, dtype=torch.bfloat16)[1:].view(16, width)
    assert dq.quant_cluster_for(shifted, q) == 1
    # 16-byte steps that Triton does not specialize (a stride of 8 elements past the width)
    padded = torch.randn(16, width + 8, dtype=torch.bfloat16)[:, :width]
    assert dq.quant_cluster_for(padded, q) == 1
    with launch.programmatic_launch(True):
        assert dq.quant_cluster_for(x, q) == 1


def test_dynamic_quant_launch_rejects_a_bad_cluster() -> None:
    """More than one block a row only in `CLUSTER_SIZES`, for aligned 16-bit rows of a
    power-of-two width on a GPU where clusters launch (not here)."""
    x = torch.randn(2, 8192, dtype=torch.bfloat16)
    q = torch.empty(2, 8192, dtype=torch.float8_e4m3fn)
    scale = torch.empty(2, 1)
    for cluster in (3, 16, *cn.CLUSTER_SIZES):
        with pytest.raises(ValueError, match=f"cluster={cluster}"):
            dq.launch_dynamic_quant(x, None, q, scale, cluster=cluster)


def test_launch_rejects_a_bad_split() -> None:
    x = torch.randn(2, 64)
    with pytest.raises(ValueError, match="split=3"):
        nk.launch_norm(x, None, 1e-6, None, torch.empty_like(x), split=3)


@pytest.mark.parametrize("hidden", [2048, 4096, 8192])
def test_group_quant_streamed_rows_follow_the_cards_bandwidth(hidden: int) -> None:
    """One vector a thread where an H100's bandwidth per SM is enough, whole rows a program
    where more must be in flight; rows within the L2 and unknown cards keep the batch rule."""
    groups = hidden // 128
    on_h100 = gq.group_quant_config(16384, groups, 128, True, H100_GBPS_PER_SM)
    on_h200 = gq.group_quant_config(16384, groups, 128, True, H200_GBPS_PER_SM)
    assert on_h100 == (8, 4)
    assert on_h200 == (groups, warps_for(hidden))
    for streamed, gbps in ((False, H200_GBPS_PER_SM), (False, H100_GBPS_PER_SM), (True, None)):
        expected = (8, 4) if groups <= 16 else (32, 8)
        assert gq.group_quant_config(16384, groups, 128, streamed, gbps) == expected
    for few in (1, 16, 17, 1024):
        assert gq.group_quant_config(few, groups, 128, True, H200_GBPS_PER_SM) == (
            gq.group_quant_config(few, groups, 128)
        )


def test_group_quant_whole_rows_stop_at_8192_elements() -> None:
    assert gq.group_quant_config(16384, 512, 128, True, H200_GBPS_PER_SM) == (64, 16)
    assert gq.group_quant_config(16384, 3, 128, True, H200_GBPS_PER_SM) == (4, 1)


def test_dram_bandwidth_per_sm_from_the_reported_clocks() -> None:
    import types

    from ir_kernels_triton.launch import device

    h100 = types.SimpleNamespace(
        memory_clock_rate=2_619_000, memory_bus_width=5120, multi_processor_count=132
    )
    assert device.gbps_per_sm_of(h100) == pytest.approx(25.4, abs=0.1)
    no_clock = types.SimpleNamespace(
        memory_clock_rate=0, memory_bus_width=5120, multi_processor_count=132
    )
    assert device.gbps_per_sm_of(no_clock) is None
    assert device.dram_gbps_per_sm(torch.empty(1)) is None  # off the GPU


def record_bandwidth_queries(monkeypatch: pytest.MonkeyPatch, *modules: Any) -> list[torch.Tensor]:
    """The tensors `modules` ask `dram_gbps_per_sm` about from now on (each answered with an
    H200's bandwidth), with launch plans off: a plan recorded by an earlier test replays its
    launch without the rules (on a GPU, where plans run)."""
    from ir_kernels_triton.launch import plans

    asked: list[torch.Tensor] = []

    def bandwidth(t: torch.Tensor) -> float:
        asked.append(t)
        return H200_GBPS_PER_SM

    for module in modules:
        monkeypatch.setattr(module, "dram_gbps_per_sm", bandwidth)
    monkeypatch.setattr(plans, "_enabled", False)
    return asked


@pytest.mark.parametrize(
    ("rows", "share"), [(2, 8.0), (NORMS.few_rows + 1, 0.5), (NORMS.few_rows + 1, 8.0)]
)
def test_norm_asks_the_card_bandwidth_only_for_streamed_batches(
    monkeypatch: pytest.MonkeyPatch, rows: int, share: float
) -> None:
    """rms_norm asks the card's bandwidth (for its register cap) only beyond `few_rows` rows
    whose footprint exceeds the L2: never at decode sizes, where a query costs replayed time."""
    asked = record_bandwidth_queries(monkeypatch, nk)
    monkeypatch.setattr(nk, "footprint_share", lambda t, footprint: share)
    x = torch.randn(rows, 64, dtype=torch.float16, device=DEVICE)
    out = torch.empty_like(x)
    nk.launch_norm(x, torch.ones(64, dtype=torch.float16, device=DEVICE), 1e-6, None, out)
    torch.testing.assert_close(out, torch.nn.functional.rms_norm(x, (64,), eps=1e-6))
    assert len(asked) == (1 if rows > NORMS.few_rows and share > 1.0 else 0)


@pytest.mark.parametrize("share", [3.0, NORMS.reload_l2_share + 1.0])
def test_fused_add_asks_the_card_bandwidth_only_far_beyond_l2(
    monkeypatch: pytest.MonkeyPatch, share: float
) -> None:
    """With a residual the bandwidth matters only for reading rows again (`reload_for`)."""
    asked = record_bandwidth_queries(monkeypatch, nk)
    monkeypatch.setattr(nk, "footprint_share", lambda t, footprint: share)
    rows = NORMS.few_rows + 1
    x = torch.randn(rows, 64, dtype=torch.float16, device=DEVICE)
    r = torch.randn_like(x)
    out, res = torch.empty_like(x), torch.empty_like(x)
    w = torch.ones(64, dtype=torch.float16, device=DEVICE)
    nk.launch_norm(x, w, 1e-6, None, out, residual=r, residual_out=res)
    torch.testing.assert_close(res, x + r)
    assert len(asked) == (1 if share > NORMS.reload_l2_share else 0)


@pytest.mark.parametrize("streamed", [False, True])
def test_card_bandwidth_asked_only_for_streamed_launches(
    monkeypatch: pytest.MonkeyPatch, streamed: bool
) -> None:
    """The gated and group-quant launches ask the card's bandwidth only where their rule reads
    it (rows streamed from DRAM): even a cached answer costs a visible share of a decode-size
    launch."""
    asked = record_bandwidth_queries(monkeypatch, pk, gq)
    for module in (pk, gq):
        monkeypatch.setattr(module, "streams_from_dram", lambda t, footprint: streamed)
    x = torch.randn(2, 256, device=DEVICE)
    pk.launch_gated(x, torch.empty(2, 128, device=DEVICE), pk.ACT_SILU)
    q = torch.empty(2, 256, dtype=torch.float8_e4m3fn, device=DEVICE)
    gq.launch_group_quant(x, 128, q, torch.empty(2, 2, device=DEVICE))
    assert len(asked) == (2 if streamed else 0)
    # a configuration passed in skips the rule and its query
    pk.launch_gated(x, torch.empty(2, 128, device=DEVICE), pk.ACT_SILU, flat=(128, 1))
    assert len(asked) == (2 if streamed else 0)


@pytest.mark.parametrize(
    ("act", "width"), [(pk.ACT_SILU, 1000), (pk.ACT_GELU, 1000), (pk.ACT_GELU, 8192)]
)
def test_streamed_gates_on_a_deep_card_match_the_reference(
    monkeypatch: pytest.MonkeyPatch, act: int, width: int
) -> None:
    """The launch a card of the deep-loads class takes for streamed gates (1024
    over 4 warps) gives the reference's results."""
    import torch.nn.functional as F

    monkeypatch.setattr(pk, "dram_gbps_per_sm", lambda t: H200_GBPS_PER_SM)
    monkeypatch.setattr(pk, "streams_from_dram", lambda t, footprint: True)
    x = torch.randn(3, 2 * width, device=DEVICE)
    out = torch.empty(3, width, device=DEVICE)
    pk.launch_gated(x, out, act)
    gate, up = x[:, :width], x[:, width:]
    expected = (F.silu(gate) if act == pk.ACT_SILU else F.gelu(gate)) * up
    torch.testing.assert_close(out, expected)


def _run_combine(asm: str, slots: list[float]) -> list[float]:
    """`combine_asm`'s PTX run on `slots` in float32: its loads, adds, maxima (``max.NaN``,
    NaN if either is) and moves; any other instruction is an error."""
    import re

    import numpy as np

    regs: dict[str, np.float32] = {}
    out: list[float] = [0.0, 0.0]
    for line in asm.split("\n"):
        line = line.strip().rstrip(";")
        if line.startswith("ld.shared"):
            names = re.findall(r"v\d+", line[line.index("{") : line.index("}")])
            start = int(re.search(r"slots\+(\d+)", line).group(1)) // 4  # type: ignore[union-attr]
            for k, name in enumerate(names):
                regs[name] = np.float32(slots[start + k])
        elif line.startswith(("add.f32", "max.NaN.f32")):
            dst, a, b = (x.strip() for x in line.split(None, 1)[1].split(","))
            op = np.add if line.startswith("add") else np.maximum
            regs[dst] = np.float32(op(regs[a], regs[b]))
        elif line.startswith("mov.f32"):
            dst, src = (x.strip() for x in line.split(None, 1)[1].split(","))
            out[int(dst[1:])] = float(regs[src])
        else:
            raise AssertionError(f"combine_asm: an instruction the test does not run: {line}")
    return out


@pytest.mark.parametrize("clusters", [2, 4, 8])
@pytest.mark.parametrize("pair", [False, True])
def test_cluster_exchange_adds_in_the_one_program_butterfly_order(
    clusters: int, pair: bool
) -> None:
    """The blocks' partials are added as the last steps of the one-program kernel's warp
    butterfly (slot i takes slot i + d, d halving down to 1), in float32: the row's bits."""
    import numpy as np

    rng = np.random.default_rng(clusters)
    # partials whose float32 sum depends on the order: for four, (p0 + p2) + (p1 + p3) = 2
    # while ((p0 + p1) + p2) + p3 = 1; for eight, the butterfly gives 4 and a chain 1
    sums = (
        [1e8, 1.0, -1e8, 1.0] * (clusters // 4)
        if clusters >= 4
        else [float(np.float32(v)) for v in rng.standard_normal(clusters)]
    )
    peaks = [float(np.float32(abs(v))) for v in rng.standard_normal(clusters)]
    slots = [v for pair_ in zip(sums, peaks, strict=True) for v in pair_] if pair else sums
    got = _run_combine(cn.combine_asm(clusters, pair), slots)
    level = [np.float32(v) for v in sums]
    step = clusters // 2
    while step:
        level = [np.float32(level[i] + level[i + step]) for i in range(step)]
        step //= 2
    assert got[0] == float(level[0])
    if pair:
        assert got[1] == max(peaks)


@pytest.mark.parametrize("clusters", [2, 4, 8])
@pytest.mark.parametrize("nan_slot", [0, -1])
def test_cluster_exchange_peaks_keep_a_nan(clusters: int, nan_slot: int) -> None:
    """A block's NaN peak makes the row's peak NaN, as ``amax`` does (PTX ``max.f32`` would
    drop it), in the pair exchange of the dynamic norm and the peak exchange of the quant."""
    import math

    peaks = [float(i + 1) for i in range(clusters)]
    peaks[nan_slot] = math.nan
    pairs = [v for peak in peaks for v in (1.0, peak)]
    assert math.isnan(_run_combine(cn.combine_asm(clusters, True), pairs)[1])
    assert math.isnan(_run_combine(cn.combine_asm(clusters, False, peak=True), peaks)[0])


def test_warps_send_their_own_sums_only_where_a_block_holds_several() -> None:
    """`sum_by_warps`: the warp-sum exchange for blocks of two or more warps (the fused adds'
    16-warp rows over eight blocks), each thread's elements packed whole; none for blocks of
    one warp, whose own reduction is shuffles alone; more warps than slots is a ValueError."""

    kwargs = cn.sum_by_warps(8, 16, 8192)
    pack = 8192 // (32 * 16)
    assert set(kwargs) == {"SUM_ASM", "SUM_CONSTRAINTS"}
    assert kwargs["SUM_CONSTRAINTS"].split(",") == ["=f"] * pack + ["f"] * (3 * pack)
    assert cn.sum_by_warps(4, 16, 4096)["SUM_CONSTRAINTS"].count("=f") == 8
    assert cn.sum_by_warps(8, 8, 8192) == {}  # one warp a block
    assert cn.sum_by_warps(8, 4, 4096) == {}
    with pytest.raises(ValueError, match="row_warps=32"):
        cn.warp_sum_asm(8, 32, 16)  # 32 slots do not fit the exchange's shared array
    with pytest.raises(ValueError, match="clusters=3"):
        cn.warp_sum_asm(3, 12, 16)


def test_warp_sum_asm_sums_in_the_one_program_order() -> None:
    """The warp-sum PTX squares the thread's values in register order (the first rounded, then
    fused multiply-adds, as Triton 3.6 compiles ``tl.sum(x * x)``), reduces the lanes by the
    butterfly 16, 8, ..., 1, sends to the slot of the warp's index in one program a row,
    expects every warp's four bytes, adds the slots in the tree's order (`combine_asm`) and
    ends in the one-program kernel's ``div.full``, ``add``, ``rsqrt.approx.ftz``."""

    clusters, warps, pack = 8, 16, 16
    lines = [line.strip() for line in cn.warp_sum_asm(clusters, warps, pack).split("\n")]
    chain = [line for line in lines if line.startswith(("mul.f32 acc", "fma.rn.f32 acc"))]
    assert chain[0] == f"mul.f32 acc, ${pack}, ${pack};"
    assert chain[1:] == [f"fma.rn.f32 acc, ${k}, ${k}, acc;" for k in range(pack + 1, 2 * pack)]
    shuffles = [int(line.split(",")[2]) for line in lines if line.startswith("shfl.sync.bfly")]
    assert shuffles == [16, 8, 4, 2, 1]
    assert f"mad.lo.u32 warp, warp, {clusters}, rank;" in lines
    assert any(line.endswith(f"[bar], {4 * warps};") for line in lines)
    combine = cn.combine_asm(warps, False, sum_to="total").split("\n")
    start = lines.index(combine[0].strip())
    assert lines[start : start + len(combine)] == [line.strip() for line in combine]
    tail = lines[start + len(combine) : start + len(combine) + 3]
    assert tail == [
        f"div.full.f32 inv, total, ${2 * pack};",
        f"add.f32 inv, inv, ${3 * pack};",
        "rsqrt.approx.ftz.f32 inv, inv;",
    ]
    assert [line for line in lines if line.startswith("mov.f32 $")] == [
        f"mov.f32 ${k}, inv;" for k in range(pack)
    ]


def test_cluster_launch_asks_only_a_known_kernel_form_for_clusters() -> None:
    """`_ask_for_clusters` rewrites Triton's packed launch metadata (warps, blocks a cluster,
    shared bytes), keeping the kernel's own shared bytes (the exchange's are declared in its
    PTX), and refuses a kernel in another form."""
    import types

    def kernel(packed: object) -> types.SimpleNamespace:
        return types.SimpleNamespace(packed_metadata=packed)

    fine = kernel((2, 1, 16))
    assert cn._ask_for_clusters(fine, 4)
    assert fine.packed_metadata == (2, 4, 16)
    assert cn._ask_for_clusters(fine, 4)  # again: unchanged
    assert fine.packed_metadata == (2, 4, 16)
    one_warp = kernel((1, 1, 0))
    assert cn._ask_for_clusters(one_warp, 8)
    assert one_warp.packed_metadata == (1, 8, 0)
    for other in (kernel((2, 1, 16, 0)), kernel([2, 1, 16]), kernel((2, 2, 16))):
        before = other.packed_metadata
        assert not cn._ask_for_clusters(other, 4)
        assert other.packed_metadata == before


@pytest.mark.parametrize("head_size", [64, 128, 256, 769])
def test_qk_norm_tiles_follow_the_head_size(head_size: int) -> None:
    """A QK-norm tile (which orders each head's sum) is a power of two of heads whose pair
    halves fill about `tuning.QkNorm.tile_elements`, never more than the row's heads need; the
    batch does not enter it."""
    from ir_kernels_triton.rotary.kernel import rotary_head_block
    from ir_kernels_triton.rotary.qk_norm import qk_norm_tile_heads

    half_block = next_power_of_2(head_size // 2)
    for heads in (1, 3, 8, 32, 64):
        tile = qk_norm_tile_heads(head_size, head_size - head_size % 2, heads)
        assert tile & (tile - 1) == 0
        assert tile <= next_power_of_2(heads)
        assert tile == 1 or tile * half_block <= tuning.COMMON.qk_norm.tile_elements
        for tokens in (1, 64, 4096):  # a program takes whole tiles
            assert max(rotary_head_block(tokens, heads), tile) % tile == 0


@pytest.mark.parametrize(
    ("hidden", "group", "one_pass"),
    [(256, 64, True), (4096, 128, True), (769, 769, True), (16384, 128, True), (16400, 16, False)],
)
def test_group_norm_tiles_hold_whole_groups(hidden: int, group: int, one_pass: bool) -> None:
    """The group norm's tile: the whole row where it fits `tuning.Rows.max_single_pass`, else
    chunks of whole groups of about `loop_block` elements; from the width and group alone."""
    from ir_kernels_triton.norms.group import group_norm_config

    rows = tuning.COMMON.rows
    groups_block, group_block, single = group_norm_config(hidden, group)
    assert single == one_pass
    assert group_block == next_power_of_2(group)
    assert groups_block & (groups_block - 1) == 0
    if single:
        assert groups_block * group <= next_power_of_2(hidden // group) * group_block
        assert groups_block * group_block <= rows.max_single_pass
        assert groups_block >= hidden // group
    else:
        assert groups_block * group_block == max(rows.loop_block, group_block)


def test_cache_write_launch_is_launchable() -> None:
    table = tuning.COMMON.kv_cache
    assert_launchable(table.block, table.warps)
