// Row kernels: rms_norm and fused_add_rms_norm, alone or followed by static or dynamic fp8
// quantization, and dynamic per-token and per-token-group fp8 quantization.
//
// A team of threads owns one row (for group quantization: one group). Each thread loads its
// part of the row into registers once (16-byte vectors between a scalar head and tail), the team
// reduces (sum of squares, then absmax for dynamic scales) with warp shuffles, and the same
// registers produce the output, so the input is read once. Rows wider than one tile (a team of
// 512, four vectors each) are streamed in chunks and read again from L2 for the output, and so
// are the plain norms' wide 16-bit rows where the op streams far beyond the L2 (`reload_rows`).
#include <ATen/ATen.h>

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "cluster.cuh"
#include "common.cuh"

namespace ir_cuda {
namespace {

enum Quant : int { kNone = 0, kStatic = 1, kDynamic = 2 };

// Batches of about a row per SM of an H100 or H200 at most: the static-quant norms prefetch
// their scale (`RowArgs::prefetch_scale`), and plain rms_norm loads its weight late
// (`late_weight` in `launch_rows`).
constexpr int64_t kFewRows = 256;

// Kernel parameters live in a constant bank, and each 64-byte line of it an SM first touches
// is a miss there. These start 16 bytes into a line (at 0x210 on sm_90), so the first 112
// bytes span two lines, which every row kernel reads before its first load. The quantizers'
// fields lay in a third line, read between a row's loads, after its reduction, or (the static
// scale's prefetch flag) before its first load, where its miss stalled the row: a standalone
// probe (`benchmarks/gpu/quant_layout_probe.py`, H100) ran dynamic quant 0.05-0.15 µs faster
// with five parameters than with this struct (128 x 2048: 1.73 against 1.88 µs). They now fill
// the gaps and share the fused add's bytes (no op has both); the norms' fields keep their
// offsets.
template <typename T>
struct RowArgs {
  const T* x;
  int x_stride;            // row strides are 32-bit (the host checks): one multiply to a row
  int scale_token_stride;  // dynamic: of scale_out, 32-bit (the host checks)
  void* out;               // T, or fp8 bits (uint8_t) when quantizing
  int out_stride;
  int scale_group_stride;
  const T* weight;
  int rows;    // tokens * groups; the host checks both fit 31 bits
  int groups;  // per token (1 except for group quantization)
  int groups_shift;  // log2(groups) where groups is a power of two, else -1
  int width;   // elements per row (per group)
  int var_size;
  float inv_var_size;  // 1 / var_size: a multiplication where a division would branch
  float eps;
  // static: prefetch the scale into L1 first (small batches; a prefetch costs each block
  // hundreds of cycles of its SM's throughput: 3.5x the time at 16384 rows on an H100)
  bool prefetch_scale;
  union {
    const T* residual;  // the fused add
    float* scale_out;   // dynamic quantization: one scale per row (per group)
  };
  int residual_stride;
  union {
    T* residual_out;
    const float* scale_ub;  // dynamic: the optional upper bound of the absmax
  };
  int residual_out_stride;
  const float* scale;  // static quantization: the one scale
  // nvcc (CUDA 13) loads every field of a parameter struct of up to 128 bytes at a kernel's
  // entry, and those of a larger one where they are used; the row kernels were tuned in the
  // second form (in the first the norms took 44-46 registers a thread instead of 32, and
  // rms_norm at 1024 x 8192 ran 18 % slower on an H100). So the struct keeps its 152 bytes
  // (and `row_kernel`'s next parameter, `team`, its offset).
  char keep_over_128_bytes[40];
};
static_assert(sizeof(RowArgs<float>) == 152, "RowArgs: fields loaded where used (see above)");
static_assert(offsetof(RowArgs<float>, scale) + sizeof(float*) <= 112,
              "RowArgs: every field a kernel reads in the first two lines of the bank");

// The aligned kernel's parameters for the quantizers without a norm (dynamic per-token and
// group quantization): every field they read in the bank's first line (48 bytes from 0x210),
// the optional upper bound of the absmax (rarely given) past it behind a flag.
template <typename T>
struct QuantArgs {
  const T* x;
  void* out;  // fp8 bits
  float* scale_out;
  int x_stride;
  int out_stride;
  int scale_token_stride;
  int rows;
  int width;
  bool has_scale_ub;
  const float* scale_ub;
};
static_assert(offsetof(QuantArgs<float>, scale_ub) == 48, "QuantArgs: the hot fields in one line");

// Whether the dynamic quantizer was given an upper bound of the absmax.
template <typename T>
__device__ __forceinline__ bool has_scale_ub(const QuantArgs<T>& a) {
  return a.has_scale_ub;
}
template <typename T>
__device__ __forceinline__ bool has_scale_ub(const RowArgs<T>& a) {
  return a.scale_ub != nullptr;
}

template <bool ADD, bool NORM, typename T>
using AlignedArgs = std::conditional_t<!ADD && !NORM, QuantArgs<T>, RowArgs<T>>;

// The aligned kernel's parameters from the row kernels' (a copy: the launch passes them by value).
template <bool ADD, bool NORM, typename T>
AlignedArgs<ADD, NORM, T> aligned_args(const RowArgs<T>& a) {
  if constexpr (!ADD && !NORM) {
    QuantArgs<T> q{};
    q.x = a.x;
    q.out = a.out;
    q.scale_out = a.scale_out;
    q.x_stride = a.x_stride;
    q.out_stride = a.out_stride;
    q.scale_token_stride = a.scale_token_stride;
    q.rows = a.rows;
    q.width = a.width;
    q.has_scale_ub = a.scale_ub != nullptr;
    q.scale_ub = a.scale_ub;
    return q;
  } else {
    return a;
  }
}

// The weight's slots of a tile; ones where there is no weight, so y * w needs no branch.
template <typename T, int V, int VPT>
__device__ __forceinline__ void load_weight(Tile<T, V, VPT>& w, const T* weight, const RowPlan& p,
                                            int lane, int team, int chunk) {
  if (weight != nullptr) {
    load_tile(w, weight, p, lane, team, chunk);
  } else {
#pragma unroll
    for (int s = 0; s < Tile<T, V, VPT>::kSlots; ++s) w.at(s) = T(1.f);
  }
}

// Which row (token and group) a thread works on, and its lane in the row's team.
struct RowSlot {
  int lane;
  bool active;  // false for the spare teams of the last block
  int token;
  int group;
  int group_offset;  // elements from the token's first one
};

// GROUPED: the kernel may quantize in groups (rows of a token are `groups` groups); the norms
// never do, and skip the division. 32-bit indices, and no test of `active` on the way to a
// row's address (an inactive team computes one past the rows and loads nothing): a
// decode-size launch is bound by the latency of each instruction before the first load.
template <bool GROUPED, typename T>
__device__ __forceinline__ RowSlot row_slot(const RowArgs<T>& a, int team, int team_shift,
                                            unsigned rows_per_block) {
  // team is a power of two: shifts and masks instead of integer division
  RowSlot r;
  r.lane = static_cast<int>(threadIdx.x) & (team - 1);
  const int row = static_cast<int>(blockIdx.x * rows_per_block + (threadIdx.x >> team_shift));
  r.active = row < a.rows;
  // the groups of a token are a power of two in practice (hidden / 128): a shift, not a
  // division, before the first load
  if constexpr (GROUPED) {
    r.token = a.groups_shift >= 0 ? row >> a.groups_shift : row / a.groups;
    r.group = row - r.token * a.groups;
    r.group_offset = r.group * a.width;
  } else {
    r.token = row;
    r.group = 0;
    r.group_offset = 0;
  }
  return r;
}

// Threads of a block of fp8 rows of teams of 8 that store together (`together_kernel`).
constexpr int kTogetherThreads = 512;

// Threads of a block of `aligned_row_kernel` for a team of TEAM: `row_block_threads`, except for
// teams of 8 storing together (TOGETHER: the fp8 groups streamed from DRAM on cards with deep
// loads, `streamed_short_rows`), whose block holds kTogetherThreads.
__host__ __device__ constexpr int aligned_block_threads(int team, bool together) {
  return together && team == 8 ? kTogetherThreads : row_block_threads(team);
}

// `row_slot` for the aligned kernel, whose rows are never grouped (the host sends group
// quantization there as one row per group) and whose team is a constant. With one row a block
// (teams of 128 and more) the row is the block's index: a uniform value, and never past the last
// row (the grid has a block a row), so no thread tests it. A row spread over a cluster of
// CLUSTER blocks is the cluster's index, and block k of it holds lanes k * TEAM / CLUSTER on; a
// row shared by SPLIT blocks (each holding the whole team) is the index over SPLIT. THREADS:
// the block's (`aligned_block_threads`).
template <int TEAM, int CLUSTER, int SPLIT, int THREADS, typename Args>
__device__ __forceinline__ RowSlot aligned_row_slot(const Args& a) {
  constexpr int rows_per_block = THREADS / TEAM;
  static_assert((CLUSTER == 1 && SPLIT == 1) || rows_per_block == 1,
                "aligned_row_slot: a cluster or a split holds one row");
  RowSlot r;
  if constexpr (rows_per_block == 1) {
    r.lane = static_cast<int>(cluster_rank<CLUSTER>() * (TEAM / CLUSTER) + threadIdx.x);
    r.token = static_cast<int>(blockIdx.x / (CLUSTER * SPLIT));
    r.active = true;
  } else {
    r.lane = static_cast<int>(threadIdx.x) & (TEAM - 1);
    r.token = static_cast<int>(blockIdx.x * rows_per_block + (threadIdx.x >> log2_of(TEAM)));
    r.active = r.token < a.rows;
  }
  r.group = 0;
  r.group_offset = 0;
  return r;
}

// Elements from a tensor's start to row `row` of stride `stride`: one 32 x 32 -> 64-bit multiply.
__device__ __forceinline__ int64_t row_offset(int row, int stride) {
  return static_cast<int64_t>(row) * static_cast<int64_t>(stride);
}

// The dynamic scale of a row from its absmax (reduced over the row).
template <typename Args>
__device__ __forceinline__ float dynamic_scale(const Args& a, float amax, float scale_ub) {
  if (has_scale_ub(a)) amax = fminf(amax, scale_ub);
  return scale_of_absmax(amax);
}

// The team's first lane writes its row's dynamic scale out.
template <typename T>
__device__ __forceinline__ void write_scale(const RowArgs<T>& a, const RowSlot& r, float scale) {
  if (r.active && r.lane == 0) {
    a.scale_out[static_cast<int64_t>(r.token) * a.scale_token_stride +
                static_cast<int64_t>(r.group) * a.scale_group_stride] = scale;
  }
}

// The same for ungrouped rows (the aligned kernel's).
template <typename T>
__device__ __forceinline__ void write_scale(const QuantArgs<T>& a, const RowSlot& r, float scale) {
  if (r.active && r.lane == 0) a.scale_out[static_cast<int64_t>(r.token) * a.scale_token_stride] = scale;
}

template <typename T, int VPT, bool STREAM, bool ADD, bool NORM, int QUANT>
__global__ void __launch_bounds__(kMaxTeam) row_kernel(RowArgs<T> a, int team) {
  await_previous_grid();
  const int team_shift = __ffs(team) - 1;
  const RowSlot slot = row_slot<!NORM>(a, team, team_shift, blockDim.x >> team_shift);
  constexpr int V = vec_width<T>();
  using XTile = Tile<T, V, VPT>;
  using QTile = Tile<uint8_t, V, VPT>;
  const int lane = slot.lane;
  const bool active = slot.active;
  const int64_t token = slot.token;
  const int64_t group_offset = slot.group_offset;

  const T* x = a.x + token * a.x_stride + group_offset;
  const T* res = ADD ? a.residual + token * a.residual_stride : nullptr;
  T* res_out = ADD ? a.residual_out + token * a.residual_out_stride : nullptr;
  T* out_t = QUANT == kNone ? static_cast<T*>(a.out) + token * a.out_stride : nullptr;
  uint8_t* out_q =
      QUANT != kNone ? static_cast<uint8_t*>(a.out) + token * a.out_stride + group_offset : nullptr;
  const T* weight = NORM ? a.weight : nullptr;

  RowPlan plan;
  if (active) {
    plan = PlanBuilder<V>(x, a.width).also(res).also(res_out).also(out_t).also(out_q).also(weight).done();
  }
  const int chunks = STREAM ? (a.width + VPT * V * team - 1) / (VPT * V * team) : 1;
  // The rounded activations the output is computed from: x, or x + residual.
  const T* src = ADD ? res_out : x;
  // Slots past variance_size must stay out of the sum of squares; when the variance covers the
  // whole row (the usual case) every slot counts, as empty slots hold zeros.
  const bool whole_variance = a.var_size == a.width;
  // scalars the end of the row needs, loaded before the row so that their latency overlaps
  const float static_scale = QUANT == kStatic ? *a.scale : 1.f;
  const float scale_ub = QUANT == kDynamic && a.scale_ub != nullptr ? *a.scale_ub : 0.f;

  XTile xs;
  XTile ws;  // the weight; loaded beside x when the row fits one tile, so both loads overlap
  float acc = 0.f;  // sum of squares (norms) or absmax (plain dynamic quantization)
  for (int c = 0; c < chunks; ++c) {
    if (!active) break;
    load_tile(xs, x, plan, lane, team, c);
    if (!STREAM) load_weight(ws, weight, plan, lane, team, c);
    if constexpr (ADD) {
      XTile rs;
      load_tile(rs, res, plan, lane, team, c);
#pragma unroll
      for (int s = 0; s < XTile::kSlots; ++s) xs.at(s) = static_cast<T>(float(xs.at(s)) + float(rs.at(s)));
      store_tile(res_out, xs, plan, lane, team, c);
    }
    if constexpr (NORM) {
      if (whole_variance) {
#pragma unroll
        for (int s = 0; s < XTile::kSlots; ++s) {
          const float f = float(xs.at(s));
          acc = fmaf(f, f, acc);
        }
      } else {
#pragma unroll
        for (int s = 0; s < XTile::kSlots; ++s) {
          const float f = float(xs.at(s));
          const int i = slot_index<V, VPT>(plan, lane, team, c, s);
          if (i >= 0 && i < a.var_size) acc = fmaf(f, f, acc);
        }
      }
    } else {
#pragma unroll
      for (int s = 0; s < XTile::kSlots; ++s) acc = fmaxf(acc, fabsf(float(xs.at(s))));
    }
  }

  float inv_rms = 1.f;
  if constexpr (NORM) {
    inv_rms = rsqrtf(team_reduce(acc, team, SumOp{}) * a.inv_var_size + a.eps);
  }

  // y for slot s of the tile in registers, before and after rounding to T (the value the
  // unfused op would have produced)
  auto normed_raw = [&](const XTile& t, const XTile& w, int s) -> float {
    return float(t.at(s)) * inv_rms * float(w.at(s));
  };
  auto normed = [&](const XTile& t, const XTile& w, int s) -> float {
    return Words<T>::round(normed_raw(t, w, s));
  };

  if constexpr (NORM && QUANT == kDynamic) {
    acc = 0.f;
    for (int c = 0; c < chunks; ++c) {
      if (active && STREAM) {
        load_tile(xs, src, plan, lane, team, c);
        load_weight(ws, weight, plan, lane, team, c);
      }
#pragma unroll
      for (int s = 0; s < XTile::kSlots; ++s) acc = fmaxf(acc, fabsf(normed(xs, ws, s)));
    }
  }

  float scale = static_scale;
  if constexpr (QUANT == kDynamic) {
    scale = dynamic_scale(a, team_reduce(acc, team, MaxOp{}), scale_ub);
    write_scale(a, slot, scale);
  }
  if (!active) return;  // no reductions follow
  // one division per row; the product differs from y / scale by at most an fp32 rounding
  const float inv_scale = fast_reciprocal(scale);

  for (int c = 0; c < chunks; ++c) {
    if constexpr (STREAM) {
      load_tile(xs, src, plan, lane, team, c);
      load_weight(ws, weight, plan, lane, team, c);
    }
    if constexpr (QUANT == kNone) {
      XTile o;
#pragma unroll
      for (int s = 0; s < XTile::kSlots; ++s) o.at(s) = static_cast<T>(normed_raw(xs, ws, s));
      store_tile(out_t, o, plan, lane, team, c);
    } else {
      QTile q;
#pragma unroll
      for (int s = 0; s < XTile::kSlots; ++s) {
        const float y = NORM ? normed(xs, ws, s) : float(xs.at(s));
        q.at(s) = to_fp8(y * inv_scale);
      }
      store_tile(out_q, q, plan, lane, team, c);
    }
  }
}

// Whether the kernel of a team of TEAM, VPT vectors a thread, stands in for the team of 2 * TEAM
// threads of VPT / 2 vectors that `row_launch` gives its rows, with that team's sum to the bit
// (`kHalves` in `aligned_row_kernel`): the fused add's 4096-wide 16-bit rows (256 threads of two
// vectors for 512 of one) and the dynamic norm's rows of 256 and 512 threads of two vectors
// (128 or 256 of four). Halves teams are never spread over a cluster (`cluster_for_team`).
template <bool ADD, bool NORM, int QUANT, int TEAM, int VPT>
constexpr bool halves_kernel() {
  return (ADD && NORM && QUANT == kNone && TEAM == 256 && VPT == 2) ||
         (!ADD && NORM && QUANT == kDynamic && (TEAM == 128 || TEAM == 256) && VPT == 4);
}
static_assert(cluster_for_team(256) == 1, "halves_kernel: its teams reduce within one block");

// The same computation for the usual layout: every row pointer 16-byte aligned, the width a
// whole number of vectors, ungrouped rows and the variance over the whole row (the host checks;
// any hidden size that is a multiple of 8 in contiguous tensors). No scalar head, tail or
// fallback path and no per-row plan: each thread holds VPT vectors as packed words (`Words`),
// unpacked to floats only where an element is used. The arithmetic is `row_kernel`'s, except
// that each thread sums its squares in four chains (`row_kernel` in one), so the two may differ
// in the last bits of the variance; which kernel a row takes depends on its width and layout,
// never on the batch. CLUSTER > 1 spreads each row over a thread block cluster (`cluster.cuh`):
// the same lanes and the same reduction tree, so the same bits, as one block. EVICT marks the
// rows' loads (x and the residual) evict-first (`load_evict_first`): a hint, the same bits.
// The residual is added by the paired 16-bit add (`add_words`), or where FLOAT_ADD in float32
// and rounded (`float_add_kernel`): the same bits. TOGETHER puts a block barrier between the
// reduction and the stores of short fp8 rows (`stores_together`): the same bits. RELOAD reads
// the row (x and the residual) evict-last for its sum, then again, evict-first from L2, for the
// output, instead of holding it in registers through the reduction (`reload_rows`; the weight
// is loaded and held as elsewhere); the residual's sum is stored after the second read: the
// same bits. SPLIT > 1 shares each row among SPLIT blocks (`split_rows`): every one loads and
// reduces the whole row, as one block would, then normalizes and stores only its slice, the
// vectors [s, s + 1) * TEAM * VPT / SPLIT of block s; the same bits.
template <typename T, int TEAM, int VPT, bool ADD, bool NORM, int QUANT, bool LATE, int CLUSTER,
          bool EVICT = false, bool FLOAT_ADD = false, bool TOGETHER = false, bool RELOAD = false, int SPLIT = 1>
__global__ void __launch_bounds__(aligned_block_threads(TEAM, TOGETHER) / CLUSTER)
    aligned_row_kernel(AlignedArgs<ADD, NORM, T> a) {
  await_previous_grid();
  static_assert(!TOGETHER || (!ADD && !NORM && QUANT == kDynamic && CLUSTER == 1),
                "TOGETHER is for the fp8 rows without a norm (`stores_together`)");
  static_assert(!RELOAD || (NORM && QUANT == kNone && !LATE && CLUSTER == 1 && !EVICT && !FLOAT_ADD),
                "RELOAD is for the plain norms' rows (`reload_rows`)");
  static_assert(SPLIT == 1 || (NORM && !ADD && QUANT != kDynamic && CLUSTER == 1 && !RELOAD &&
                                (TEAM * VPT) % SPLIT == 0),
                "SPLIT is for the norms without a residual or a dynamic scale (`split_kernel`)");
  constexpr int team = TEAM;
  constexpr int kBlockThreads = aligned_block_threads(TEAM, TOGETHER);
  const RowSlot slot = aligned_row_slot<TEAM, CLUSTER, SPLIT, kBlockThreads>(a);
  // Reductions over the row's team: the sum of squares or absmax, then the dynamic norm's
  // absmax (of x * w or of the outputs, `kEarlyMax`).
  RowExchange<TEAM, CLUSTER, NORM && QUANT == kDynamic ? 2 : 1> exchange;
  using W = Words<T>;
  constexpr int V = 4 * W::kPerWord;  // elements per 16-byte vector
  using FP8Pairs = VecN<uint16_t, V / 2>;  // V fp8 values, converted two at a time
  const int lane = slot.lane;
  const bool active = slot.active;
  const int token = slot.token;
  // The dynamic norm's halves kernels take only rows that fill their tile (`launch_typed`): no
  // vector lies past the row, so no load or store is bounded. ptxas then issues the row's
  // loads together and its stores without branches; with the bounds, those kernels ran 6-11 %
  // slower than without past the L2 (H200, 4096 x 8192 28.46 against 25.63 µs).
  constexpr bool kFillsTile = halves_kernel<ADD, NORM, QUANT, TEAM, VPT>() && QUANT == kDynamic;
  const int nvec = kFillsTile ? TEAM * VPT : static_cast<int>(static_cast<unsigned>(a.width) / V);  // a shift
  // Short rows without a norm (fp8 groups: a team of 8 for 128 bf16 elements) give each thread
  // VPT adjacent vectors, so its fp8 outputs leave in one store of VPT * V bytes, as in Triton's
  // group quant (their one reduction, a maximum, is exact in any order). H100, against vectors
  // `team` apart (cuda-kernels-notes-H100.md, round 18): group quant 1024 x 4096 3.30 to 3.09
  // µs, 4096 x 2048 5.00 to 4.89; per-token rows (teams of 128 and more) ran slower at 8192
  // wide, so they and the norms (the sum's order) keep their vectors `team` apart.
  constexpr bool kAdjacent = !NORM && TEAM <= 32;
  auto vector_at = [&](int k) { return kAdjacent ? lane * VPT + k : lane + k * team; };
  // whether vector j of the row is this block's to store (`SPLIT`)
  constexpr int kSliceVectors = TEAM * VPT / SPLIT;
  const int slice = static_cast<int>(blockIdx.x & static_cast<unsigned>(SPLIT - 1));
  auto owns = [&](int j) { return SPLIT == 1 || j / kSliceVectors == slice; };

  const auto* x = reinterpret_cast<const Words4*>(a.x + row_offset(token, a.x_stride));
  const Words4* res = nullptr;
  Words4* res_out = nullptr;
  if constexpr (ADD) {
    res = reinterpret_cast<const Words4*>(a.residual + row_offset(token, a.residual_stride));
    res_out = reinterpret_cast<Words4*>(a.residual_out + row_offset(token, a.residual_out_stride));
  }
  const Words4* weight = nullptr;
  if constexpr (NORM) weight = a.weight != nullptr ? reinterpret_cast<const Words4*>(a.weight) : nullptr;
  float inv_static_scale = 1.f;  // the scalars the row's end needs, loaded after the row
  float scale_ub = 0.f;
  if constexpr (QUANT == kStatic) {
    // the scale is first used after the reduction, where ptxas places its load (`prefetch_l1`)
    if (a.prefetch_scale && threadIdx.x == 0) prefetch_l1(a.scale);
  }

  // The dynamic norm's outputs are (x * w) * inv_rms, inv_rms > 0 being the row's, and every
  // rounding is monotonic: the largest |output| is the largest |x * w| times inv_rms, rounded to
  // T, bitwise the maximum of the rounded outputs. Where x * w is formed before the row's sum
  // (not LATE) that maximum is reduced with the sum (one exchange) instead of after normalizing
  // the row.
  constexpr bool kEarlyMax = NORM && QUANT == kDynamic && !LATE;
  // A halves kernel (`halves_kernel`) stands in for the team of 2 * TEAM threads of VPT / 2
  // vectors each and must sum as that team does: its thread t holds vectors t + k * TEAM, those
  // of the wider team's threads t (k even) and t + TEAM (k odd), and that team's tree over its
  // warps (neighbours first) adds the sums of its two halves last. So each half's partial is
  // kept apart (its vectors chained in the wider team's order), both are reduced over the TEAM
  // threads at once and then added: the same bits.
  constexpr bool kHalves = halves_kernel<ADD, NORM, QUANT, TEAM, VPT>() && CLUSTER == 1;
  constexpr int kParts = kHalves ? 2 : 1;
  float parts[kParts] = {};  // the thread's partial reductions (kHalves: one per half)
  Words4 xs[VPT];  // x, or x + residual rounded to T; zeros past the row
  Words4 ws[VPT];  // the weight (where there is one: only then read)
  float xw[NORM ? VPT * V : 1];  // the norms: x * w, element by element
  // The quantizers without a norm: x unpacked once, used by the maximum and by the stores.
  // Unpacking it again after the reduction cost the bf16 group kernel 16 instructions a thread
  // (the first unpacking sits behind `active`, so the compiler did not reuse it), and within
  // the L2 that kernel is bound by what its warps issue (cuda-kernels-notes-H100.md, round 33).
  float xq[NORM ? 1 : VPT * V];
  float acc = 0.f;
  float xw_absmax = 0.f;  // kEarlyMax: the thread's largest |x * w|
  // xs += the residual `rs` rounded to T (FLOAT_ADD: added in float32), the sum stored where
  // `store`
  auto add_residual = [&](const Words4* rs, bool store) {
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int j = vector_at(k);
      if (j < nvec) {
        if constexpr (FLOAT_ADD) {
          float f[V], r[V];
          unpack_words<T>(xs[k], f);
          unpack_words<T>(rs[k], r);
#pragma unroll
          for (int e = 0; e < V; ++e) f[e] += r[e];
          xs[k] = pack_words<T>(f);
        } else {
          xs[k] = add_words<T>(xs[k], rs[k]);
        }
        if (store) res_out[j] = xs[k];
      }
    }
  };
  // xw = x * w from the row in registers (x alone where LATE: the weight comes in later)
  auto weigh_row = [&]() {
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      float* f = xw + k * V;
      unpack_words<T>(xs[k], f);
      // a select, not a branch around the products: ptxas then keeps the weight's load beside
      // x's (with a branch, or ws zeroed first, it sank one load below the first shuffle)
      float w[V];
      unpack_words<T>(ws[k], w);
#pragma unroll
      for (int e = 0; e < V; ++e) f[e] = !LATE && weight != nullptr ? f[e] * w[e] : f[e];
    }
  };
  if (active) {
    // Every load of the row is issued before the first store. A store may alias a later load
    // (the in-place fused add writes over x and the residual), so the compiler keeps them in
    // program order: a store between two loads costs a whole memory round trip.
    Words4 rs[ADD ? VPT : 1];
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int j = vector_at(k);
      const bool in_row = j < nvec;
      // (the plain loads written as before EVICT existed: a helper returning either form
      // moved ptxas's schedule, and the fused add + static fp8 at 1024 x 2048 lost 7 %)
      if constexpr (EVICT) {
        xs[k] = load_evict_first(x + j, in_row);
        if constexpr (ADD) rs[k] = load_evict_first(res + j, in_row);
      } else if constexpr (RELOAD) {
        xs[k] = load_evict_last(x + j, in_row);
        if constexpr (ADD) rs[k] = load_evict_last(res + j, in_row);
      } else {
        xs[k] = in_row ? x[j] : fill4(0u);
        if constexpr (ADD) rs[k] = in_row ? res[j] : fill4(0u);
      }
      // pinned (`load_now`) unless LATE: then ptxas issues it after the row's first shuffles;
      // a split row's block loads its slice's only
      const bool weighed = in_row && weight != nullptr && owns(j);
      if (!LATE && weighed) ws[k] = load_now(weight + j);
      if (LATE && weighed) ws[k] = weight[j];
    }
    if constexpr (QUANT == kStatic) inv_static_scale = fast_reciprocal(load_now(a.scale));
    if constexpr (QUANT == kDynamic) {
      if (has_scale_ub(a)) scale_ub = load_now(a.scale_ub);
    }
    // with the loads in flight (every thread is active where the row may be spread)
    exchange.begin();
    // (RELOAD: the sum is stored after the second read)
    if constexpr (ADD) add_residual(rs, !RELOAD);
    // the thread's part of the reduction in four independent chains, one per word of a vector,
    // joined at the end: a quarter of one running accumulator's dependent steps (at decode sizes
    // the chain between a row's loads and its first store is its time). A tree over each
    // vector held its unpacked elements at once: 38 registers against 32 for bf16 rms_norm.
    // kHalves: each half's own chains, its partial kept apart.
#pragma unroll
    for (int half = 0; half < kParts; ++half) {
      float chain[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int k = half; k < VPT; k += kParts) {
        float f[V];
        unpack_words<T>(xs[k], f);
#pragma unroll
        for (int e = 0; e < V; ++e) {
          float& c = chain[e / W::kPerWord];
          c = NORM ? fmaf(f[e], f[e], c) : fmaxf(c, fabsf(f[e]));
          if constexpr (!NORM) xq[k * V + e] = f[e];
        }
      }
      parts[half] = tree_reduce<4>(chain, std::conditional_t<NORM, SumOp, MaxOp>{});
    }
    acc = parts[0];
    if constexpr (NORM && !RELOAD) {
      // x * w before the reduction unless LATE: ptxas issues a load just before its first use
      // (see `late_weight` for when that helps); the arithmetic is the same either way
      weigh_row();
      if constexpr (kEarlyMax) {
        float chain[4] = {0.f, 0.f, 0.f, 0.f};  // four independent chains, as for the sum
#pragma unroll
        for (int i = 0; i < VPT * V; ++i) chain[i % 4] = fmaxf(chain[i % 4], fabsf(xw[i]));
        xw_absmax = tree_reduce<4>(chain, MaxOp{});
      }
    }
  }

  float inv_rms = 1.f;
  if constexpr (kHalves && kEarlyMax) {
    float upper = parts[1];
    exchange.reduce(0, reducing(acc, SumOp{}), reducing(upper, SumOp{}), reducing(xw_absmax, MaxOp{}));
    inv_rms = rsqrtf((acc + upper) * a.inv_var_size + a.eps);
  } else if constexpr (kHalves) {
    float upper = parts[1];
    exchange.reduce(0, reducing(acc, SumOp{}), reducing(upper, SumOp{}));
    inv_rms = rsqrtf((acc + upper) * a.inv_var_size + a.eps);
  } else if constexpr (kEarlyMax) {
    exchange.reduce(0, reducing(acc, SumOp{}), reducing(xw_absmax, MaxOp{}));
    inv_rms = rsqrtf(acc * a.inv_var_size + a.eps);
  } else if constexpr (NORM) {
    inv_rms = rsqrtf(exchange.reduce(acc, SumOp{}, 0) * a.inv_var_size + a.eps);
  }
  if constexpr (RELOAD) {
    // the row read again (from L2, where its first read asked it kept), the residual added and
    // its sum stored as before, and x * w formed as before the reduction of the other kernels.
    // The weight is the one loaded with the first read and held (H200 A/B against loading it
    // here: fused add 4096 x 8192 65.11 against 65.57 µs, the rule's other shapes level; round
    // 32 of the notes).
    if (active) {
      Words4 rs[ADD ? VPT : 1];
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const int j = vector_at(k);
        const bool in_row = j < nvec;
        xs[k] = load_evict_first(x + j, in_row);
        if constexpr (ADD) rs[k] = load_evict_first(res + j, in_row);
      }
      if constexpr (ADD) add_residual(rs, true);
      weigh_row();
    }
  }
  // y of vector k before rounding to T: (x * w) * inv_rms for the norms (the reference's
  // (x * inv_rms) * w within a float32 rounding), x otherwise
  auto normed_raw = [&](int k, float* y) {
    if constexpr (NORM) {
      if (LATE && weight != nullptr) {
        float w[V];
        unpack_words<T>(ws[k], w);
#pragma unroll
        for (int e = 0; e < V; ++e) y[e] = (xw[k * V + e] * w[e]) * inv_rms;
      } else {
#pragma unroll
        for (int e = 0; e < V; ++e) y[e] = xw[k * V + e] * inv_rms;
      }
    } else {
      unpack_words<T>(xs[k], y);
    }
  };

  float inv_scale = inv_static_scale;
  float scale = 1.f;  // the dynamic one
  if constexpr (QUANT == kDynamic) {
    if constexpr (NORM) {
      // the normalized row, rounded to T, replaces x in registers: computed once for the
      // output (and, where LATE, the absmax)
      float chain[4] = {0.f, 0.f, 0.f, 0.f};  // as for the sum of squares
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        float y[V];
        normed_raw(k, y);
        xs[k] = pack_words<T>(y);
        if constexpr (!kEarlyMax) {
          unpack_words<T>(xs[k], y);
#pragma unroll
          for (int e = 0; e < V; ++e) chain[e / W::kPerWord] = fmaxf(chain[e / W::kPerWord], fabsf(y[e]));
        }
      }
      if constexpr (!kEarlyMax) acc = tree_reduce<4>(chain, MaxOp{});
    }
    float amax = kEarlyMax ? W::round(xw_absmax * inv_rms) : exchange.reduce(acc, MaxOp{}, NORM ? 1 : 0);
    // TOGETHER: the block's rows store only after all of them have their maximum
    if constexpr (TOGETHER) amax = after_block_barrier<kBlockThreads>(amax);
    scale = dynamic_scale(a, amax, scale_ub);
    inv_scale = fast_reciprocal(scale);
  }
  if (!active) return;  // no reductions follow

  if constexpr (kAdjacent && QUANT != kNone) {
    // the thread's VPT vectors as one run of fp8 values where the run is in the row and its
    // address aligned to its size (16 bytes for two bf16 vectors); else vector by vector (the
    // loop below does the same, but written here ptxas keeps the run's store on the straight
    // path instead of behind a taken branch)
    using FP8Run = VecN<uint16_t, VPT * V / 2>;
    auto* out_row = static_cast<uint8_t*>(a.out) + row_offset(token, a.out_stride);
    const int first = lane * VPT;
    if (first + VPT <= nvec && aligned(out_row, static_cast<int>(sizeof(FP8Run)))) {
      FP8Run q;
#pragma unroll
      for (int k = 0; k < VPT; ++k) to_fp8_pairs<V>(xq + k * V, inv_scale, q.v + k * V / 2);
      reinterpret_cast<FP8Run*>(out_row)[lane] = q;
    } else {
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        if (first + k >= nvec) continue;
        FP8Pairs q;
        to_fp8_pairs<V>(xq + k * V, inv_scale, q.v);
        reinterpret_cast<FP8Pairs*>(out_row)[first + k] = q;
      }
    }
    if constexpr (QUANT == kDynamic) write_scale(a, slot, scale);
    return;
  }
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int j = vector_at(k);
    if (j >= nvec || !owns(j)) continue;
    float y[V];
    if constexpr (QUANT == kNone) {
      normed_raw(k, y);
      reinterpret_cast<Words4*>(static_cast<T*>(a.out) + row_offset(token, a.out_stride))[j] = pack_words<T>(y);
    } else {
      // y rounded to T, as the unfused ops would pass it on (dynamic: already in xs)
      if constexpr (!NORM) {
#pragma unroll
        for (int e = 0; e < V; ++e) y[e] = xq[k * V + e];
      } else if constexpr (QUANT == kDynamic) {
        unpack_words<T>(xs[k], y);
      } else {
        normed_raw(k, y);
        round_pairs<T, V>(y);
      }
      FP8Pairs q;
      to_fp8_pairs<V>(y, inv_scale, q.v);
      reinterpret_cast<FP8Pairs*>(static_cast<uint8_t*>(a.out) + row_offset(token, a.out_stride))[j] = q;
    }
  }
  // after the row's stores: its address arithmetic then overlaps their flight rather than
  // delaying them
  if constexpr (QUANT == kDynamic) write_scale(a, slot, scale);
}

struct RowTensors {
  at::Tensor* out = nullptr;
  at::Tensor* residual_out = nullptr;
  const at::Tensor* x = nullptr;
  const at::Tensor* residual = nullptr;
  const at::Tensor* weight = nullptr;
  const at::Tensor* scale = nullptr;
  const at::Tensor* scale_ub = nullptr;
  at::Tensor* scale_out = nullptr;
  int64_t groups = 1;
  int64_t scale_token_stride = 0;
  int64_t scale_group_stride = 0;
  std::optional<int64_t> variance_size;
  double epsilon = 0.0;
};

// How a call's rows are loaded, chosen per call from its batch: hints, the same arithmetic.
struct RowLoads {
  bool late_weight = false;  // the weight after the row's first shuffles (`LATE`; plain norms)
  bool evict_first = false;  // x and the residual evict-first (`EVICT`; the fused add)
  bool float_add = false;    // the residual added in float32 (`FLOAT_ADD`; `float_add_kernel`)
  bool reload = false;       // the row read again after its sum (`RELOAD`; `reload_rows`)
  bool split = false;        // each row shared by kRowSplit blocks (`SPLIT`; `split_rows`)
  bool together = false;     // blocks of rows that store together (`TOGETHER`; `together_kernel`)
};

// Blocks a split row is shared by (`SPLIT`), and the batches that split their rows: up to
// kSplitRows rows, so that a launch takes at most 64 blocks.
constexpr int kRowSplit = 4;
constexpr int64_t kSplitRows = 16;

// Whether the kernel of a team of TEAM, VPT vectors a thread, has a SPLIT form: rms_norm and
// its static fp8 form where teams of 256 or 512 threads hold two vectors each (16-bit rows of
// 4096 and 8192 elements, float32 of 4096). H200, same-process A/B against rows in one block
// (4096) or a cluster (8192), cuda-kernels-notes-H100.md round 34: rms_norm 1-16 x 8192 4-7 %
// faster, the static norm 1-16 x 4096 6-11 %, the other shapes level. Split, the dynamic
// norm (every block normalizes its whole row for the scale) ran 6-11 % slower at 8192 wide,
// and the fused adds 7-15 % slower at 8192 and level at 2048 and 4096.
template <bool ADD, bool NORM, int QUANT, int TEAM, int VPT>
constexpr bool split_kernel() {
  return NORM && !ADD && QUANT != kDynamic && TEAM >= 256 && VPT == 2;
}

// Whether the kernel of a team of TEAM, VPT vectors a thread, has a RELOAD form: the plain norms
// of 16-bit rows held by a team of 512 (8192 to 16384 elements, two or four vectors a thread:
// the widths `reload_rows` picks), so that the build does not grow by a kernel for every team.
template <typename T, bool NORM, int QUANT, bool LATE, int TEAM, int VPT>
constexpr bool reload_kernel() {
  return NORM && QUANT == kNone && !LATE && sizeof(T) == 2 && TEAM == 512 && VPT >= 2;
}

// Whether the fused add's kernel of a team of TEAM, VPT vectors a thread, has a FLOAT_ADD form:
// the 16-bit rows' teams of 256, whose batches past kFewRows run as one wave of full SMs (one
// vector a thread, 2048 wide; two, the 4096-wide `kHalves`). There the paired add lost on an
// H100 (cuda-kernels-notes-H100.md, round 25): fused add 1024 x 2048 4.00 to 4.19 µs, where
// ptxas also issues the residual's store after the row's shuffles rather than before, and 1024 x
// 4096 7.15 to 7.62, its 37 registers against 32 fitting 6 blocks an SM instead of 8, so that
// the batch no longer took one wave. Up to kFewRows rows it won (128 x 2048 1.86 to 1.79).
template <typename T, bool ADD, int TEAM, int VPT>
constexpr bool float_add_kernel() {
  return ADD && sizeof(T) == 2 && TEAM == 256 && VPT <= 2;
}

// The team of the fp8 groups streamed from DRAM (`streamed_short_rows`), one vector a thread.
constexpr int kStreamedGroupTeam = 16;

// Whether rows of a team of TEAM, VPT vectors a thread, store together (`TOGETHER`): the fp8
// groups streamed from DRAM (`streamed_short_rows`, the only launch of short rows without a norm
// one vector a thread), as Triton's group kernel orders them (its block barrier after the
// reduction). H100, same-process A/B against round 26's teams of 4 (cuda-kernels-notes-H100.md,
// round 27): group quant 16384 x 8192 134.67 to 133.70 µs, 4096 x 8192 35.68 to 35.09. Teams
// of 8 within the L2 storing together were level at best with storing row by row in the op's
// A/B (1024 x 8192 4.72 to 4.76), though the layout probe had them 4 % ahead.
template <bool ADD, bool NORM, int QUANT, int TEAM, int VPT>
constexpr bool stores_together() {
  return !ADD && !NORM && QUANT == kDynamic && TEAM == kStreamedGroupTeam && VPT == 1;
}

// Whether the kernel of a team of TEAM, VPT vectors a thread, has a form whose rows store
// together in blocks of kTogetherThreads (`TOGETHER`, used where `loads.together`): the fp8
// groups of 128 16-bit values, teams of 8 with two vectors each, streamed from DRAM on cards
// with deep loads (`streamed_short_rows`). Triton's group kernel takes a row of up to 8192
// values a program there, its groups storing after a block barrier. H200, layout probe
// (cuda-kernels-notes-H100.md, round 40): group quant 16384 x 8192 95.52 to 94.35 µs, 4096 x
// 8192 25.94 to 25.31, 16384 x 2048 25.82 to 25.32 (Triton 94.36, 25.29, 25.45).
template <bool ADD, bool NORM, int QUANT, int TEAM, int VPT>
constexpr bool together_kernel() {
  return !ADD && !NORM && QUANT == kDynamic && TEAM == 8 && VPT == 2;
}

// Launches `aligned_row_kernel` for a team of TEAM, each row spread over a cluster of
// `cluster_for_team(TEAM)` blocks where `spread`, else its rows marked evict-first where
// `loads.evict_first` (the fused adds only: `just_over_l2`), else added in float32 where
// `loads.float_add` and the kernel has that form.
template <typename T, bool ADD, bool NORM, int QUANT, int VPT, bool LATE, int TEAM>
void launch_team(const AlignedArgs<ADD, NORM, T>& args, bool spread, const RowLoads& loads, cudaStream_t stream) {
  constexpr int kCluster = cluster_for_team(TEAM);
  const auto rows = static_cast<unsigned>(args.rows);
  const unsigned threads = row_block_threads(TEAM);
  if constexpr (split_kernel<ADD, NORM, QUANT, TEAM, VPT>()) {
    if (loads.split) {
      launch(aligned_row_kernel<T, TEAM, VPT, ADD, NORM, QUANT, LATE, 1, false, false, false, false, kRowSplit>,
             dim3(rows * kRowSplit), dim3(threads), stream, args);
      return;
    }
  }
  if constexpr (kCluster > 1) {
    constexpr auto kSpread = aligned_row_kernel<T, TEAM, VPT, ADD, NORM, QUANT, LATE, kCluster>;
    // where no cluster fits, one block a row: the same bits, only slower
    if (spread && cluster_fits<kSpread>(threads / kCluster, kCluster)) {
      launch_cluster(kSpread, dim3(rows * kCluster), dim3(threads / kCluster), kCluster, stream,
                     args);
      return;
    }
  }
  if constexpr (together_kernel<ADD, NORM, QUANT, TEAM, VPT>()) {
    if (loads.together) {
      constexpr unsigned kThreads = aligned_block_threads(TEAM, true);
      constexpr unsigned kRowsPerBlock = kThreads / TEAM;
      launch(aligned_row_kernel<T, TEAM, VPT, ADD, NORM, QUANT, LATE, 1, false, false, true>,
             dim3((rows + kRowsPerBlock - 1) / kRowsPerBlock), dim3(kThreads), stream, args);
      return;
    }
  }
  const unsigned rows_per_block = threads / TEAM;
  const dim3 grid((rows + rows_per_block - 1) / rows_per_block);
  constexpr bool kTogether = stores_together<ADD, NORM, QUANT, TEAM, VPT>();
  auto kernel = aligned_row_kernel<T, TEAM, VPT, ADD, NORM, QUANT, LATE, 1, false, false, kTogether>;
  if constexpr (reload_kernel<T, NORM, QUANT, LATE, TEAM, VPT>()) {
    if (loads.reload) {
      auto reload = aligned_row_kernel<T, TEAM, VPT, ADD, NORM, QUANT, LATE, 1, false, false, false, true>;
      if constexpr (ADD && VPT == 2) {
        // The fused add's rows of 8192 at two blocks an SM (Triton's kernel, at 40 registers a
        // thread, runs three): H200, 16384 x 8192 255.26 to 248.92 µs, 4096 x 8192 65.28 to
        // 65.04. Rows of 16384 (four vectors a thread) ran 1.8-2.5 % slower so, and rms_norm
        // (with 56 KB reserved) 15-21 % slower (round 41 of cuda-kernels-notes-H100.md).
        launch_two_blocks_an_sm(reload, grid, dim3(threads), stream, args);
      } else {
        launch(reload, grid, dim3(threads), stream, args);
      }
      return;
    }
  }
  if constexpr (ADD) {
    if (loads.evict_first) {
      kernel = aligned_row_kernel<T, TEAM, VPT, ADD, NORM, QUANT, LATE, 1, true>;
    } else if constexpr (float_add_kernel<T, ADD, TEAM, VPT>()) {
      if (loads.float_add) kernel = aligned_row_kernel<T, TEAM, VPT, ADD, NORM, QUANT, LATE, 1, false, true>;
    }
  }
  launch(kernel, grid, dim3(threads), stream, args);
}

// Launches `aligned_row_kernel` for the one of TEAMS equal to `team`; false if none is.
template <typename T, bool ADD, bool NORM, int QUANT, int VPT, bool LATE, int... TEAMS>
bool launch_aligned(const AlignedArgs<ADD, NORM, T>& args, int team, bool spread, const RowLoads& loads,
                    cudaStream_t stream) {
  return ((team == TEAMS &&
           (launch_team<T, ADD, NORM, QUANT, VPT, LATE, TEAMS>(args, spread, loads, stream), true)) ||
          ...);
}

// A decode-size batch of wide rows is bound by each row's SM: spread each row over a cluster
// of blocks while the batch's blocks still fit the chip once (no SM then holds two).
inline bool spread_rows(int64_t rows, int team) {
  const int cluster = cluster_for_team(team);
  return cluster > 1 && rows * cluster <= cluster_sms();
}

template <typename T, bool ADD, bool NORM, int QUANT, int VPT, bool STREAM>
void launch_typed(const RowArgs<T>& args, const RowLaunch& l, bool aligned_rows, const RowLoads& loads,
                  cudaStream_t stream) {
  if constexpr (!STREAM) {
    // the teams `row_launch` gives each tile size, as compile-time constants
    if (aligned_rows) {
      const AlignedArgs<ADD, NORM, T> params = aligned_args<ADD, NORM>(args);
      const bool spread = spread_rows(args.rows, l.team);
      bool launched = false;
      if constexpr (VPT == 1) {
        if constexpr (ADD && QUANT == kNone) {
          // Rows not spread that the chip holds at once in blocks of 256 threads of two
          // vectors, summed as the 512 do (`kHalves`): one wave where blocks of 512 need two.
          // H100, 1024 x 4096: 7.98 to 6.84-7.10 µs (Triton 7.06); past one wave the one-vector
          // kernel stays ahead (4096 x 4096 47.35 against 48.2 µs), and decode rows keep their
          // cluster (cuda-kernels-notes-H100.md, round 21). The chip's capacity is the launched
          // form's (`float_add_kernel`).
          constexpr bool kFloatAdd = float_add_kernel<T, ADD, 256, 2>();
          constexpr auto kHalves = aligned_row_kernel<T, 256, 2, ADD, NORM, QUANT, false, 1>;
          constexpr auto kHalvesFloatAdd = aligned_row_kernel<T, 256, 2, ADD, NORM, QUANT, false, 1, false, kFloatAdd>;
          const int held = kFloatAdd && loads.float_add ? resident_blocks<kHalvesFloatAdd>(256)
                                                        : resident_blocks<kHalves>(256);
          if (l.team == 512 && !spread && args.rows <= held) {
            launch_team<T, ADD, NORM, QUANT, 2, false, 256>(params, false, loads, stream);
            return;
          }
        }
        if constexpr (!ADD && !NORM && QUANT == kDynamic) {
          // short rows streamed from DRAM (`streamed_short_rows`)
          launched = launch_aligned<T, ADD, NORM, QUANT, VPT, false, kStreamedGroupTeam>(params, l.team, spread,
                                                                                          loads, stream);
        } else {
          launched = launch_aligned<T, ADD, NORM, QUANT, VPT, false, 256, 512>(params, l.team, spread, loads, stream);
        }
      } else if constexpr (VPT == 2) {
        if constexpr (!ADD && NORM && QUANT == kDynamic) {
          // Rows that fill a tile of 256 or 512 threads of two vectors, in teams of half the
          // threads with four vectors each, summed as the wider team does (`halves_kernel`;
          // Triton's layout): past kFewRows rows, and for the teams of 512 wherever their rows
          // are not spread. H200, against the wider teams in one process
          // (cuda-kernels-notes-H100.md, round 36): 1024 x 8192 6.77 to 6.25 µs, 2048 x 4096 6.50
          // to 5.82, 16384 x 8192 98.91 to 94.24, 192 x 8192 2.96 to 2.82, 48 x 8192 2.15 to
          // 2.06; up to 256 rows of 4096 the halves (four warps) lost 1-11 %, decode sizes most.
          const bool fills_tile = l.team * l.vpt * vec_width<T>() == args.width;
          const bool halves = l.team == 512 || (l.team == 256 && args.rows > kFewRows);
          if (!spread && halves && fills_tile) {
            launched = launch_aligned<T, ADD, NORM, QUANT, 4, false, 128, 256>(params, l.team / 2, false, loads, stream);
          }
        }
        if constexpr (!ADD && NORM && QUANT != kDynamic) {
          if (loads.late_weight) {
            launched = launch_aligned<T, ADD, NORM, QUANT, VPT, true, 8, 16, 32, 64, 128, 256, 512>(
                params, l.team, spread, loads, stream);
          }
        }
        if (!launched) {
          launched = launch_aligned<T, ADD, NORM, QUANT, VPT, false, 8, 16, 32, 64, 128, 256, 512>(
              params, l.team, spread, loads, stream);
        }
      } else {
        launched = launch_aligned<T, ADD, NORM, QUANT, VPT, false, 512>(params, l.team, spread, loads, stream);
      }
      TORCH_CHECK(launched, "ir_cuda: no aligned row kernel for a team of ", l.team, " x ", VPT);
      return;
    }
  }
  if constexpr (VPT == 1) {
    TORCH_CHECK(false, "ir_cuda: one vector a thread is for aligned rows only");
  } else {
    const int64_t rows_per_block = l.threads / l.team;
    const dim3 grid(static_cast<unsigned>((args.rows + rows_per_block - 1) / rows_per_block));
    launch(row_kernel<T, VPT, STREAM, ADD, NORM, QUANT>, grid, dim3(static_cast<unsigned>(l.threads)), stream, args,
           l.team);
  }
}

// Bytes of the distinct tensors among `tensors` (one written in place over another counts once).
int64_t distinct_bytes(std::initializer_list<const at::Tensor*> tensors) {
  int64_t bytes = 0;
  std::vector<const void*> seen;
  for (const at::Tensor* t : tensors) {
    if (std::find(seen.begin(), seen.end(), t->data_ptr()) != seen.end()) continue;
    seen.push_back(t->data_ptr());
    bytes += tensor_bytes(*t);
  }
  return bytes;
}

// An op touching `bytes` overflows the L2 by at most 30 %: its rows read once are better marked
// evict-first, so that the lines the next call reads stay (Triton's hint,
// `ir_kernels_triton.norm_kernels.evict_first_for`: on an H100 the fused add + static fp8 at
// 4096 x 2048 and 1024 x 8192, 56 MB against 50, ran 5-11 % faster with it, the plain fused
// add, 64 MB, 1-3 %; ops within the L2 lost their inputs' lines between calls, ops far over it
// gained nothing).
bool just_over_l2(int64_t bytes) {
  const auto l2 = static_cast<double>(l2_cache_bytes());
  return static_cast<double>(bytes) > l2 && static_cast<double>(bytes) <= 1.3 * l2;
}

// Whether the plain norms read each row again after its sum (`RELOAD`) rather than hold it in
// registers through the reduction, as Triton's kernel (`ir_kernels_triton.norm_kernels.
// reload_for`) and Inductor's looped one do: 16-bit rows of 8192 elements or more (a team of
// 512, `reload_kernel`) whose op touches more than 4 L2 sizes, on cards with deep loads
// (`deep_loads`). The same values and arithmetic, so it may follow the batch and the card. H200,
// both builds in one process (`benchmarks/gpu/cuda_ab.py`, cuda-kernels-notes-H100.md round
// 32): rms_norm 16384 x 8192 127.99 to 126.65 µs, the fused add 259.56 to 253.47; the shapes
// below the line (4096 x 8192 and smaller) unchanged within 0.5 %.
bool reload_rows(int64_t width, int64_t element_size, int64_t bytes) {
  return element_size == 2 && width >= 8192 &&
         static_cast<double>(bytes) > 4.0 * static_cast<double>(l2_cache_bytes()) && deep_loads();
}

// The launch of short rows without a norm (fp8 groups of 128 16-bit values: teams of 8, two
// vectors a thread) where x is over the L2, so that every row streams from DRAM; their blocks
// store together. On cards with deep loads (`deep_loads`) the teams of 8 do, in blocks of
// kTogetherThreads (`loads.together`, `together_kernel`); on the others, teams of 16 with one
// vector a thread in blocks of 128 threads, which always do (`stores_together`). H100, layout
// probe (cuda-kernels-notes-H100.md, round 27): group quant 16384 x 8192 132.87 µs against 134.37
// for round 26's teams of 4 (four vectors a thread) and 135.18 for the same layout storing row
// by row; 4096 x 8192 34.94 against 35.55. On an H200 (round 28) that layout was the slowest of
// those (16384 x 8192 105.48 µs); there the teams of 8 stay and their blocks grow to
// kTogetherThreads (`together_kernel`). A maximum is exact in any order, so the launch may
// follow the batch and the card.
inline RowLaunch streamed_short_rows(const RowLaunch& l, const at::Tensor& x, RowLoads& loads) {
  // (a team of 8 is never streamed in chunks: `row_launch` widens the team first)
  const bool streamed = l.team == 8 && l.vpt == 2 && x.size(0) > kFewRows && tensor_bytes(x) > l2_cache_bytes();
  if (!streamed) return l;
  if (!deep_loads()) return RowLaunch{kStreamedGroupTeam, 1, false, row_block_threads(kStreamedGroupTeam)};
  loads.together = true;
  return l;
}

// Whether the bytes of `a` and `b` overlap (host side).
bool overlapping(const at::Tensor& a, const at::Tensor& b) {
  auto span = [](const at::Tensor& t) {
    const auto* first = static_cast<const char*>(t.data_ptr());
    const int64_t last = (t.size(0) - 1) * t.stride(0) + t.size(1);
    return std::make_pair(first, first + last * static_cast<int64_t>(t.element_size()));
  };
  const auto [a_first, a_end] = span(a);
  const auto [b_first, b_end] = span(b);
  return a_first < b_end && b_first < a_end;
}

// Whether the aligned rows of launch `l` are each shared by kRowSplit blocks (`SPLIT`): a
// decode-size batch whose rows take a `split_kernel` and whose output does not overlap x (a
// block's stores would then overwrite what another still reads). Every block reduces the whole
// row in the usual order, so a row's bits do not depend on the split, and the rule may follow
// the batch.
bool split_rows(int64_t tokens, const RowLaunch& l, const at::Tensor& x, const at::Tensor& out) {
  return tokens <= kSplitRows && !l.stream && l.vpt == 2 && l.team >= 256 && !overlapping(x, out);
}

template <bool ADD, bool NORM, int QUANT>
void launch_rows(const RowTensors& t) {
  const at::Tensor& x = *t.x;
  check_rows(x, "x");
  const int64_t tokens = x.size(0), hidden = x.size(1);
  if constexpr (QUANT == kNone) {
    check_same(*t.out, "out", x);
  } else {
    check_fp8(*t.out, "out", x.sizes());
  }
  if constexpr (ADD) {
    check_same(*t.residual_out, "residual_out", x);
    check_same(*t.residual, "x_residual", x);
  }
  if (t.weight != nullptr) {
    TORCH_CHECK(on_kernel_device(*t.weight) && t.weight->is_contiguous() && t.weight->numel() == hidden &&
                    t.weight->scalar_type() == x.scalar_type(),
                "ir_cuda: weight must be contiguous, of x's hidden size ", hidden, " and dtype ",
                x.scalar_type());
  }
  if (t.scale != nullptr) check_scale(*t.scale, "scale", x);
  if (t.scale_ub != nullptr) check_scale(*t.scale_ub, "scale_ub", x);
  const int64_t width = hidden / t.groups;
  TORCH_CHECK(width <= std::numeric_limits<int>::max(), "ir_cuda: rows of ", width,
              " elements are wider than the kernels address (2^31 - 1)");
  const int64_t var_size = t.variance_size.value_or(width);
  TORCH_CHECK(var_size > 0 && var_size <= width, "ir_cuda: variance_size must be in 1..", width,
              ", got ", var_size);
  TORCH_CHECK(tokens * t.groups <= std::numeric_limits<int>::max(), "ir_cuda: ", tokens,
              " rows are more than the kernels address (2^31 - 1)");
  if (tokens == 0 || hidden == 0) return;
  const DeviceScope scope(x);
  const cudaStream_t stream = scope.stream;
  IR_CUDA_DISPATCH_FLOAT(x.scalar_type(), "rows", [&] {
    using T = scalar_t;
    RowArgs<T> args{};
    args.out = t.out->data_ptr();
    args.out_stride = row_stride(*t.out, "out");
    args.x = x.const_data_ptr<T>();
    args.x_stride = row_stride(x, "x");
    if constexpr (ADD) {
      args.residual_out = t.residual_out->data_ptr<T>();
      args.residual_out_stride = row_stride(*t.residual_out, "residual_out");
      args.residual = t.residual->const_data_ptr<T>();
      args.residual_stride = row_stride(*t.residual, "x_residual");
    }
    args.weight = t.weight != nullptr ? t.weight->const_data_ptr<T>() : nullptr;
    // the dynamic quantizers' fields share the fused add's (the unions in RowArgs)
    static_assert(!(ADD && QUANT == kDynamic), "RowArgs: no fused add with dynamic scales");
    if constexpr (QUANT == kStatic) {
      args.scale = t.scale->const_data_ptr<float>();
    } else if constexpr (QUANT == kDynamic) {
      args.scale_ub = t.scale_ub != nullptr ? t.scale_ub->const_data_ptr<float>() : nullptr;
      args.scale_out = t.scale_out->data_ptr<float>();
      args.scale_token_stride = stride_32(t.scale_token_stride, "scale_out's token stride");
      args.scale_group_stride = stride_32(t.scale_group_stride, "scale_out's group stride");
    }
    args.prefetch_scale = t.scale != nullptr && tokens <= kFewRows;
    args.rows = static_cast<int>(tokens * t.groups);
    args.groups = static_cast<int>(t.groups);
    args.groups_shift = (t.groups & (t.groups - 1)) == 0 ? log2_of(static_cast<int>(t.groups)) : -1;
    args.width = static_cast<int>(width);
    args.var_size = static_cast<int>(var_size);
    args.inv_var_size = 1.f / static_cast<float>(var_size);
    args.eps = static_cast<float>(t.epsilon);
    constexpr int V = vec_width<T>();
    // whole vectors everywhere: T rows and the weight at 16 bytes, fp8 rows at V bytes
    // (groups of a strided token and a variance over part of the row take `row_kernel`: the
    // aligned kernel's rows are not grouped and their variance covers them whole)
    bool aligned = t.groups == 1 && var_size == width && width % V == 0 && rows_aligned(x, 16) &&
                   rows_aligned(*t.out, QUANT == kNone ? 16 : V) &&
                   (t.weight == nullptr || aligned_host(t.weight->data_ptr(), 16));
    if constexpr (ADD) {
      aligned = aligned && rows_aligned(*t.residual, 16) && rows_aligned(*t.residual_out, 16);
    }
    RowLaunch l = row_launch(width, V, ADD && aligned);
    RowLoads loads;
    if constexpr (!ADD && !NORM && QUANT == kDynamic) {
      if (aligned) l = streamed_short_rows(l, x, loads);
    }
    // The weight's load after the row's first shuffles (LATE), where an H100 A/B run of the
    // grid found it faster (cuda-kernels-notes-H100.md, round 14): plain rms_norm up to 256 rows
    // (1 x 8192: 1.85 to 1.76 µs, 128 x 8192: 2.60 to 2.40) and once its bytes (x and out) are
    // over twice the L2 size, but not in between (4096 x 4096, 64 MB: 21.3 to 22.0); the static
    // norm + quant past decode sizes (1024 x 8192: 6.57 to 6.34). The same arithmetic either
    // way, so it may follow the batch.
    if constexpr (NORM && QUANT == kNone) {
      // (the L2 and the card asked only past kFewRows rows: device calls)
      if (aligned && tokens > kFewRows) {
        const int64_t bytes = ADD ? distinct_bytes({&x, t.residual, t.residual_out, t.out})
                                  : distinct_bytes({&x, t.out});
        loads.reload = reload_rows(width, x.element_size(), bytes);
      }
    }
    if constexpr (!ADD && QUANT == kNone) {
      // x and out are the same size: both over twice the L2 is x alone over it (the L2 is
      // asked only past small batches: a device call); a row read again has its weight loaded
      // with the second read
      loads.late_weight = !loads.reload && (tokens <= kFewRows || tensor_bytes(x) > l2_cache_bytes());
    } else if constexpr (!ADD && QUANT == kStatic) {
      loads.late_weight = tokens > 16;
    }
    if constexpr (NORM && !ADD && QUANT != kDynamic) loads.split = aligned && split_rows(tokens, l, x, *t.out);
    if constexpr (ADD) {
      // (the L2 is asked only past kFewRows: as many rows of one tile, 33 MB at most, fit an
      // H100's; streamed rows take `row_kernel`, which has no hint)
      loads.evict_first = tokens > kFewRows &&
                          just_over_l2(distinct_bytes({&x, t.residual, t.residual_out, t.out}));
      loads.float_add = tokens > kFewRows;
    }
    if (l.stream) {
      launch_typed<T, ADD, NORM, QUANT, 4, true>(args, l, aligned, loads, stream);
    } else if (l.vpt == 1) {
      // one vector a thread: the fused add's aligned rows and the streamed fp8 groups
      if constexpr (ADD || (!NORM && QUANT == kDynamic)) {
        launch_typed<T, ADD, NORM, QUANT, 1, false>(args, l, aligned, loads, stream);
      } else {
        TORCH_INTERNAL_ASSERT(false, "ir_cuda: one vector a thread outside the fused add and fp8 groups");
      }
    } else if (l.vpt == 2) {
      launch_typed<T, ADD, NORM, QUANT, 2, false>(args, l, aligned, loads, stream);
    } else {
      launch_typed<T, ADD, NORM, QUANT, 4, false>(args, l, aligned, loads, stream);
    }
  });
}

const at::Tensor* opt(const std::optional<at::Tensor>& t) { return t.has_value() ? &*t : nullptr; }

}  // namespace

void rms_norm_out(at::Tensor& out, const at::Tensor& x, const std::optional<at::Tensor>& weight,
                  double epsilon, std::optional<int64_t> variance_size) {
  RowTensors t;
  t.out = &out;
  t.x = &x;
  t.weight = opt(weight);
  t.epsilon = epsilon;
  t.variance_size = variance_size;
  launch_rows<false, true, kNone>(t);
}

void fused_add_rms_norm_out(at::Tensor& out, at::Tensor& residual_out, const at::Tensor& x,
                            const at::Tensor& x_residual, const std::optional<at::Tensor>& weight,
                            double epsilon, std::optional<int64_t> variance_size) {
  RowTensors t;
  t.out = &out;
  t.residual_out = &residual_out;
  t.x = &x;
  t.residual = &x_residual;
  t.weight = opt(weight);
  t.epsilon = epsilon;
  t.variance_size = variance_size;
  launch_rows<true, true, kNone>(t);
}

void fused_add_rms_norm_inplace(at::Tensor& x, at::Tensor& x_residual,
                                const std::optional<at::Tensor>& weight, double epsilon,
                                std::optional<int64_t> variance_size) {
  fused_add_rms_norm_out(x, x_residual, x, x_residual, weight, epsilon, variance_size);
}

void rms_norm_static_quant_fp8_out(at::Tensor& out, const at::Tensor& x,
                                   const std::optional<at::Tensor>& weight, double epsilon,
                                   const at::Tensor& scale) {
  RowTensors t;
  t.out = &out;
  t.x = &x;
  t.weight = opt(weight);
  t.epsilon = epsilon;
  t.scale = &scale;
  launch_rows<false, true, kStatic>(t);
}

void fused_add_rms_norm_static_quant_fp8_out(at::Tensor& out, at::Tensor& residual_out,
                                             const at::Tensor& x, const at::Tensor& x_residual,
                                             const std::optional<at::Tensor>& weight,
                                             double epsilon, const at::Tensor& scale) {
  RowTensors t;
  t.out = &out;
  t.residual_out = &residual_out;
  t.x = &x;
  t.residual = &x_residual;
  t.weight = opt(weight);
  t.epsilon = epsilon;
  t.scale = &scale;
  launch_rows<true, true, kStatic>(t);
}

namespace {
void check_scale_out(const at::Tensor& scale_out, const at::Tensor& x, int64_t groups) {
  TORCH_CHECK(on_kernel_device(scale_out) && scale_out.scalar_type() == at::kFloat &&
                  scale_out.dim() == 2 && scale_out.size(0) == x.size(0) &&
                  scale_out.size(1) == groups,
              "ir_cuda: scale_out must be float32 of sizes [", x.size(0), ", ", groups, "], got ",
              scale_out.scalar_type(), " ", scale_out.sizes());
}
}  // namespace

void rms_norm_dynamic_quant_fp8_out(at::Tensor& out, at::Tensor& scale_out, const at::Tensor& x,
                                    const std::optional<at::Tensor>& weight, double epsilon,
                                    const std::optional<at::Tensor>& scale_ub) {
  check_scale_out(scale_out, x, 1);
  RowTensors t;
  t.out = &out;
  t.x = &x;
  t.weight = opt(weight);
  t.epsilon = epsilon;
  t.scale_ub = opt(scale_ub);
  t.scale_out = &scale_out;
  t.scale_token_stride = scale_out.stride(0);
  launch_rows<false, true, kDynamic>(t);
}

void dynamic_quant_fp8_out(at::Tensor& out, at::Tensor& scale_out, const at::Tensor& x,
                           const std::optional<at::Tensor>& scale_ub) {
  check_scale_out(scale_out, x, 1);
  RowTensors t;
  t.out = &out;
  t.x = &x;
  t.scale_ub = opt(scale_ub);
  t.scale_out = &scale_out;
  t.scale_token_stride = scale_out.stride(0);
  launch_rows<false, false, kDynamic>(t);
}

void group_quant_fp8_out(at::Tensor& out, at::Tensor& scale_out, const at::Tensor& x,
                         int64_t group_size) {
  TORCH_CHECK(group_size > 0 && x.dim() == 2 && x.size(1) % group_size == 0,
              "ir_cuda: group_size must be positive and divide the row width ", x.size(-1),
              ", got ", group_size);
  const int64_t groups = x.size(1) / group_size;
  check_scale_out(scale_out, x, groups);
  RowTensors t;
  if (groups > 1 && x.size(0) > 0 && x.is_contiguous() && out.is_contiguous() && scale_out.is_contiguous() &&
      out.sizes() == x.sizes()) {
    // The usual layout: each group is a row of its own, whose scale follows the last one's. A
    // row's address then needs no token and group (a division or shift and a multiply before
    // the first load); the kernel and its results are the same.
    at::Tensor rows_x = x.view({-1, group_size});
    at::Tensor rows_out = out.view({-1, group_size});
    at::Tensor rows_scale = scale_out.view({-1, 1});
    t.out = &rows_out;
    t.x = &rows_x;
    t.scale_out = &rows_scale;
    t.scale_token_stride = 1;
    launch_rows<false, false, kDynamic>(t);
    return;
  }
  t.out = &out;
  t.x = &x;
  t.scale_out = &scale_out;
  t.groups = groups;
  t.scale_token_stride = scale_out.stride(0);
  t.scale_group_stride = scale_out.stride(1);
  launch_rows<false, false, kDynamic>(t);
}

}  // namespace ir_cuda
