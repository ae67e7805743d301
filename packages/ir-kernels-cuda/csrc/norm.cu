// The norm and quantization ops (rms_norm and fused_add_rms_norm, alone or followed by static,
// dynamic or group fp8 quantization; dynamic per-token and per-token-group fp8 quantization): which
// row kernel of norm_kernels.cuh, team and launch each call takes, and the ops' entry points.
// The rules depend on a row's width and layout for the arithmetic, so that a row's result never
// depends on its batch; the batch, the L2 and the card choose only hints and launch shapes
// (`tuning.cuh`).
#include <ATen/ATen.h>

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "norm_kernels.cuh"

namespace ir_cuda {
namespace {

struct RowTensors {
  at::Tensor* out = nullptr;
  at::Tensor* residual_out = nullptr;
  const at::Tensor* x = nullptr;
  const at::Tensor* residual = nullptr;
  const at::Tensor* weight = nullptr;
  const at::Tensor* scale = nullptr;
  const at::Tensor* scale_ub = nullptr;
  at::Tensor* scale_out = nullptr;
  int64_t groups = 1;         // the quantizer without a norm: groups a token, each taken as a row
  int64_t group_size = 0;     // kGroup: elements a group of the normalized row
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
};

// Blocks a split row is shared by (`SPLIT`), and the batches that split their rows.
constexpr int kRowSplit = tuning::kRowSplit;
constexpr int64_t kSplitRows = tuning::kSplitRows;

// Whether the kernel of a team of TEAM, VPT vectors a thread, has a SPLIT form: rms_norm and
// its static fp8 form where teams of 256 or 512 threads hold two vectors each (16-bit rows of
// 4096 and 8192 elements, float32 of 4096). At decode sizes a row's time is one SM moving it;
// split, each of kRowSplit SMs loads the whole row but normalizes and stores a slice. The
// dynamic norm (every block would normalize its whole row for the scale) and the fused adds
// (their residual) are slower split, and are not.
template <bool ADD, bool NORM, int QUANT, int TEAM, int VPT>
constexpr bool split_kernel() {
  return NORM && !ADD && (QUANT == kNone || QUANT == kStatic) && TEAM >= 256 && VPT == 2;
}

// Whether the ops of quantization QUANT take the load hints (`RowLoads`) measured on them: the
// weight's late load, evict-first rows, the float32 add, the split rows. Dynamic scales after a
// fused add and group scales after a norm take the plain and spread forms only, so that the
// build does not grow by a kernel for each hint until one is measured on them.
constexpr bool hinted_forms(bool add, int quant) {
  return quant == kNone || quant == kStatic || (!add && quant == kDynamic);
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
// vector a thread, 2048 wide; two, the 4096-wide `kHalves`). There the paired add is slower:
// ptxas issues the residual's store after the row's shuffles rather than before, and at 4096
// wide the paired add's extra registers fit fewer blocks an SM, so that the batch no longer
// takes one wave. Up to kFewRows rows the paired add is faster.
template <typename T, bool ADD, int TEAM, int VPT>
constexpr bool float_add_kernel() {
  return ADD && sizeof(T) == 2 && TEAM == 256 && VPT <= 2;
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
      launch(aligned_row_kernel<T, TEAM, VPT, ADD, NORM, QUANT, LATE, 1, false, false, 0, false, kRowSplit>,
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
  const unsigned rows_per_block = threads / TEAM;
  const dim3 grid((rows + rows_per_block - 1) / rows_per_block);
  auto kernel = aligned_row_kernel<T, TEAM, VPT, ADD, NORM, QUANT, LATE, 1>;
  if constexpr (reload_kernel<T, NORM, QUANT, LATE, TEAM, VPT>()) {
    if (loads.reload) {
      auto reload = aligned_row_kernel<T, TEAM, VPT, ADD, NORM, QUANT, LATE, 1, false, false, 0, true>;
      if constexpr (ADD && VPT == 2) {
        // The fused add's reloaded rows of 8192 are faster held to two blocks an SM; rows of
        // 16384 (four vectors a thread) and rms_norm are slower so.
        launch_two_blocks_an_sm(reload, grid, dim3(threads), stream, args);
      } else {
        launch(reload, grid, dim3(threads), stream, args);
      }
      return;
    }
  }
  if constexpr (ADD && hinted_forms(ADD, QUANT)) {
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
          // Past one wave the one-vector kernel stays ahead, and decode rows keep their
          // cluster. The chip's capacity is the launched form's (`float_add_kernel`).
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
        launched = launch_aligned<T, ADD, NORM, QUANT, VPT, false, 256, 512>(params, l.team, spread, loads, stream);
      } else if constexpr (VPT == 2) {
        if constexpr (!ADD && NORM && QUANT == kDynamic) {
          // Rows that fill a tile of 256 or 512 threads of two vectors, in teams of half the
          // threads with four vectors each, summed as the wider team does (`halves_kernel`;
          // Triton's layout): past kFewRows rows, and for the teams of 512 wherever their rows
          // are not spread. Up to kFewRows rows of 4096 the halves (four warps) are slower.
          const bool fills_tile = l.team * l.vpt * vec_width<T>() == args.width;
          const bool halves = l.team == 512 || (l.team == 256 && args.rows > kFewRows);
          if (!spread && halves && fills_tile) {
            launched = launch_aligned<T, ADD, NORM, QUANT, 4, false, 128, 256>(params, l.team / 2, false, loads, stream);
          }
        }
        if constexpr (!ADD && NORM && (QUANT == kNone || QUANT == kStatic)) {
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
  } else if constexpr (QUANT == kGroup) {
    TORCH_CHECK(false, "ir_cuda: group scales of rows the aligned kernel does not take go to group_norm_kernel");
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

// An op touching `bytes` overflows the L2 by at most `tuning::kEvictFirstL2Sizes`: its rows read
// once are better marked evict-first, so that the lines the next call reads stay, as the Triton
// provider's norms do. Ops within the L2 would lose their inputs' lines between calls, and ops
// far over it gain nothing.
bool just_over_l2(int64_t bytes) {
  const auto l2 = static_cast<double>(l2_cache_bytes());
  return static_cast<double>(bytes) > l2 && static_cast<double>(bytes) <= tuning::kEvictFirstL2Sizes * l2;
}

// Whether the plain norms read each row again after its sum (`RELOAD`) rather than hold it in
// registers through the reduction, as the Triton provider's kernel and Inductor's looped one
// do: 16-bit rows of `tuning::kReloadMinWidth` elements or more (a team of 512,
// `reload_kernel`) whose op touches more than `tuning::kReloadL2Sizes` L2 sizes, on the device
// classes whose table says so (`tuning::kReloadWideRows`). The same values and arithmetic, so
// it may follow the batch and the card.
bool reload_rows(int64_t width, int64_t element_size, int64_t bytes) {
  return element_size == 2 && width >= tuning::kReloadMinWidth &&
         static_cast<double>(bytes) > tuning::kReloadL2Sizes * static_cast<double>(l2_cache_bytes()) &&
         tuning::kReloadWideRows[device_class()];
}

// Whether the short rows without a norm of launch `l` (fp8 groups of 128 16-bit values: teams
// of 8, two vectors a thread) stream from DRAM: past kFewRows rows, with x over the L2. They
// then launch as their device class's table says (`launch_streamed_groups`).
inline bool streamed_groups(const RowLaunch& l, const at::Tensor& x) {
  // (a team of 8 is never streamed in chunks: `row_launch` widens the team first)
  return l.team == 8 && l.vpt == 2 && x.size(0) > kFewRows && tensor_bytes(x) > l2_cache_bytes();
}

// The fp8 groups streamed from DRAM on a card of class C: teams of `tuning::kStreamedGroupTeam`
// threads of `kStreamedGroupVectors` vectors each, in blocks of `kStreamedGroupThreads` whose
// rows store together (TOGETHER: after a block barrier, as the Triton provider's group kernel
// orders its stores). A maximum is exact in any order, so the launch may follow the batch and
// the card.
template <typename T, DeviceClass C>
void launch_streamed_groups(const QuantArgs<T>& args, cudaStream_t stream) {
  constexpr int kTeam = tuning::kStreamedGroupTeam[C];
  constexpr int kThreads = tuning::kStreamedGroupThreads[C];
  constexpr unsigned kRowsPerBlock = kThreads / kTeam;
  const auto rows = static_cast<unsigned>(args.rows);
  launch(aligned_row_kernel<T, kTeam, tuning::kStreamedGroupVectors[C], false, false, kDynamic, false, 1, false,
                            false, kThreads>,
         dim3((rows + kRowsPerBlock - 1) / kRowsPerBlock), dim3(kThreads), stream, args);
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
    if constexpr (QUANT == kStatic) {
      args.scale = t.scale->const_data_ptr<float>();
    } else if constexpr (QUANT == kDynamic || QUANT == kGroup) {
      const float* scale_ub = t.scale_ub != nullptr ? t.scale_ub->const_data_ptr<float>() : nullptr;
      // the quantizers without a residual share its fields (the unions in RowArgs); the fused
      // add's have their own
      if constexpr (ADD) {
        args.add_scale_ub = scale_ub;
        args.add_scale_out = t.scale_out->data_ptr<float>();
      } else {
        args.scale_ub = scale_ub;
        args.scale_out = t.scale_out->data_ptr<float>();
      }
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
    const RowLaunch l = row_launch(width, V, ADD && aligned);
    if constexpr (QUANT == kGroup) {
      // the aligned kernel's groups: a power of two of vectors, at most a warp's lanes and the
      // team (`aligned_row_kernel`); other rows take a block each (`group_norm_kernel`)
      const int64_t group_vectors = t.group_size / V;
      args.groups = static_cast<int>(width / t.group_size);
      if (!aligned || l.stream || t.group_size % V != 0 || group_vectors > 32 ||
          (group_vectors & (group_vectors - 1)) != 0 || group_vectors > l.team) {
        launch(group_norm_kernel<T, ADD>, dim3(static_cast<unsigned>(tokens)), dim3(tuning::kGroupNormThreads),
               stream, args, static_cast<int>(t.group_size));
        return;
      }
      args.group_vector_shift = log2_of(static_cast<int>(group_vectors));
    }
    if constexpr (!ADD && !NORM && QUANT == kDynamic) {
      if (aligned && streamed_groups(l, x)) {
        const QuantArgs<T> params = aligned_args<ADD, NORM>(args);
        if (device_class() == kDeepLoads) {
          launch_streamed_groups<T, kDeepLoads>(params, stream);
        } else {
          launch_streamed_groups<T, kShallowLoads>(params, stream);
        }
        return;
      }
    }
    RowLoads loads;
    // The weight's load after the row's first shuffles (LATE) where that is faster: plain
    // rms_norm up to kFewRows rows and once its bytes (x and out) are over twice the L2 size,
    // but not in between; the static norm + quant past `tuning::kLateWeightStaticRows` rows.
    // The same arithmetic either way, so it may follow the batch.
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
      loads.late_weight = tokens > tuning::kLateWeightStaticRows;
    }
    if constexpr (NORM && !ADD && (QUANT == kNone || QUANT == kStatic)) {
      loads.split = aligned && split_rows(tokens, l, x, *t.out);
    }
    if constexpr (ADD) {
      // (the L2 is asked only past kFewRows: as many rows of one tile, 33 MB at most, fit the
      // L2 of every card the table knows; streamed rows take `row_kernel`, which has no hint)
      loads.evict_first = tokens > kFewRows &&
                          just_over_l2(distinct_bytes({&x, t.residual, t.residual_out, t.out}));
      loads.float_add = tokens > kFewRows;
    }
    constexpr int kTile = tuning::kRowVectors, kWide = tuning::kWideRowVectors;
    static_assert(kTile == 2 && kWide == 4, "the row kernels' forms (split, reload, halves) take 2 and 4 vectors");
    if (l.stream) {
      if constexpr (QUANT != kGroup) launch_typed<T, ADD, NORM, QUANT, kWide, true>(args, l, aligned, loads, stream);
    } else if (l.vpt == 1) {
      // one vector a thread: the fused add's aligned rows
      if constexpr (ADD) {
        launch_typed<T, ADD, NORM, QUANT, 1, false>(args, l, aligned, loads, stream);
      } else {
        TORCH_INTERNAL_ASSERT(false, "ir_cuda: one vector a thread outside the fused add");
      }
    } else if (l.vpt == kTile) {
      launch_typed<T, ADD, NORM, QUANT, kTile, false>(args, l, aligned, loads, stream);
    } else {
      launch_typed<T, ADD, NORM, QUANT, kWide, false>(args, l, aligned, loads, stream);
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

void fused_add_rms_norm_dynamic_quant_fp8_out(at::Tensor& out, at::Tensor& scale_out, at::Tensor& residual_out,
                                              const at::Tensor& x, const at::Tensor& x_residual,
                                              const std::optional<at::Tensor>& weight, double epsilon,
                                              const std::optional<at::Tensor>& scale_ub) {
  check_scale_out(scale_out, x, 1);
  RowTensors t;
  t.out = &out;
  t.residual_out = &residual_out;
  t.x = &x;
  t.residual = &x_residual;
  t.weight = opt(weight);
  t.epsilon = epsilon;
  t.scale_ub = opt(scale_ub);
  t.scale_out = &scale_out;
  t.scale_token_stride = scale_out.stride(0);
  launch_rows<true, true, kDynamic>(t);
}

namespace {
// The group arguments of the norms with group scales; their groups a token.
int64_t check_groups(const at::Tensor& x, int64_t group_size) {
  TORCH_CHECK(group_size > 0 && x.dim() == 2 && x.size(1) % group_size == 0,
              "ir_cuda: group_size must be positive and divide the row width ", x.size(-1), ", got ", group_size);
  TORCH_CHECK(group_size <= std::numeric_limits<int>::max(), "ir_cuda: group_size ", group_size,
              " is more elements than the kernels address (2^31 - 1)");
  return x.size(1) / group_size;
}

template <bool ADD>
void launch_norm_groups(RowTensors& t, at::Tensor& scale_out, int64_t group_size) {
  check_scale_out(scale_out, *t.x, check_groups(*t.x, group_size));
  t.scale_out = &scale_out;
  t.group_size = group_size;
  t.scale_token_stride = scale_out.stride(0);
  t.scale_group_stride = scale_out.stride(1);
  launch_rows<ADD, true, kGroup>(t);
}
}  // namespace

void rms_norm_group_quant_fp8_out(at::Tensor& out, at::Tensor& scale_out, const at::Tensor& x,
                                  const std::optional<at::Tensor>& weight, double epsilon, int64_t group_size) {
  RowTensors t;
  t.out = &out;
  t.x = &x;
  t.weight = opt(weight);
  t.epsilon = epsilon;
  launch_norm_groups<false>(t, scale_out, group_size);
}

void fused_add_rms_norm_group_quant_fp8_out(at::Tensor& out, at::Tensor& scale_out, at::Tensor& residual_out,
                                            const at::Tensor& x, const at::Tensor& x_residual,
                                            const std::optional<at::Tensor>& weight, double epsilon,
                                            int64_t group_size) {
  RowTensors t;
  t.out = &out;
  t.residual_out = &residual_out;
  t.x = &x;
  t.residual = &x_residual;
  t.weight = opt(weight);
  t.epsilon = epsilon;
  launch_norm_groups<true>(t, scale_out, group_size);
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
