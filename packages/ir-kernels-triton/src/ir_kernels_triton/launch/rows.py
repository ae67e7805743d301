"""How the kernels address rows: a tensor as ``[rows, hidden]``, the alignment Triton
specializes, an op's footprint against the L2, and the grids of the elementwise kernels.

Every kernel is row-wise: a row's result never depends on other rows. Where a choice changes
the order of a row's arithmetic (the warps of a reduction), it follows the row width alone, so
the results are batch-invariant.
"""

import torch
import triton
import triton.language as tl

from ir_spec import row_view

from . import tuning
from .device import l2_cache_bytes

#: Largest index the flat kernels address with 32-bit arithmetic.
FLAT_INDEX_LIMIT = 2**31


def row_stride(t: torch.Tensor) -> int | None:
    """The stride between rows when `t`'s leading dimensions collapse into one row index and
    its last dimension is contiguous (`ir_spec.row_view`); None when the kernels cannot
    address it."""
    view = row_view(t)
    if view is None:
        return None
    return t.shape[-1] if t.dim() == 1 else int(view.stride(0))


def head_rows(t: torch.Tensor) -> tuple[int, int, int] | None:
    """``(token stride, heads, head stride)`` of per-head rows that one row stride cannot
    address: `t` is ``[..., heads, head_size]`` with its last dimension contiguous and its
    dimensions before the heads collapsing into one token index, while the heads do not
    collapse into the tokens (a query's heads in a packed ``qkv`` projection, normalized head
    by head). Row ``r`` starts at ``(r // heads) * token_stride + (r % heads) * head_stride``.
    None for any other layout, including those `row_stride` addresses."""
    if t.dim() < 3 or (t.shape[-1] > 1 and t.stride(-1) != 1) or row_stride(t) is not None:
        return None
    try:
        # a fake tensor (implementation selection under compile) raises ValueError
        view = t.view(-1, t.shape[-2], t.shape[-1])
    except (RuntimeError, ValueError):
        return None
    return int(view.stride(0)), int(t.shape[-2]), int(view.stride(1))


def rows(t: torch.Tensor) -> torch.Tensor:
    """`t` viewed as ``[rows, hidden]`` (callers checked `row_stride` first)."""
    return t.view(-1, t.shape[-1])


def rows_aligned(*tensors: torch.Tensor) -> bool:
    """Whether Triton specializes the rows of every tensor as 16-byte aligned (its address
    and row stride, in elements, multiples of 16): only such rows may be shared among programs
    or blocks (the norms' split and clusters, dynamic quant's clusters)."""
    return all((t2 := rows(t)).data_ptr() % 16 == 0 and t2.stride(0) % 16 == 0 for t in tensors)


def num_rows(t: torch.Tensor) -> int:
    """Number of rows (product of the leading dimensions)."""
    return t.numel() // t.shape[-1] if t.shape[-1] else 0


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= max(n, 1)."""
    return 1 << max(n - 1, 0).bit_length()


def warps_for(block: int) -> int:
    """Warps per program for a row block of `block` elements (depends on the width only, so
    results never depend on the batch): one a `tuning.Rows.elements_per_warp` elements, at
    most `tuning.Rows.max_warps`."""
    table = tuning.COMMON.rows
    return max(1, min(table.max_warps, block // table.elements_per_warp))


def tensor_bytes(*tensors: torch.Tensor | None) -> int:
    """Bytes of the given tensors (None counts nothing): an op's footprint when each is read or
    written once; pass a tensor twice for one read and one write in place."""
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def footprint_share(t: torch.Tensor, footprint: int) -> float | None:
    """`footprint` bytes as a multiple of the L2 size of the GPU holding `t` (None off it)."""
    l2 = l2_cache_bytes(t)
    return None if l2 is None else footprint / l2


def streams_from_dram(t: torch.Tensor, footprint: int) -> bool:
    """An op on `t` reading and writing `footprint` bytes cannot keep them in L2 between calls."""
    share = footprint_share(t, footprint)
    return share is not None and share > 1.0


def pointwise_config(
    rows_: int, width: int, compute_heavy: bool, fp8_out: bool = False
) -> tuple[int, int]:
    """(block, warps) of an elementwise row-block kernel (rows that are not contiguous;
    `tuning.RowBlocks`). Elementwise results do not depend on the configuration, so it may
    follow the number of rows: few rows favour latency (small blocks, many programs); past
    them the gates heavier to compute (`compute_heavy`) and fp8 outputs take fewer warps."""
    table = tuning.COMMON.row_blocks
    if rows_ <= table.few_rows:
        return min(table.few_block, next_power_of_2(width)), table.few_warps
    warps = table.warps_heavy if compute_heavy else (table.warps_fp8 if fp8_out else table.warps)
    return min(table.block, next_power_of_2(width)), warps


@triton.jit
def _row_block(width, BLOCK: tl.constexpr):
    """(row, column offsets, mask) of this program in a flat grid of rows x column blocks, a
    row's blocks on consecutive programs (DRAM locality, as Inductor lays them out)."""
    pid = tl.program_id(0)
    blocks_per_row = tl.cdiv(width, BLOCK)
    row = (pid // blocks_per_row).to(tl.int64)
    offs = (pid % blocks_per_row) * BLOCK + tl.arange(0, BLOCK)
    return row, offs, offs < width
