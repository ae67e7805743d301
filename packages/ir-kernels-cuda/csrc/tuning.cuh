// The launch table: every launch decision of the ir_cuda kernels that rests on measurement, in
// one place. Threads a block, elements and vectors a thread, cluster and split sizes, the batch
// and footprint thresholds between launch forms, the shared-memory carve-out, and what each
// device class does differently. An entry changes how rows are launched, never what a row's
// arithmetic computes: a row's bits depend on its width and layout only, so the entries may
// follow the batch, the L2 and the card.
//
// Each entry sits under its line of rationale. The per-class table is read where a launch
// already asks the card about itself (ops whose bytes pass the L2); the other entries hold for
// every device class, so that decode-size launches ask the card nothing more. Card names appear
// in this file only. `benchmarks/tuning/tune_cuda.py` re-measures the entries on the card it runs on
// and rewrites that card's column of the per-class table.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ir_cuda {

// Cards are told apart by their peak DRAM bandwidth per SM (the memory clock and bus width the
// driver reports, over the SM count): a card with more needs more loads in flight per SM to keep
// its memory busy, which moves the best launch of rows streamed from DRAM.
enum DeviceClass : int {
  kShallowLoads = 0,  // under tuning::kDeepLoadsGbpsPerSm: an H100 SXM (about 25 GB/s an SM)
  kDeepLoads = 1,     // tuning::kDeepLoadsGbpsPerSm or more: an H200 (about 37 GB/s an SM)
};

// One value per device class, read as `entry[device_class()]`.
template <typename V>
struct PerClass {
  V shallow_loads;
  V deep_loads;
  constexpr V operator[](DeviceClass c) const { return c == kDeepLoads ? deep_loads : shallow_loads; }
};

namespace tuning {

// ------------------------------------------------------------------------ every device class
// The line between the classes, in GB/s an SM: between their cards' 25 and 37, as the Triton provider's.
constexpr double kDeepLoadsGbpsPerSm = 30.0;
// Programmatic build: grids of one wave (1024 threads on 128 SMs) let the next launch start early.
constexpr unsigned long long kEarlyTriggerThreads = 131072;

// Row kernels (norms and quantizers).
// The widest team a row takes: at 128 registers a thread, a tile of four vectors does not spill.
constexpr int kMaxTeam = 512;
// A block of short rows holds at least four warps, so that it carries several rows at once.
constexpr int kMinRowBlockThreads = 128;
// Vectors a thread of rows one tile holds: at least two loads in flight (one ran far slower).
constexpr int kRowVectors = 2;
// Vectors a thread of rows past kMaxTeam x kRowVectors vectors (streamed past kMaxTeam x these).
constexpr int kWideRowVectors = 4;
// The fused add's aligned rows past this many vectors take one a thread: a residual doubles loads.
constexpr int kOneVectorAbove = 128;
// Teams this wide spread a decode-size row over a cluster (narrower teams ran slower spread).
constexpr int kClusterTeam = 512;
// Blocks a spread row takes: more were level at a few rows and slower at 16; fewer gained half.
constexpr int kClusterBlocks = 4;
// Rows without a norm in teams up to this size hold adjacent vectors: their fp8 leaves in one store.
constexpr int kAdjacentVectorsMaxTeam = 32;
// About a row per SM: up to here a batch is decode-sized for the row kernels' hints and forms.
constexpr int64_t kFewRows = 256;
// Blocks a decode-size rms_norm row of 256 or 512 threads is split over, each storing a slice.
constexpr int kRowSplit = 4;
// Batches up to this many rows split their rows: a launch then takes at most 64 blocks.
constexpr int64_t kSplitRows = 16;
// Past this many rows the static-fp8 norm loads its weight after the row's first shuffles.
constexpr int64_t kLateWeightStaticRows = 16;
// The fused adds mark their rows evict-first up to this many L2 sizes: just over it, not far.
constexpr double kEvictFirstL2Sizes = 1.3;
// Plain norms' 16-bit rows at least this wide (a team of 512) may be read again after their sum.
constexpr int64_t kReloadMinWidth = 8192;
// ... where the op touches more than this many L2 sizes: rows nearer the L2 gain nothing.
constexpr double kReloadL2Sizes = 4.0;
// Unused shared memory a reloading fused add's block reserves (47 KB): two blocks an SM, not three.
constexpr size_t kTwoBlocksSharedBytes = 48128;
// Their carve-out, percent of an SM's shared memory: the driver rounds 44 up to 132 KB, 43 to 100.
constexpr int kTwoBlocksCarveoutPercent = 43;

// Elementwise kernels (the gated activations and static quantization).
// Outputs up to here are decode-sized: each thread's chain of unpacking, math and conversion rules.
constexpr int64_t kDecodeOutputs = 131072;
// Batches under this many rows take smaller blocks, and the gates keep shorter chains further.
constexpr int64_t kFewElementwiseRows = 64;
// Elements a thread at decode sizes: the shortest chain that keeps two loads in flight.
constexpr int kDecodeElements = 2;
// Threads a block at decode sizes, as the Triton provider's flat kernel.
constexpr int kDecodeThreads = 256;
// Gates without quantization keep the decode form up to here in few rows (further, it lost).
constexpr int64_t kGateFewRowsDecodeOutputs = 262144;
// silu in few rows up to here takes the form below, between the decode form and a vector a thread.
constexpr int64_t kSiluFewRowsOutputs = 524288;
// ... its elements a thread: the decode form's two and a whole vector both ran slower there.
constexpr int kSiluFewRowsElements = 4;
// ... its threads a block, as the Triton provider's silu there.
constexpr int kSiluFewRowsThreads = 256;
// gelu in few rows up to here takes the form below: its distribution function makes long chains.
constexpr int64_t kGeluFewRowsOutputs = 1048576;
// ... its elements a thread.
constexpr int kGeluFewRowsElements = 4;
// ... its threads a block: smaller blocks spread the long chains over more SMs.
constexpr int kGeluFewRowsThreads = 128;
// Static quantization past here with its bytes in L2 takes the form below (below it, it lost).
constexpr int64_t kStaticL2Outputs = 2097152;
// ... its 16-byte vectors a thread.
constexpr int kStaticL2Vectors = 2;
// ... its threads a block.
constexpr int kStaticL2Threads = 128;
// Static quantization streamed from DRAM: one flat run of a vector a thread, in blocks of this.
constexpr int kStaticStreamedThreads = 256;
// Aligned gates otherwise take a vector a thread, in blocks of this under kFewElementwiseRows rows.
constexpr int kGateFewRowsThreads = 128;
// ... and of this from there.
constexpr int kGateThreads = 256;
// Rows not of whole vectors: 16 bytes of scalars a thread, in blocks of this under those rows.
constexpr int kUnalignedFewRowsThreads = 64;
// ... and of this from there.
constexpr int kUnalignedThreads = 256;
// The aligned gate kernel's launch bounds: at most this many threads a block ...
constexpr int kAlignedGateMaxThreads = 256;
// ... and this many blocks an SM (its register cap).
constexpr int kAlignedGateMinBlocks = 5;

// Rotary embedding.
// Up to this many tokens a batch is a decode step: smaller blocks spread it over more SMs.
constexpr int64_t kRotaryDecodeTokens = 64;
// The aligned kernel's threads a block at most (one unit each) in a decode step.
constexpr int kRotaryDecodeThreads = 128;
// ... and past it.
constexpr int kRotaryThreads = 256;
// The generic kernel's threads a block.
constexpr int kRotaryGenericThreads = 128;
// The generic kernel's blocks a token at most, so that a decode step spreads over the chip.
constexpr int kRotaryGenericBlocksPerToken = 8;

// Kernels over a token's heads (qk norm + rotary, rotary + KV cache write) and the cache write.
// Up to this many tokens a head kernel's batch is a decode step, as the rotary kernel's.
constexpr int64_t kHeadDecodeTokens = 64;
// The aligned head kernel's threads a block in a decode step: the rotary kernel's, not yet tuned.
constexpr int kHeadDecodeThreads = 128;
// ... and past it (its launch bounds): the rotary kernel's, not yet tuned.
constexpr int kHeadThreads = 256;
// The generic head kernel's threads a block, a warp a head: the rotary generic kernel's.
constexpr int kHeadGenericThreads = 128;
// The cache write's threads a block, a 16-byte vector each: as the elementwise kernels' blocks.
constexpr int kCacheWriteThreads = 256;

// Group quantization after a norm or a gate, where the row kernels do not take it.
// The norm's generic group kernel: a block a row, a warp a group; 8 warps keep a row's groups busy.
constexpr int kGroupNormThreads = 256;
// silu + group quant, a group a team of vectors: as the elementwise kernels' blocks, not yet tuned.
constexpr int kGroupGateThreads = 256;
// ... its generic kernel, a warp a group: as the rotary generic kernel's blocks.
constexpr int kGroupGateGenericThreads = 128;

// -------------------------------------------------------------------------- per device class
// Columns: {shallow loads (an H100 SXM), deep loads (an H200)}.
// Plain norms' wide 16-bit rows far over the L2 read again from L2 after their sum, not held.
constexpr PerClass<bool> kReloadWideRows{false, true};
// Threads a team of fp8 groups streamed from DRAM (groups of 128 16-bit values).
constexpr PerClass<int> kStreamedGroupTeam{16, 8};
// ... their 16-byte vectors a thread.
constexpr PerClass<int> kStreamedGroupVectors{1, 2};
// ... their threads a block, whose rows store together after a block barrier.
constexpr PerClass<int> kStreamedGroupThreads{128, 512};
// Elements a thread of silu streamed from DRAM (at most a 16-byte vector).
constexpr PerClass<int> kStreamedSiluElements{4, 8};
// ... its threads a block (0: as any aligned gate's, kGateFewRowsThreads or kGateThreads).
constexpr PerClass<int> kStreamedSiluThreads{256, 0};
// Threads a block of 16-bit gelu streamed from DRAM, a vector a thread (0: as any aligned gate's).
constexpr PerClass<int> kStreamedGelu16Threads{0, 64};

}  // namespace tuning
}  // namespace ir_cuda
