// The row kernels of the norm and quantization ops (norm.cu launches them): rms_norm and
// fused_add_rms_norm, alone or followed by static, dynamic (per token) or group (per token
// group) fp8 quantization, and dynamic per-token and per-token-group fp8 quantization.
//
// A team of threads owns one row (for group quantization: one group). Each thread loads its
// part of the row into registers once (16-byte vectors between a scalar head and tail), the team
// reduces (sum of squares, then absmax for dynamic scales) with warp shuffles, and the same
// registers produce the output, so the input is read once. Rows wider than one tile (a team of
// 512, four vectors each) are streamed in chunks and read again from L2 for the output, and so
// are the plain norms' wide 16-bit rows where the op streams far beyond the L2 (`reload_rows`).
//
// Included by norm.cu alone: the kernels and their arguments live in its anonymous namespace.
#pragma once

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

// kGroup: the scales of a norm's token groups (the norm reduces the whole row, the groups' peaks
// their own parts of it); a quantizer without a norm takes its groups as rows (kDynamic).
enum Quant : int { kNone = 0, kStatic = 1, kDynamic = 2, kGroup = 3 };

// Batches of about a row per SM at most (`tuning::kFewRows`): the static-quant norms prefetch
// their scale (`RowArgs::prefetch_scale`), and plain rms_norm loads its weight late
// (`late_weight` in `launch_rows`).
constexpr int64_t kFewRows = tuning::kFewRows;

// Kernel parameters live in a constant bank, and each 64-byte line of it an SM first touches
// is a miss there. These start 16 bytes into a line (at 0x210 on sm_90), so the first 112
// bytes span two lines, which every row kernel reads before its first load. The quantizers'
// fields lay in a third line, read between a row's loads, after its reduction, or (the static
// scale's prefetch flag) before its first load, where its miss stalled the row at decode sizes.
// They now fill the gaps and share the fused add's bytes (no op has both); the norms' fields
// keep their offsets.
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
  // static: prefetch the scale into L1 first (small batches only: a prefetch costs each block
  // hundreds of cycles of its SM's throughput, which large batches pay many times over)
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
  // The fields of the ops added last, in the bank's third line, so that every other kernel's
  // fields keep their places (a field moved into a union changed the code of kernels that never
  // read it): the fused add's dynamic or group scales and the bound of its dynamic absmax
  // (`scale_out` and `scale_ub` share the residual's fields), read after the row's loads, and
  // the log2 of a group's vectors (kGroup), read after its reduction.
  float* add_scale_out;
  const float* add_scale_ub;
  int group_vector_shift;
  // nvcc (CUDA 13) loads every field of a parameter struct of up to 128 bytes at a kernel's
  // entry, and those of a larger one where they are used; the row kernels are tuned in the
  // second form (in the first the norms take about 45 registers a thread instead of 32, and
  // wide rows run slower). So the struct keeps its 152 bytes (and `row_kernel`'s next
  // parameter, `team`, its offset).
  char keep_over_128_bytes[20];
};
static_assert(sizeof(RowArgs<float>) == 152, "RowArgs: fields loaded where used (see above)");
static_assert(offsetof(RowArgs<float>, scale) + sizeof(float*) <= 112,
              "RowArgs: every field a kernel reads before its row's end in the first two lines of the bank");

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

// Where the rows' dynamic or group scales go, and the dynamic absmax's optional upper bound: the
// fields the quantizers share with the residual's, or the fused add's own (ADD).
template <bool ADD, typename T>
__device__ __forceinline__ float* scale_out_of(const RowArgs<T>& a) {
  if constexpr (ADD) {
    return a.add_scale_out;
  } else {
    return a.scale_out;
  }
}
template <bool ADD, typename T>
__device__ __forceinline__ const float* scale_ub_of(const RowArgs<T>& a) {
  if constexpr (ADD) {
    return a.add_scale_ub;
  } else {
    return a.scale_ub;
  }
}
template <bool ADD, typename T>
__device__ __forceinline__ const float* scale_ub_of(const QuantArgs<T>& a) {
  return a.scale_ub;
}

// Whether the dynamic quantizer was given an upper bound of the absmax.
template <bool ADD, typename T>
__device__ __forceinline__ bool has_scale_ub(const QuantArgs<T>& a) {
  return a.has_scale_ub;
}
template <bool ADD, typename T>
__device__ __forceinline__ bool has_scale_ub(const RowArgs<T>& a) {
  return scale_ub_of<ADD>(a) != nullptr;
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

// Threads of a block of `aligned_row_kernel` for a team of TEAM: `row_block_threads`, or
// `together` where it is not 0 (the fp8 groups streamed from DRAM, whose block's rows store
// together: `launch_streamed_groups` in norm.cu).
__host__ __device__ constexpr int aligned_block_threads(int team, int together) {
  return together > 0 ? together : row_block_threads(team);
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
template <bool ADD, typename Args>
__device__ __forceinline__ float dynamic_scale(const Args& a, float amax, float scale_ub) {
  if (has_scale_ub<ADD>(a)) amax = min_keeping_nan(amax, scale_ub);
  return scale_of_absmax(amax);
}

// The team's first lane writes its row's dynamic scale out.
template <bool ADD, typename T>
__device__ __forceinline__ void write_scale(const RowArgs<T>& a, const RowSlot& r, float scale) {
  if (r.active && r.lane == 0) {
    scale_out_of<ADD>(a)[static_cast<int64_t>(r.token) * a.scale_token_stride +
                         static_cast<int64_t>(r.group) * a.scale_group_stride] = scale;
  }
}

// The same for ungrouped rows (the aligned kernel's).
template <bool ADD, typename T>
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
  const float scale_ub = QUANT == kDynamic && scale_ub_of<ADD>(a) != nullptr ? *scale_ub_of<ADD>(a) : 0.f;

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
      for (int s = 0; s < XTile::kSlots; ++s) acc = max_keeping_nan(acc, fabsf(float(xs.at(s))));
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
      for (int s = 0; s < XTile::kSlots; ++s) acc = max_keeping_nan(acc, fabsf(normed(xs, ws, s)));
    }
  }

  float scale = static_scale;
  if constexpr (QUANT == kDynamic) {
    scale = dynamic_scale<ADD>(a, team_reduce(acc, team, MaxOp{}), scale_ub);
    write_scale<ADD>(a, slot, scale);
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
// and rounded (`float_add_kernel`): the same bits. TOGETHER > 0 makes the block TOGETHER threads
// and puts a block barrier between the reduction and the stores of its short fp8 rows
// (`launch_streamed_groups`): the same bits. RELOAD reads the row (x and the residual)
// evict-last for its sum, then again, evict-first from L2, for the
// output, instead of holding it in registers through the reduction (`reload_rows`; the weight
// is loaded and held as elsewhere); the residual's sum is stored after the second read: the
// same bits. SPLIT > 1 shares each row among SPLIT blocks (`split_rows`): every one loads and
// reduces the whole row, as one block would, then normalizes and stores only its slice, the
// vectors [s, s + 1) * TEAM * VPT / SPLIT of block s; the same bits. kGroup quantizes the
// normalized row in groups of 2^group_vector_shift vectors, at most a warp's lanes and at most
// the team (the host checks), each group's scale reduced over its lanes by shuffles.
template <typename T, int TEAM, int VPT, bool ADD, bool NORM, int QUANT, bool LATE, int CLUSTER,
          bool EVICT = false, bool FLOAT_ADD = false, int TOGETHER = 0, bool RELOAD = false, int SPLIT = 1>
__global__ void __launch_bounds__(aligned_block_threads(TEAM, TOGETHER) / CLUSTER)
    aligned_row_kernel(AlignedArgs<ADD, NORM, T> a) {
  await_previous_grid();
  static_assert(TOGETHER == 0 || (!ADD && !NORM && QUANT == kDynamic && CLUSTER == 1 && TOGETHER % TEAM == 0),
                "TOGETHER is for the fp8 rows without a norm (`launch_streamed_groups`)");
  static_assert(!RELOAD || (NORM && QUANT == kNone && !LATE && CLUSTER == 1 && !EVICT && !FLOAT_ADD),
                "RELOAD is for the plain norms' rows (`reload_rows`)");
  static_assert(SPLIT == 1 || (NORM && !ADD && (QUANT == kNone || QUANT == kStatic) && CLUSTER == 1 && !RELOAD &&
                                (TEAM * VPT) % SPLIT == 0),
                "SPLIT is for the norms without a residual or a dynamic or group scale (`split_kernel`)");
  static_assert(QUANT != kGroup || (NORM && !LATE && !EVICT && !FLOAT_ADD && TOGETHER == 0),
                "kGroup rows take the plain and spread forms (`hinted_forms` in norm.cu)");
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
  // loads together and its stores without branches, which the bounds would prevent (a cost
  // that shows past the L2).
  constexpr bool kFillsTile = halves_kernel<ADD, NORM, QUANT, TEAM, VPT>() && QUANT == kDynamic;
  const int nvec = kFillsTile ? TEAM * VPT : static_cast<int>(static_cast<unsigned>(a.width) / V);  // a shift
  // Short rows without a norm (fp8 groups: a team of 8 for 128 bf16 elements) give each thread
  // VPT adjacent vectors, so its fp8 outputs leave in one store of VPT * V bytes, as in Triton's
  // group quant (their one reduction, a maximum, is exact in any order). Wider teams
  // (`tuning::kAdjacentVectorsMaxTeam`: per-token rows, slower so) and the norms (the sum's
  // order) keep their vectors `team` apart.
  constexpr bool kAdjacent = !NORM && TEAM <= tuning::kAdjacentVectorsMaxTeam;
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
  // Unpacking it again after the reduction costs the bf16 group kernel 16 instructions a thread
  // (the first unpacking sits behind `active`, so the compiler does not reuse it), and within
  // the L2 that kernel is bound by what its warps issue.
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
      // (the plain loads written apart from the hinted ones: a helper returning either form
      // moves ptxas's schedule of the plain kernels, and slows them)
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
      if (has_scale_ub<ADD>(a)) scale_ub = load_now(scale_ub_of<ADD>(a));
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
          c = NORM ? fmaf(f[e], f[e], c) : max_keeping_nan(c, fabsf(f[e]));
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
      if constexpr (kEarlyMax && kFillsTile) {
        // Every vector inside the row: each vector's peak by a tree, then the thread's, which
        // is faster than the four chains below where no vector lies past the row. Where some
        // may, the trees would need a select for those vectors, which costs more than it gains.
        float peaks[VPT];
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
          float m[V];
#pragma unroll
          for (int e = 0; e < V; ++e) m[e] = fabsf(xw[k * V + e]);
          peaks[k] = tree_reduce<V>(m, MaxOp{});
        }
        xw_absmax = tree_reduce<VPT>(peaks, MaxOp{});
      } else if constexpr (kEarlyMax) {
        float chain[4] = {0.f, 0.f, 0.f, 0.f};  // four independent chains, as for the sum
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
          // Past the row (x zeros) the weight was never loaded, and 0 times the inf or NaN its
          // registers may hold is NaN, which this maximum would carry into the row's scale. So
          // those vectors are skipped, predicated: cheaper than a select of the weight's words,
          // or a branch taken alike by every thread to skip the test where the row fills the
          // tile.
          if (vector_at(k) >= nvec) continue;
#pragma unroll
          for (int e = 0; e < V; ++e) {
            const int i = k * V + e;
            chain[i % 4] = max_keeping_nan(chain[i % 4], fabsf(xw[i]));
          }
        }
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
    // The weight is the one loaded with the first read and held, which is no slower than
    // loading it here.
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
          for (int e = 0; e < V; ++e) chain[e / W::kPerWord] = max_keeping_nan(chain[e / W::kPerWord], fabsf(y[e]));
        }
      }
      if constexpr (!kEarlyMax) acc = tree_reduce<4>(chain, MaxOp{});
    }
    float amax = kEarlyMax ? W::round(xw_absmax * inv_rms) : exchange.reduce(acc, MaxOp{}, NORM ? 1 : 0);
    // TOGETHER: the block's rows store only after all of them have their maximum
    if constexpr (TOGETHER > 0) amax = after_block_barrier<kBlockThreads>(amax);
    scale = dynamic_scale<ADD>(a, amax, scale_ub);
    inv_scale = fast_reciprocal(scale);
  }
  // kGroup: a group's vectors lie in one slot k of neighbouring lanes (vector j = lane + k * team),
  // so the peaks of every slot's vectors are reduced over a group's lanes by shuffles at once.
  // The normalized row, rounded to T, replaces x in registers, as for the dynamic scale. Vectors
  // past the row form whole groups of their own (the row is whole groups), never stored.
  float group_scale[QUANT == kGroup ? VPT : 1];
  float group_inv_scale[QUANT == kGroup ? VPT : 1];
  if constexpr (QUANT == kGroup) {
    float peak[VPT];
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      float y[V];
      normed_raw(k, y);
      xs[k] = pack_words<T>(y);
      unpack_words<T>(xs[k], y);
#pragma unroll
      for (int e = 0; e < V; ++e) y[e] = fabsf(y[e]);
      peak[k] = tree_reduce<V>(y, MaxOp{});
    }
    for (int offset = 1; offset < (1 << a.group_vector_shift); offset <<= 1) {
#pragma unroll
      for (int k = 0; k < VPT; ++k) peak[k] = max_keeping_nan(peak[k], __shfl_xor_sync(0xffffffffu, peak[k], offset));
    }
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      group_scale[k] = scale_of_absmax(peak[k]);
      group_inv_scale[k] = fast_reciprocal(group_scale[k]);
    }
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
    if constexpr (QUANT == kDynamic) write_scale<ADD>(a, slot, scale);
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
      } else if constexpr (QUANT == kDynamic || QUANT == kGroup) {
        unpack_words<T>(xs[k], y);
      } else {
        normed_raw(k, y);
        round_pairs<T, V>(y);
      }
      float vector_inv_scale = inv_scale;
      if constexpr (QUANT == kGroup) vector_inv_scale = group_inv_scale[k];
      FP8Pairs q;
      to_fp8_pairs<V>(y, vector_inv_scale, q.v);
      reinterpret_cast<FP8Pairs*>(static_cast<uint8_t*>(a.out) + row_offset(token, a.out_stride))[j] = q;
    }
  }
  // after the row's stores: its address arithmetic then overlaps their flight rather than
  // delaying them
  if constexpr (QUANT == kDynamic) write_scale<ADD>(a, slot, scale);
  if constexpr (QUANT == kGroup) {
    // each group's first lane
    if ((lane & ((1 << a.group_vector_shift) - 1)) == 0) {
      float* scales = scale_out_of<ADD>(a) + row_offset(token, a.scale_token_stride);
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const int j = vector_at(k);
        if (j < nvec) scales[row_offset(j >> a.group_vector_shift, a.scale_group_stride)] = group_scale[k];
      }
    }
  }
}

// The norms followed by group quantization where `aligned_row_kernel` does not take the row
// (rows not of whole aligned vectors, groups that are not a power of two of vectors within a
// warp and the team, rows wider than a tile): a block a row. Its threads sum the row's squares
// (with ADD, after adding the residual and storing the sum), then each warp takes whole groups:
// their peak, then their fp8 values and scale. Each pass reads the row again (from L1 or L2).
// The arithmetic is `row_kernel`'s, element by element.
template <typename T, bool ADD>
__global__ void __launch_bounds__(tuning::kGroupNormThreads) group_norm_kernel(RowArgs<T> a, int group_size) {
  await_previous_grid();
  constexpr int kThreads = tuning::kGroupNormThreads;
  const int token = static_cast<int>(blockIdx.x);
  const int tid = static_cast<int>(threadIdx.x);
  const T* x = a.x + row_offset(token, a.x_stride);
  const T* src = x;  // the rounded activations the output comes from: x, or x + residual
  float sum = 0.f;
  if constexpr (ADD) {
    const T* res = a.residual + row_offset(token, a.residual_stride);
    T* res_out = a.residual_out + row_offset(token, a.residual_out_stride);
    for (int i = tid; i < a.width; i += kThreads) {
      const T added = static_cast<T>(float(x[i]) + float(res[i]));
      res_out[i] = added;
      const float f = float(added);
      sum = fmaf(f, f, sum);
    }
    src = res_out;
  } else {
    for (int i = tid; i < a.width; i += kThreads) {
      const float f = float(x[i]);
      sum = fmaf(f, f, sum);
    }
  }
  // (its barrier also makes the residual's sum visible to the block's other threads)
  const float inv_rms = rsqrtf(team_reduce(sum, kThreads, SumOp{}) * a.inv_var_size + a.eps);
  const T* weight = a.weight;
  auto normed = [&](int i) -> float {
    const float y = float(src[i]) * inv_rms;
    return Words<T>::round(weight != nullptr ? y * float(weight[i]) : y);
  };
  uint8_t* out = static_cast<uint8_t*>(a.out) + row_offset(token, a.out_stride);
  float* scales = scale_out_of<ADD>(a) + row_offset(token, a.scale_token_stride);
  const int lane = tid & 31;
  for (int g = tid >> 5; g < a.groups; g += kThreads / 32) {
    const int first = g * group_size, end = first + group_size;
    float peak = 0.f;
    for (int i = first + lane; i < end; i += 32) peak = max_keeping_nan(peak, fabsf(normed(i)));
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      peak = max_keeping_nan(peak, __shfl_xor_sync(0xffffffffu, peak, offset));
    }
    const float scale = scale_of_absmax(peak);
    const float inv_scale = fast_reciprocal(scale);
    for (int i = first + lane; i < end; i += 32) out[i] = to_fp8(normed(i) * inv_scale);
    if (lane == 0) scales[row_offset(g, a.scale_group_stride)] = scale;
  }
}

}  // namespace
}  // namespace ir_cuda
