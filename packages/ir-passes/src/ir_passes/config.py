"""`PassConfig`: which IR passes run, which fusions they apply, and up to how many tokens.

Each fusion has one switch (the seeds' names, plus ``fuse_residual_add``), a token threshold
(``<family>_max_tokens``) and the optimization level from which it is on by default::

    switch                       threshold field           on from  default threshold
    fuse_residual_add            residual_add_max_tokens   O1       none
    fuse_norm_quant              norm_quant_max_tokens     O1       none
    fuse_act_quant               act_quant_max_tokens      O1       none
    fuse_rope_kvcache            rope_kvcache_max_tokens   O2       256
    enable_qk_norm_rope_fusion   qk_norm_rope_max_tokens   O2       256
    fuse_allreduce_rms           allreduce_rms_max_tokens  O2       none
    enable_sp                    sp_min_token_num (lower)  off      none
    fuse_gemm_comms              sp_min_token_num (lower)  off      none

(`FUSIONS` lists each one's report names and what it fuses.)

Levels: O0 runs no pass beyond functionalization and lowering (no fusion, clones kept); O1
adds clone elimination, the residual-add fusion and the norm / activation + fp8 quantization
fusions; O2 (the default) adds the rotary + KV-cache and the QK-norm + rotary fusions; O3 is
O2: no fusion of the catalog pays off only at a higher level. Every fusion applies only where
the fused op's selected implementation is a real kernel (Inductor fuses a native composition
by itself), unless ``force_fusion``.

A switch left at None takes the level's default; one set explicitly wins over the level.
A threshold applies per compile range: a fusion with threshold N runs in a graph compiled for
token counts up to N (ir-piecewise gives each range its `for_range` copy); where the graph's
range is unknown (``token_range`` None), a static token count of the matched op decides, and
a symbolic one is taken as unbounded, so the fusion stays off. The rotary fusions stop at 256
tokens as the seeds' rotary + KV-cache fusion does (their QK-norm + rotary fusion is a
low-range one too); the others run at every size.

The tensor-parallel passes (`ir_passes.tp_fusion`) act on the collectives of a process group
of more than one rank: ``fuse_allreduce_rms`` (O2+) runs below its threshold like the others;
sequence parallelism (``enable_sp``) and the GEMM + collective fusion (``fuse_gemm_comms``,
which turns ``enable_sp`` on where that is left at None) are off at every level and run
*from* ``sp_min_token_num`` up: in a graph compiled for ``[first, last]`` where ``first`` is
at least that (a lower bound, where every other threshold is an upper one).
"""

import dataclasses
import warnings
from dataclasses import dataclass
from typing import Any

#: the levels, lowest to highest
LEVELS = (0, 1, 2, 3)
DEFAULT_LEVEL = 2


@dataclass(frozen=True)
class Fusion:
    """One fusion family: its switch, its threshold field, the lowest level it is on at, the
    report names of its patterns and what it fuses. ``level`` None: off at every level (on
    only where switched on); `lower_bound`: the threshold field is the smallest token count
    it runs at, not the largest."""

    switch: str
    max_tokens_field: str
    level: int | None
    patterns: tuple[str, ...]
    fuses: str
    #: True where the threshold is a lower bound: the fusion runs from that many tokens up
    lower_bound: bool = False


#: report name of ``rms_norm(a + b)`` -> ``fused_add_rms_norm(a, b)``
RESIDUAL_ADD_PATTERN = "add+rms_norm"
#: report name of per-head ``rms_norm`` of query and key -> ``qk_norm_rotary_embedding``
QK_NORM_ROPE_PATTERN = "qk_norm+rotary_embedding"
#: report name of ``rotary_embedding`` -> ``write_kv_cache`` of its key
ROPE_KVCACHE_PATTERN = "rotary_embedding+write_kv_cache"
#: report names of ``all_reduce`` -> a norm (-> static fp8 quant), one each
ALLREDUCE_RMS_PATTERNS = (
    "all_reduce+rms_norm",
    "all_reduce+fused_add_rms_norm",
    "all_reduce+add+rms_norm",
    "all_reduce+rms_norm+static_quant_fp8",
    "all_reduce+fused_add_rms_norm+static_quant_fp8",
    "all_reduce+add+rms_norm+static_quant_fp8",
)
#: report names of the sequence-parallel rewrites of ``all_reduce`` -> norm (-> quant)
SP_PATTERNS = (
    "sp:all_reduce+rms_norm",
    "sp:all_reduce+fused_add_rms_norm",
    "sp:all_reduce+rms_norm_static_quant_fp8",
    "sp:all_reduce+fused_add_rms_norm_static_quant_fp8",
)
#: report names of the GEMM + collective fusions
GEMM_COMMS_PATTERNS = ("all_gather+matmul", "matmul+reduce_scatter")

FUSIONS: tuple[Fusion, ...] = (
    Fusion(
        "fuse_residual_add",
        "residual_add_max_tokens",
        1,
        (RESIDUAL_ADD_PATTERN,),
        "residual add -> rms_norm  =>  fused_add_rms_norm",
    ),
    Fusion(
        "fuse_norm_quant",
        "norm_quant_max_tokens",
        1,
        tuple(
            f"{norm}+{quant}"
            for norm in ("rms_norm", "fused_add_rms_norm")
            for quant in ("static_quant_fp8", "dynamic_quant_fp8", "group_quant_fp8")
        ),
        "rms_norm / fused_add_rms_norm -> static, dynamic or group fp8 quant  =>  composite",
    ),
    Fusion(
        "fuse_act_quant",
        "act_quant_max_tokens",
        1,
        ("silu_and_mul+static_quant_fp8", "silu_and_mul+group_quant_fp8"),
        "silu_and_mul -> static or group fp8 quant  =>  composite",
    ),
    Fusion(
        "fuse_rope_kvcache",
        "rope_kvcache_max_tokens",
        2,
        (ROPE_KVCACHE_PATTERN,),
        "rotary_embedding -> write_kv_cache  =>  rotary_embedding_write_kv_cache",
    ),
    Fusion(
        "enable_qk_norm_rope_fusion",
        "qk_norm_rope_max_tokens",
        2,
        (QK_NORM_ROPE_PATTERN,),
        "per-head rms_norm of query and key -> rotary_embedding  =>  qk_norm_rotary_embedding",
    ),
    Fusion(
        "fuse_allreduce_rms",
        "allreduce_rms_max_tokens",
        2,
        ALLREDUCE_RMS_PATTERNS,
        "all_reduce -> rms_norm / residual add + rms_norm (-> static fp8 quant)  =>  "
        "all_reduce_* composite",
    ),
    Fusion(
        "enable_sp",
        "sp_min_token_num",
        None,
        SP_PATTERNS,
        "all_reduce -> norm  =>  reduce_scatter -> norm of the rank's rows -> all_gather",
        lower_bound=True,
    ),
    Fusion(
        "fuse_gemm_comms",
        "sp_min_token_num",
        None,
        GEMM_COMMS_PATTERNS,
        "all_gather -> matmul, matmul -> reduce_scatter  =>  torch's symmetric-memory fused ops",
        lower_bound=True,
    ),
)
FUSION_BY_SWITCH = {f.switch: f for f in FUSIONS}
#: the report name of each pattern -> its fusion's switch
SWITCH_OF_PATTERN = {p: f.switch for f in FUSIONS for p in f.patterns}
#: the lowest level at which clone elimination is on by default
CLONE_ELIMINATION_LEVEL = 1


@dataclass(frozen=True, kw_only=True)
class PassConfig:
    """Switches of the IR pass pipeline (keyword arguments only).

    Attributes:
        level: optimization level 0-3 setting the defaults of the switches left at None (the
            module docstring's table): O0 no fusion and no clone elimination; O1 the residual
            add, norm + quant and activation + quant fusions and clone elimination; O2 (the
            default) also the rotary + KV-cache and QK-norm + rotary fusions; O3 the same as O2.
        functionalize: turn ``maybe_inplace`` calls into the default overload (pre-grad),
            checking that donated inputs are not used again.
        fuse_residual_add: a residual add and the ``rms_norm`` of its sum become
            ``fused_add_rms_norm``. None: from the level (O1+).
        fuse_norm_quant: ``rms_norm`` / ``fused_add_rms_norm`` then static, dynamic (per
            token) or group fp8 quantization become one composite. None: from the level (O1+).
        fuse_act_quant: ``silu_and_mul`` then static or group fp8 quantization become one
            composite. None: from the level (O1+).
        fuse_rope_kvcache: ``rotary_embedding`` whose key ``write_kv_cache`` stores becomes
            ``rotary_embedding_write_kv_cache``. None: from the level (O2+).
        enable_qk_norm_rope_fusion: the per-head ``rms_norm`` of query and key feeding
            ``rotary_embedding`` becomes ``qk_norm_rotary_embedding``. None: from the level
            (O2+).
        fuse_allreduce_rms: ``all_reduce`` then ``rms_norm``, a residual add and
            ``rms_norm``, or ``fused_add_rms_norm`` (then static fp8 quantization) become the
            ``all_reduce_*`` composite, over a group of more than one rank. None: from the
            level (O2+).
        enable_sp: sequence parallelism: ``all_reduce`` then a norm becomes
            ``reduce_scatter``, the norm of this rank's rows and ``all_gather``, in graphs of
            static token counts from ``sp_min_token_num`` up, which must divide by the
            group's size. None: off, unless ``fuse_gemm_comms`` is on.
        fuse_gemm_comms: after sequence parallelism, ``all_gather`` then a matrix product
            and a matrix product then ``reduce_scatter`` become torch's symmetric-memory
            fused ops (CUDA, NCCL). None: off.
        residual_add_max_tokens: the largest token count at which the residual add fusion
            runs (None: no limit).
        norm_quant_max_tokens: the same for the norm + quant fusion.
        act_quant_max_tokens: the same for the activation + quant fusion.
        rope_kvcache_max_tokens: the same for the rotary + KV-cache fusion (default 256).
        qk_norm_rope_max_tokens: the same for the QK-norm + rotary fusion (default 256).
        allreduce_rms_max_tokens: the same for the all-reduce + norm fusion (None: no limit;
            its kernels fall back to the unfused collective above their own message size).
        sp_min_token_num: the smallest token count at which sequence parallelism and the
            GEMM + collective fusion run (None: every count).
        force_fusion: fuse even where the fused op would run natively (Inductor fuses native
            compositions by itself, so by default only real kernels are worth it).
        lower: replace IR ops by their selected implementations (post-grad).
        autotune: select by measurement (`ir_passes.autotune`): lowering times each IR op
            node's candidates (the eligible implementations and Inductor's code of the native
            function) on the node's shapes at both ends of the compile range and keeps the
            one fastest at each, ties going to the priority's choice. Off by default: timings
            vary between runs, so builds with it may differ.
        eliminate_clones: remove clones that lowering added and that are provably unneeded.
            None: from the level (O1+).
        token_range: ``(first, last)`` token counts the compiled graph serves (``last`` None:
            unbounded); ir-piecewise sets it per compile range (`for_range`). None: unknown,
            a static token count in the graph decides.
        debug_dir: if set, write each pass's graph before and after to this directory.
        fuse: deprecated umbrella switch: False turns off every fusion whose own switch is
            None, True turns them on (except those no level turns on: ``enable_sp``,
            ``fuse_gemm_comms``). Use ``level`` or the per-fusion switches.
    """

    level: int = DEFAULT_LEVEL
    functionalize: bool = True
    fuse_residual_add: bool | None = None
    fuse_norm_quant: bool | None = None
    fuse_act_quant: bool | None = None
    fuse_rope_kvcache: bool | None = None
    enable_qk_norm_rope_fusion: bool | None = None
    fuse_allreduce_rms: bool | None = None
    enable_sp: bool | None = None
    fuse_gemm_comms: bool | None = None
    residual_add_max_tokens: int | None = None
    norm_quant_max_tokens: int | None = None
    act_quant_max_tokens: int | None = None
    rope_kvcache_max_tokens: int | None = 256
    qk_norm_rope_max_tokens: int | None = 256
    allreduce_rms_max_tokens: int | None = None
    sp_min_token_num: int | None = None
    force_fusion: bool = False
    lower: bool = True
    autotune: bool = False
    eliminate_clones: bool | None = None
    token_range: tuple[int, int | None] | None = None
    debug_dir: str | None = None
    fuse: bool | None = None

    def __post_init__(self) -> None:
        if isinstance(self.level, bool) or self.level not in LEVELS:
            raise ValueError(f"PassConfig: level got {self.level!r}; expected one of 0, 1, 2, 3")
        for name in ("functionalize", "force_fusion", "lower", "autotune"):
            _check_bool(name, getattr(self, name), optional=False)
        for name in (*FUSION_BY_SWITCH, "eliminate_clones", "fuse"):
            _check_bool(name, getattr(self, name), optional=True)
        for fusion in FUSIONS:
            value = getattr(self, fusion.max_tokens_field)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(
                    f"PassConfig: {fusion.max_tokens_field} got {value!r}; expected a positive "
                    "int or None (no limit)"
                )
            if value is not None and value < 1:
                raise ValueError(
                    f"PassConfig: {fusion.max_tokens_field} got {value!r}; expected a positive "
                    "int or None (no limit)"
                )
        if self.token_range is not None:
            object.__setattr__(self, "token_range", _checked_range(self.token_range))
        if self.debug_dir is not None and not isinstance(self.debug_dir, str):
            raise ValueError(f"PassConfig: debug_dir got {self.debug_dir!r}; expected a str")
        if self.fuse is not None:
            warnings.warn(
                "PassConfig(fuse=...) is deprecated: use level=0 for no fusion, or the "
                f"per-fusion switches ({', '.join(FUSION_BY_SWITCH)})",
                DeprecationWarning,
                stacklevel=3,
            )

    # ------------------------------------------------------------------ switches
    def fusion_on(self, switch: str) -> bool:
        """Whether fusion `switch` is on (at some token count): set explicitly, else from the
        deprecated ``fuse``, else from the level."""
        fusion = _fusion(switch)
        value: bool | None = getattr(self, switch)
        if value is not None:
            return value
        if switch == "enable_sp" and self.fuse_gemm_comms:
            return True  # the GEMM + collective fusion works on what sequence parallelism makes
        if fusion.level is None:  # on only where switched on
            return False
        if self.fuse is not None:
            return self.fuse
        return self.level >= fusion.level

    def source_of(self, switch: str) -> str:
        """Where fusion `switch`'s value comes from: ``"set"``, ``"fuse"`` or ``"level N"``."""
        _fusion(switch)
        if getattr(self, switch) is not None:
            return "set"
        if switch == "enable_sp" and self.fuse_gemm_comms:
            return "fuse_gemm_comms"
        if _fusion(switch).level is None:
            return "off unless set"
        return "fuse" if self.fuse is not None else f"level {self.level}"

    def max_tokens(self, switch: str) -> int | None:
        """Fusion `switch`'s token threshold (None: no limit); for a `Fusion.lower_bound`
        one, the smallest count it runs at."""
        limit: int | None = getattr(self, _fusion(switch).max_tokens_field)
        return limit

    def fusion_applies(self, switch: str, tokens: int | None = None) -> bool:
        """Whether fusion `switch` runs on an op of `tokens` tokens (None: not static) in a
        graph compiled for ``token_range``: the switch is on and the threshold, if any, covers
        the range's last count (a lower-bound threshold: its first count), or, where the
        range is unknown, `tokens`."""
        if not self.fusion_on(switch):
            return False
        limit = self.max_tokens(switch)
        if limit is None:
            return True
        if _fusion(switch).lower_bound:
            first = self.token_range[0] if self.token_range is not None else tokens
            return first is not None and first >= limit
        last = self.token_range[1] if self.token_range is not None else tokens
        return last is not None and last <= limit

    def fusions_for_range(self, first: int, last: int | None) -> tuple[str, ...]:
        """The switches of the fusions that run in a graph compiled for ``[first, last]``."""
        ranged = self.for_range(first, last)
        return tuple(f.switch for f in FUSIONS if ranged.fusion_applies(f.switch))

    def for_range(self, first: int, last: int | None) -> "PassConfig":
        """This configuration for a graph compiled for token counts ``[first, last]`` (``last``
        None: unbounded)."""
        return dataclasses.replace(self, token_range=(first, last))

    @property
    def clone_elimination_on(self) -> bool:
        """Whether clone elimination runs: set explicitly, else from the level (O1+)."""
        if self.eliminate_clones is not None:
            return self.eliminate_clones
        return self.level >= CLONE_ELIMINATION_LEVEL

    def describe(self) -> list[dict[str, Any]]:
        """One row a fusion: ``switch``, ``on``, ``source``, ``max_tokens`` (the threshold),
        ``lower_bound`` (whether it is the smallest count rather than the largest), ``fuses``,
        ``patterns`` (for ``ir-stack explain``)."""
        return [
            {
                "switch": f.switch,
                "on": self.fusion_on(f.switch),
                "source": self.source_of(f.switch),
                "max_tokens": self.max_tokens(f.switch),
                "lower_bound": f.lower_bound,
                "fuses": f.fuses,
                "patterns": f.patterns,
            }
            for f in FUSIONS
        ]

    def key(self) -> str:
        """A stable text of every field, for cache keys."""
        return repr(dataclasses.astuple(self))


def _fusion(switch: str) -> Fusion:
    fusion = FUSION_BY_SWITCH.get(switch)
    if fusion is None:
        raise ValueError(
            f"PassConfig: unknown fusion {switch!r}; expected one of {', '.join(FUSION_SWITCHES)}"
        )
    return fusion


FUSION_SWITCHES = tuple(FUSION_BY_SWITCH)


def _check_bool(name: str, value: Any, *, optional: bool) -> None:
    if value is None and optional:
        return
    if not isinstance(value, bool):
        expected = "True, False or None (from the level)" if optional else "True or False"
        raise ValueError(f"PassConfig: {name} got {value!r}; expected {expected}")


def _checked_range(value: Any) -> tuple[int, int | None]:
    ok = isinstance(value, tuple | list) and len(value) == 2
    if ok:
        first, last = value
        ok = isinstance(first, int) and not isinstance(first, bool) and first >= 1
        ok = ok and (
            last is None or (isinstance(last, int) and not isinstance(last, bool) and last >= first)
        )
    if not ok:
        raise ValueError(
            f"PassConfig: token_range got {value!r}; expected (first, last) with "
            "1 <= first <= last, or last None (unbounded)"
        )
    return (value[0], value[1])
