// A row as the row kernels see it: its plan (a vector body with a scalar head and tail), a
// thread's register tile of it, the team and block a row width launches with, and the flat
// grid of the elementwise kernels.
#pragma once

#include "tuning.cuh"
#include "words.cuh"

namespace ir_cuda {

// How one row is split: `head` scalars until the first pointer is 16-byte aligned, `nvec`
// vectors of V elements, then `tail` scalars. `vec` is false where some other pointer of the
// row is not aligned at the same element; then every element is read as a scalar. Offsets
// within a row are 32-bit (the host checks the width): fewer registers and instructions.
struct RowPlan {
  int width = 0;
  int nvec = 0;
  int head = 0;
  int tail = 0;
  bool vec = false;
};

template <int V>
struct PlanBuilder {
  RowPlan plan;

  template <typename U>
  __device__ __forceinline__ PlanBuilder(const U* first, int width) {
    plan.width = width;
    const uintptr_t misalign = reinterpret_cast<uintptr_t>(first) % (sizeof(U) * V);
    plan.vec = misalign % sizeof(U) == 0;
    if (plan.vec) {
      int head = misalign == 0 ? 0 : static_cast<int>((sizeof(U) * V - misalign) / sizeof(U));
      head = head < width ? head : width;
      plan.head = head;
      plan.nvec = (width - head) / V;
      plan.tail = width - head - plan.nvec * V;
    }
  }

  // Another pointer of the row (null pointers are ignored): vectors need it aligned at `head`.
  template <typename U>
  __device__ __forceinline__ PlanBuilder& also(const U* p) {
    if (p != nullptr && !aligned(p + plan.head, static_cast<int>(sizeof(U)) * V)) plan.vec = false;
    return *this;
  }

  __device__ __forceinline__ RowPlan done() {
    if (!plan.vec) {
      plan.head = plan.tail = 0;
      plan.nvec = 0;
    }
    return plan;
  }
};

// The elements of a row (or of one chunk of it) that one thread of a team holds: VPT vectors
// (vector j = base + lane + k * team) plus one head and one tail element. On the scalar path the
// same VPT * V slots hold elements base * V + lane + m * team.
template <typename U, int V, int VPT>
struct Tile {
  static constexpr int kSlots = VPT * V + 2;
  VecN<U, V> vec[VPT];
  U head;
  U tail;

  __device__ __forceinline__ U& at(int s) {
    return s < VPT * V ? vec[s / V].v[s % V] : (s == VPT * V ? head : tail);
  }
  __device__ __forceinline__ U at(int s) const {
    return s < VPT * V ? vec[s / V].v[s % V] : (s == VPT * V ? head : tail);
  }
};

// Row element held in slot `s` for chunk `chunk` (of VPT * team vectors), or -1.
template <int V, int VPT>
__device__ __forceinline__ int slot_index(const RowPlan& p, int lane, int team, int chunk, int s) {
  const int base = chunk * VPT * team;
  if (p.vec) {
    if (s < VPT * V) {
      const int j = base + lane + (s / V) * team;
      return j < p.nvec ? p.head + j * V + s % V : -1;
    }
    if (chunk != 0) return -1;
    if (s == VPT * V) return lane < p.head ? lane : -1;
    return lane < p.tail ? p.head + p.nvec * V + lane : -1;
  }
  if (s >= VPT * V) return -1;
  const int i = base * V + lane + s * team;
  return i < p.width ? i : -1;
}

// Loads this thread's slots of `row` (zero where a slot holds no element).
template <typename U, int V, int VPT>
__device__ __forceinline__ void load_tile(Tile<U, V, VPT>& t, const U* row, const RowPlan& p,
                                          int lane, int team, int chunk) {
  if (p.vec) {
    const auto* body = reinterpret_cast<const VecN<U, V>*>(row + p.head);
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int j = chunk * VPT * team + lane + k * team;
      if (j < p.nvec) {
        t.vec[k] = body[j];
      } else {
#pragma unroll
        for (int e = 0; e < V; ++e) t.vec[k].v[e] = U(0.f);
      }
    }
    t.head = chunk == 0 && lane < p.head ? row[lane] : U(0.f);
    t.tail = chunk == 0 && lane < p.tail ? row[p.head + p.nvec * V + lane] : U(0.f);
  } else {
#pragma unroll
    for (int s = 0; s < VPT * V; ++s) {
      const int i = slot_index<V, VPT>(p, lane, team, chunk, s);
      t.at(s) = i >= 0 ? row[i] : U(0.f);
    }
    t.head = t.tail = U(0.f);
  }
}

// Stores this thread's slots into `row` (only slots that hold an element).
template <typename U, int V, int VPT>
__device__ __forceinline__ void store_tile(U* row, const Tile<U, V, VPT>& t, const RowPlan& p,
                                           int lane, int team, int chunk) {
  if (p.vec) {
    auto* body = reinterpret_cast<VecN<U, V>*>(row + p.head);
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int j = chunk * VPT * team + lane + k * team;
      if (j < p.nvec) body[j] = t.vec[k];
    }
    if (chunk == 0 && lane < p.head) row[lane] = t.head;
    if (chunk == 0 && lane < p.tail) row[p.head + p.nvec * V + lane] = t.tail;
  } else {
#pragma unroll
    for (int s = 0; s < VPT * V; ++s) {
      const int i = slot_index<V, VPT>(p, lane, team, chunk, s);
      if (i >= 0) row[i] = t.at(s);
    }
  }
}

// The launch of a row kernel: `team` threads per row, each holding VPT vectors per chunk.
// Depends on the row width only, so a row's result does not depend on the batch.
constexpr int kMaxTeam = tuning::kMaxTeam;

// Threads of a row kernel's block for a team: at least `tuning::kMinRowBlockThreads`, so a block
// of short rows holds several of them.
__host__ __device__ constexpr int row_block_threads(int team) {
  return team > tuning::kMinRowBlockThreads ? team : tuning::kMinRowBlockThreads;
}

struct RowLaunch {
  int team;     // at least 8, so a lane holds each scalar of a row's unaligned head or tail
  int vpt;      // vectors a thread: `tuning::kRowVectors` or `kWideRowVectors`, or 1 for
                // `one_vector` launches (and the fp8 groups streamed from DRAM on some cards,
                // which launch apart: `streamed_groups` in norm.cu)
  bool stream;  // the row does not fit one tile: it is read in chunks, twice
  int threads;  // per block: `row_block_threads(team)`
};

// Rows of more than `tuning::kOneVectorAbove` and at most kMaxTeam vectors take one vector a
// thread where `one_vector` (the fused add's aligned kernels: a residual doubles a thread's
// loads, and the wider team halves each thread's chain of adds and stores). The plain fused
// add's teams of 512 take two vectors a thread where their rows are not spread over a cluster
// and the chip holds the batch at once (`kHalves` in norm_kernels.cuh, `launch_typed` in
// norm.cu). Other rows take `tuning::kRowVectors` a thread up to a tile of kMaxTeam threads,
// `tuning::kWideRowVectors` past it.
inline RowLaunch row_launch(int64_t width, int vec, bool one_vector = false) {
  const int64_t units = (width + vec - 1) / vec;
  const int vpt = one_vector && units > tuning::kOneVectorAbove && units <= kMaxTeam ? 1
                  : units <= int64_t{kMaxTeam} * tuning::kRowVectors           ? tuning::kRowVectors
                                                                               : tuning::kWideRowVectors;
  int team = 8;
  while (team < kMaxTeam && static_cast<int64_t>(team) * vpt < units) team *= 2;
  const bool stream = static_cast<int64_t>(team) * vpt < units;
  return RowLaunch{team, vpt, stream, row_block_threads(team)};
}

// A grid of `rows` x `blocks_per_row` blocks, flattened so that a row's blocks run next to each
// other (DRAM page locality: a streamed row's blocks then read neighbouring pages, faster than a
// (rows, blocks) grid). `flat_grid` is the launch's grid, `FlatBlock` the block's
// place in it.
inline dim3 flat_grid(int64_t rows, int64_t blocks_per_row) {
  TORCH_CHECK(rows * blocks_per_row <= std::numeric_limits<int>::max(), "ir_cuda: ", rows,
              " rows of ", blocks_per_row, " blocks need more blocks than one launch has");
  return dim3(static_cast<unsigned>(rows * blocks_per_row));
}

struct FlatBlock {
  unsigned row;
  unsigned column;
  __device__ __forceinline__ explicit FlatBlock(unsigned blocks_per_row)
      : row(blockIdx.x / blocks_per_row), column(blockIdx.x - row * blocks_per_row) {}
};

}  // namespace ir_cuda
