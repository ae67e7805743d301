"""All-reduce + RMSNorm (+ residual add, + static fp8 quantization) in one kernel over torch
symmetric memory (``torch.distributed._symmetric_memory``).

Each rank keeps one symmetric buffer per process group and device, allocated and exchanged
(``rendezvous``) on the first call: every rank can then read every other rank's buffer
through a table of device pointers. A call copies its ``x`` into its own buffer and waits at a
barrier of the group; then, by the message size (`select_path`):

- **one-shot** (up to `ONE_SHOT_MAX_BYTES`): one kernel where each row's program reads that
  row from every rank's buffer, sums in float32, rounds the sum to ``x.dtype`` (as the
  composition's all-reduce does), adds the residual, normalizes and quantizes, writing this
  rank's results. Every rank reduces every row: the fewest steps, the most reads.
- **two-shot** (up to `TWO_SHOT_MAX_BYTES`): the same kernel on this rank's block of rows,
  writing into the output region of its own buffer; after a barrier a copy kernel gathers
  every rank's block of results. Each row is reduced once, on one rank.

A last barrier keeps a rank from overwriting its buffer while another still reads it. Above
`TWO_SHOT_MAX_BYTES`, off CUDA, without symmetric memory in this torch, or over a group whose
backend is not NCCL, the implementation falls back to the IR ``all_reduce`` (NCCL, or gloo)
followed by this package's norm kernels, and logs why once per reason.

The buffer is allocated on the first call: a CUDA graph captures calls only after a warm-up
call (as ir-piecewise's warm-up runs do). Every rank must take the same path, which holds as
the path depends on the message size, the group and the device type only.
"""

import functools
import logging
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor

from ir_spec import ops, process_groups

from ..launch.device import interpreting
from ..norms.kernel import launch_norm
from ..norms.rules import QUANT_NONE, QUANT_STATIC
from ..quant.fp8 import quantize

logger = logging.getLogger("ir_kernels_triton")

#: the largest message (bytes of one rank's ``x``) reduced one-shot
ONE_SHOT_MAX_BYTES = 512 * 1024
#: the largest message reduced two-shot; above, NCCL's all-reduce and the norm kernels run
TWO_SHOT_MAX_BYTES = 16 * 1024 * 1024
ONE_SHOT, TWO_SHOT, FALLBACK = "one_shot", "two_shot", "fallback"
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class Path:
    """How one call runs: `kind` is `ONE_SHOT`, `TWO_SHOT` or `FALLBACK`; `reason` says why."""

    kind: str
    reason: str


def select_path(nbytes: int, world: int, unavailable: str = "") -> Path:
    """The path of a message of `nbytes` bytes (one rank's ``x``) over `world` ranks;
    `unavailable` is why symmetric memory cannot serve this call (`unavailable_reason`), or
    ``""``."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise ValueError(f"select_path: nbytes={nbytes!r}, expected a byte count >= 0")
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        raise ValueError(f"select_path: world={world!r}, expected a positive number of ranks")
    if unavailable:
        return Path(FALLBACK, unavailable)
    if nbytes <= ONE_SHOT_MAX_BYTES:
        return Path(ONE_SHOT, f"{nbytes} bytes <= {ONE_SHOT_MAX_BYTES} (one-shot limit)")
    if nbytes <= TWO_SHOT_MAX_BYTES:
        return Path(TWO_SHOT, f"{nbytes} bytes <= {TWO_SHOT_MAX_BYTES} (two-shot limit)")
    return Path(
        FALLBACK,
        f"{nbytes} bytes above the symmetric buffer's {TWO_SHOT_MAX_BYTES}: NCCL all-reduce "
        "and the norm kernels",
    )


@functools.cache
def _symm_mem_reason() -> str:
    try:
        import torch.distributed._symmetric_memory as symm_mem
    except ImportError as error:  # pragma: no cover - present in the supported torch versions
        return f"torch.distributed._symmetric_memory does not import ({error})"
    if not all(hasattr(symm_mem, name) for name in ("empty", "rendezvous")):
        return f"this torch ({torch.__version__}) has no symmetric-memory empty / rendezvous"
    return ""


def unavailable_reason(x: Tensor, group_name: str) -> str:
    """Why symmetric memory cannot serve `x` over group `group_name`, or ``""``."""
    if not x.is_cuda:
        return f"symmetric memory needs CUDA tensors; x is on {x.device}"
    reason = _symm_mem_reason()
    if reason:
        return reason
    import torch.distributed as dist

    backend = str(dist.get_backend(process_groups.resolve("all_reduce_rms_norm", group_name)))
    if backend != "nccl":
        return f"symmetric memory needs an NCCL group; {group_name!r} is {backend}"
    return ""


def supported_args(x: Any, *tensors: Any) -> bool:
    """What the kernels take: a 2-d contiguous float32/float16/bfloat16 ``x`` of rows, the
    other tensors (residual, weight, scale) contiguous on ``x``'s device. Where the kernels
    run (a GPU, or CPU tensors in the interpreter, where the fallback path serves)."""
    if not isinstance(x, Tensor) or x.dim() != 2 or x.dtype not in _DTYPES:
        return False
    if not x.is_contiguous() or x.is_cuda == interpreting():
        return False
    return all(t is None or (t.is_contiguous() and t.device == x.device) for t in tensors)


# --------------------------------------------------------------------------- kernels
@triton.jit
def _allreduce_norm_kernel(
    buffers,  # int64 [world]: every rank's buffer, as addresses
    out,
    residual,
    residual_out,
    weight,
    scale,
    first_row,
    hidden,
    epsilon,
    out_row_offset,  # rows of `out` / `residual_out` before this launch's first
    WORLD: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    QUANT: tl.constexpr,
    BLOCK: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    row = first_row + tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    dtype = residual_out.dtype.element_ty
    offsets = row.to(tl.int64) * hidden + cols
    total = tl.zeros([BLOCK], dtype=tl.float32)
    for rank in tl.static_range(WORLD):
        peer = tl.load(buffers + rank).to(tl.pointer_type(dtype))
        total += tl.load(peer + offsets, mask=mask, other=0.0).to(tl.float32)
    value = total.to(dtype).to(tl.float32)  # the all-reduced sum, in x.dtype
    mine = (row - first_row + out_row_offset).to(tl.int64) * hidden + cols
    if HAS_RESIDUAL:
        value += tl.load(residual + offsets, mask=mask, other=0.0).to(tl.float32)
        rounded = value.to(dtype)
        tl.store(residual_out + mine, rounded, mask=mask)
        value = rounded.to(tl.float32)
    variance = tl.sum(value * value, axis=0) / hidden
    normed = value * (1.0 / tl.sqrt(variance + epsilon))
    if HAS_WEIGHT:
        normed *= tl.load(weight + cols, mask=mask, other=0.0).to(tl.float32)
    if QUANT:
        rounded_out = normed.to(dtype).to(tl.float32)  # the norm's result, then quantized
        inv_scale = 1.0 / tl.load(scale).to(tl.float32)
        tl.store(out + mine, quantize(rounded_out, inv_scale, INTERPRETED), mask=mask)
    else:
        tl.store(out + mine, normed.to(out.dtype.element_ty), mask=mask)


@triton.jit
def _gather_rows_kernel(
    buffers,  # int64 [world]: every rank's results region, as addresses
    out,
    rows_per_rank,
    hidden,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    owner = row // rows_per_rank
    peer = tl.load(buffers + owner).to(tl.pointer_type(out.dtype.element_ty))
    values = tl.load(peer + row.to(tl.int64) * hidden + cols, mask=mask)
    tl.store(out + row.to(tl.int64) * hidden + cols, values, mask=mask)


def launch_reduce_norm(
    buffers: Tensor,
    out: Tensor,
    weight: Tensor | None,
    epsilon: float,
    *,
    rows: tuple[int, int],
    residual: Tensor | None = None,
    residual_out: Tensor | None = None,
    scale: Tensor | None = None,
    out_row_offset: int = 0,
) -> None:
    """Reduce rows ``[rows[0], rows[1])`` of the ranks' inputs (`buffers`: one address a
    rank, each of a row-major ``[tokens, hidden]`` input of ``residual_out``'s dtype, or of
    ``out``'s where there is no residual), add `residual`, normalize (and quantize where
    `scale` is given) into `out` (and `residual_out`), from row `out_row_offset` of them."""
    first, stop = rows
    if stop <= first:
        return
    hidden = out.shape[-1]
    block = triton.next_power_of_2(hidden)
    dtype_source = residual_out if residual_out is not None else out
    quant = scale is not None
    if quant and residual_out is None:
        raise ValueError("launch_reduce_norm: a quantized output needs residual_out's dtype")
    _allreduce_norm_kernel[(stop - first,)](
        buffers,
        out,
        residual if residual is not None else dtype_source,
        dtype_source,
        weight if weight is not None else dtype_source,
        scale if scale is not None else buffers,
        first,
        hidden,
        epsilon,
        out_row_offset,
        WORLD=buffers.numel(),
        HAS_RESIDUAL=residual is not None,
        HAS_WEIGHT=weight is not None,
        QUANT=quant,
        BLOCK=block,
        INTERPRETED=interpreting(),
        num_warps=_warps(block),
    )


def launch_gather_rows(buffers: Tensor, out: Tensor, rows_per_rank: int) -> None:
    """Copy every row of `out` from the buffer (address in `buffers`) of the rank owning it:
    rank ``r`` holds rows ``[r * rows_per_rank, (r + 1) * rows_per_rank)``, at the same row
    offsets of its region."""
    hidden = out.shape[-1]
    block = triton.next_power_of_2(hidden)
    _gather_rows_kernel[(out.shape[0],)](
        buffers, out, rows_per_rank, hidden, BLOCK=block, num_warps=_warps(block)
    )


def _warps(block: int) -> int:
    """Warps of a row's program: 8 elements a thread, from 1 to 16 warps."""
    return max(1, min(16, block // 256))


# --------------------------------------------------------------------- symmetric buffers
@dataclass
class _Workspace:
    handle: Any
    buffer: Tensor  # this rank's, bytes
    rank: int
    world: int
    tables: dict[int, Tensor] = field(default_factory=dict)

    def view(self, rank: int, shape: tuple[int, ...], dtype: torch.dtype, offset: int) -> Any:
        """Rank `rank`'s buffer from byte `offset` as a tensor of `shape` and `dtype`."""
        element = torch.empty((), dtype=dtype).element_size()
        return self.handle.get_buffer(rank, shape, dtype, offset // element)

    def addresses(self, offset: int) -> Tensor:
        """Every rank's buffer address plus `offset` bytes, as a device tensor of int64 (made
        once an offset, so that calls a CUDA graph captures copy nothing from the host)."""
        found = self.tables.get(offset)
        if found is None:
            pointers = [int(p) + offset for p in self.handle.buffer_ptrs]
            found = torch.tensor(pointers, dtype=torch.int64, device=self.buffer.device)
            self.tables[offset] = found
        return found


_workspaces: dict[tuple[str, int], _Workspace] = {}
#: bytes of a buffer: the inputs, then the two-shot results (out and residual_out)
_BUFFER_BYTES = 3 * TWO_SHOT_MAX_BYTES


def _workspace(group_name: str, device: torch.device) -> _Workspace:
    key = (group_name, device.index or 0)
    found = _workspaces.get(key)
    if found is None:
        import torch.distributed._symmetric_memory as symm_mem

        enable = getattr(symm_mem, "enable_symm_mem_for_group", None)
        if enable is not None:  # needed by older torch, a deprecated no-op since
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                enable(group_name)
        buffer = symm_mem.empty(_BUFFER_BYTES, dtype=torch.uint8, device=device)
        rendezvous: Any = symm_mem.rendezvous  # its group argument is typed GroupName
        handle = rendezvous(buffer, group_name)
        found = _Workspace(handle, buffer, handle.rank, handle.world_size)
        _workspaces[key] = found
        logger.info(
            "ir_kernels_triton: symmetric buffer of %d bytes for group %r on %s",
            _BUFFER_BYTES,
            group_name,
            device,
        )
    return found


@functools.cache
def _log_path_once(kind: str, reason: str) -> None:
    logger.info("ir_kernels_triton: all-reduce + norm takes the %s path: %s", kind, reason)


def path_for(x: Tensor, group_name: str) -> Path:
    """The path a call on `x` over `group_name` takes (logged once per path and reason)."""
    world = process_groups.group_size(group_name, "all_reduce_rms_norm")
    path = select_path(x.numel() * x.element_size(), world, unavailable_reason(x, group_name))
    _log_path_once(path.kind, path.reason)
    return path


def allreduce_norm(
    x: Tensor,
    residual: Tensor | None,
    weight: Tensor | None,
    epsilon: float,
    scale: Tensor | None,
    group_name: str,
) -> tuple[Tensor, Tensor | None]:
    """``(out, residual_out)`` of the all-reduce of `x` over `group_name`, plus `residual`
    (None: no residual, ``residual_out`` None), normalized, quantized with `scale` where
    given."""
    out = torch.empty_like(x, dtype=torch.float8_e4m3fn if scale is not None else x.dtype)
    residual_out = torch.empty_like(x) if residual is not None else None
    path = path_for(x, group_name)
    if path.kind == FALLBACK:
        reduced: Tensor = ops.all_reduce.native(x, group_name)
        launch_norm(
            reduced,
            weight,
            epsilon,
            None,
            out,
            residual=residual,
            residual_out=residual_out,
            quant=QUANT_STATIC if scale is not None else QUANT_NONE,
            scale=scale,
        )
        return out, residual_out
    space = _workspace(group_name, x.device)
    tokens = x.shape[0]
    space.view(space.rank, tuple(x.shape), x.dtype, 0).copy_(x)
    space.handle.barrier(channel=0)
    inputs = space.addresses(0)
    # the kernel reads its dtype from residual_out: give it an x-typed tensor without one
    typed = residual_out if residual_out is not None else (out if scale is None else x)
    if path.kind == ONE_SHOT:
        launch_reduce_norm(
            inputs,
            out,
            weight,
            epsilon,
            rows=(0, tokens),
            residual=residual,
            residual_out=typed,
            scale=scale,
        )
        space.handle.barrier(channel=0)
        return out, residual_out
    # two-shot: this rank's block of rows into its results region, then everyone's
    per_rank = -(-tokens // space.world)
    first, stop = space.rank * per_rank, min(tokens, (space.rank + 1) * per_rank)
    out_at = TWO_SHOT_MAX_BYTES
    res_at = out_at + TWO_SHOT_MAX_BYTES
    mine_out = space.view(space.rank, tuple(out.shape), out.dtype, out_at)
    mine_res = space.view(space.rank, tuple(x.shape), x.dtype, res_at)
    launch_reduce_norm(
        inputs,
        mine_out,
        weight,
        epsilon,
        rows=(first, stop),
        residual=residual,
        residual_out=mine_res if residual is not None else typed,
        scale=scale,
        out_row_offset=first,
    )
    space.handle.barrier(channel=0)
    launch_gather_rows(space.addresses(out_at), out, per_rank)
    if residual_out is not None:
        launch_gather_rows(space.addresses(res_at), residual_out, per_rank)
    space.handle.barrier(channel=0)
    return out, residual_out
