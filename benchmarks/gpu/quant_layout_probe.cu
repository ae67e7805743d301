// Layouts of the fp8 quantizers without a norm, as standalone kernels on raw pointers (bf16 in,
// fp8 e4m3 out, float32 scales), for `quant_layout_probe.py`: which share of a row a thread
// holds, how many rows a thread holds, and how many threads a block has, timed side by side
// with Triton's kernels in one process. The arithmetic is `aligned_row_kernel`'s (absmax,
// amax * (1 / 448) at least 1 / (448 * 512), rcp.approx, satfinite conversion), so every
// variant writes the same bits as the ir_cuda op. Built by nvcc alone (no torch headers).
#include <cuda_fp8.h>
#include <cstdint>

namespace {

constexpr float kFp8Max = 448.f;
constexpr float kMinScale = 1.f / (kFp8Max * 512.f);

struct alignas(16) Words4 {
  uint32_t w[4];
};

__device__ __forceinline__ float lo_bf16(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_bf16(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

__device__ __forceinline__ float rcp(float v) {
  float r;
  asm("rcp.approx.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}

__device__ __forceinline__ uint16_t fp8x2(float lo, float hi) {
  return static_cast<uint16_t>(__nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ float absmax_words(const Words4& v, float m) {
#pragma unroll
  for (int i = 0; i < 4; ++i) m = fmaxf(m, fmaxf(fabsf(lo_bf16(v.w[i])), fabsf(hi_bf16(v.w[i]))));
  return m;
}

// Four fp8 pairs (8 bytes) of a vector of 8 bf16 values times `inv`.
__device__ __forceinline__ uint2 quant_words(const Words4& v, float inv) {
  uint32_t q[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint32_t a = fp8x2(lo_bf16(v.w[2 * i]) * inv, hi_bf16(v.w[2 * i]) * inv);
    const uint32_t b = fp8x2(lo_bf16(v.w[2 * i + 1]) * inv, hi_bf16(v.w[2 * i + 1]) * inv);
    q[i] = a | (b << 16);
  }
  return make_uint2(q[0], q[1]);
}

// The kernel's parameters: the five it needs, or laid out as ir_cuda's `RowArgs` (about 150
// bytes over three 64-byte lines of the constant bank, with the optional upper bound of the
// absmax and 64-bit scale strides read as that kernel reads them).
struct SmallArgs {
  const uint16_t* x;
  uint8_t* out;
  float* scale_out;
  int rows;
  int nvec;
};
struct RowArgsLike {
  const uint16_t* x;
  int x_stride;
  uint8_t* out;
  int out_stride;
  const uint16_t* weight;
  int rows, groups, groups_shift, width, var_size;
  float inv_var_size, eps;
  const uint16_t* residual;
  int residual_stride;
  uint16_t* residual_out;
  int residual_out_stride;
  const float* scale;
  const float* scale_ub;
  float* scale_out;
  int64_t scale_token_stride;
  int64_t scale_group_stride;
  bool prefetch_scale;
};

// Rows (fp8 groups, or tokens) of `nvec` 16-byte vectors: TEAM lanes a row, each lane VPL
// vectors (ADJACENT: lane l holds vectors l * VPL ... l * VPL + VPL - 1, its fp8 outputs one
// store; else vectors l, l + TEAM, ...), each thread G rows (the block's rows g * teams apart,
// as Triton's group kernel holds groups g and g + 8), THREADS threads a block. NC: x read
// through the non-coherent path (ld.global.nc); Args: SmallArgs or RowArgsLike. As in Triton's
// group kernel (its sm_90 SASS): SCALE_FIRST stores a row's scale before its fp8 values,
// BARRIER syncs the block after the reduction.
template <int TEAM, int VPL, bool ADJACENT, int G, int THREADS, bool NC, typename Args,
          bool SCALE_FIRST = false, bool BARRIER = false>
__global__ void __launch_bounds__(THREADS) quant_rows(Args a) {
  constexpr bool kRowArgs = sizeof(Args) > sizeof(SmallArgs);
  const int rows = a.rows;
  int nvec;
  if constexpr (kRowArgs) {
    nvec = static_cast<int>(static_cast<unsigned>(a.width) / 8);
  } else {
    nvec = a.nvec;
  }
  const uint16_t* x = a.x;
  uint8_t* out = a.out;
  constexpr int kTeams = THREADS / TEAM;
  const int lane = static_cast<int>(threadIdx.x) & (TEAM - 1);
  const int team = static_cast<int>(threadIdx.x) / TEAM;
  const int first = static_cast<int>(blockIdx.x) * kTeams * G + team;
  Words4 v[G][VPL];
  float amax[G];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const int row = first + g * kTeams;
    const auto* xr = reinterpret_cast<const Words4*>(x) + static_cast<int64_t>(row) * nvec;
#pragma unroll
    for (int k = 0; k < VPL; ++k) {
      const int j = ADJACENT ? lane * VPL + k : lane + k * TEAM;
      Words4 w{{0u, 0u, 0u, 0u}};
      if (row < rows && j < nvec) {
        if constexpr (NC) {
          const uint4 u = __ldg(reinterpret_cast<const uint4*>(xr + j));
          w = Words4{{u.x, u.y, u.z, u.w}};
        } else {
          w = xr[j];
        }
      }
      v[g][k] = w;
    }
  }
#pragma unroll
  for (int g = 0; g < G; ++g) {
    float m = 0.f;
#pragma unroll
    for (int k = 0; k < VPL; ++k) m = absmax_words(v[g][k], m);
    amax[g] = m;
  }
  constexpr int kWarpTeam = TEAM < 32 ? TEAM : 32;
#pragma unroll
  for (int offset = kWarpTeam / 2; offset > 0; offset >>= 1) {
#pragma unroll
    for (int g = 0; g < G; ++g) amax[g] = fmaxf(amax[g], __shfl_xor_sync(0xffffffffu, amax[g], offset));
  }
  if constexpr (TEAM > 32) {
    // the team's warp partials, every warp reading all of them (as ir_cuda's `team_reduce`)
    constexpr int kWarps = TEAM / 32;
    __shared__ float partial[G][THREADS / 32];
    if ((threadIdx.x & 31) == 0) {
#pragma unroll
      for (int g = 0; g < G; ++g) partial[g][threadIdx.x >> 5] = amax[g];
    }
    __syncthreads();
    const int i = team * kWarps + (static_cast<int>(threadIdx.x) & (kWarps - 1));
#pragma unroll
    for (int g = 0; g < G; ++g) amax[g] = partial[g][i];
#pragma unroll
    for (int offset = 1; offset < kWarps; offset <<= 1) {
#pragma unroll
      for (int g = 0; g < G; ++g) amax[g] = fmaxf(amax[g], __shfl_xor_sync(0xffffffffu, amax[g], offset));
    }
  }
  if constexpr (BARRIER) {
    // through shared memory, as Triton moves the maximum to the store's layout (a bare
    // __syncthreads would be hoisted above the loads)
    __shared__ float staged[G][THREADS];
#pragma unroll
    for (int g = 0; g < G; ++g) staged[g][threadIdx.x] = amax[g];
    __syncthreads();
#pragma unroll
    for (int g = 0; g < G; ++g) amax[g] = staged[g][threadIdx.x];
  }
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const int row = first + g * kTeams;
    if (row >= rows) break;
    float m = amax[g];
    if constexpr (kRowArgs) {
      if (a.scale_ub != nullptr) m = fminf(m, *a.scale_ub);
    }
    const float scale = fmaxf(m * (1.f / kFp8Max), kMinScale);
    const float inv = rcp(scale);
    uint8_t* orow = out + static_cast<int64_t>(row) * nvec * 8;
    auto store_scale = [&] {
      if (lane != 0) return;
      if constexpr (kRowArgs) {
        a.scale_out[static_cast<int64_t>(row) * a.scale_token_stride] = scale;
      } else {
        a.scale_out[row] = scale;
      }
    };
    if constexpr (SCALE_FIRST) store_scale();
    if constexpr (ADJACENT) {
      if ((lane + 1) * VPL <= nvec) {
        uint2 q[VPL];
#pragma unroll
        for (int k = 0; k < VPL; ++k) q[k] = quant_words(v[g][k], inv);
        if constexpr (VPL == 2) {
          reinterpret_cast<uint4*>(orow)[lane] = make_uint4(q[0].x, q[0].y, q[1].x, q[1].y);
        } else {
#pragma unroll
          for (int k = 0; k < VPL; ++k) reinterpret_cast<uint2*>(orow)[lane * VPL + k] = q[k];
        }
      }
    } else {
#pragma unroll
      for (int k = 0; k < VPL; ++k) {
        const int j = lane + k * TEAM;
        if (j < nvec) reinterpret_cast<uint2*>(orow)[j] = quant_words(v[g][k], inv);
      }
    }
    if constexpr (!SCALE_FIRST) store_scale();
  }
}

template <int TEAM, int VPL, bool ADJACENT, int G, int THREADS, bool NC = true, bool ROW_ARGS = false,
          bool SCALE_FIRST = false, bool BARRIER = false>
int launch(const void* x, void* out, float* scale, int rows, int nvec, cudaStream_t stream) {
  constexpr int kRowsPerBlock = THREADS / TEAM * G;
  const int blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  if constexpr (ROW_ARGS) {
    RowArgsLike a{};
    a.x = static_cast<const uint16_t*>(x);
    a.x_stride = nvec * 8;
    a.out = static_cast<uint8_t*>(out);
    a.out_stride = nvec * 8;
    a.rows = rows;
    a.groups = 1;
    a.width = nvec * 8;
    a.scale_out = scale;
    a.scale_token_stride = 1;
    quant_rows<TEAM, VPL, ADJACENT, G, THREADS, NC, RowArgsLike, SCALE_FIRST, BARRIER>
        <<<blocks, THREADS, 0, stream>>>(a);
  } else {
    const SmallArgs a{static_cast<const uint16_t*>(x), static_cast<uint8_t*>(out), scale, rows, nvec};
    quant_rows<TEAM, VPL, ADJACENT, G, THREADS, NC, SmallArgs, SCALE_FIRST, BARRIER>
        <<<blocks, THREADS, 0, stream>>>(a);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

// The variants by number (`quant_layout_probe.py` names them); -1 for an unknown one.
extern "C" int probe_launch(int variant, const void* x, void* out, float* scale, int rows, int nvec,
                            void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  switch (variant) {
    // fp8 groups of 128 bf16 (16 vectors)
    case 0: return launch<8, 2, true, 1, 128>(x, out, scale, rows, nvec, s);   // kept: ir_cuda's
    case 1: return launch<8, 2, true, 2, 64>(x, out, scale, rows, nvec, s);    // Triton's group layout
    case 2: return launch<8, 2, true, 1, 64>(x, out, scale, rows, nvec, s);
    case 3: return launch<8, 2, true, 2, 128>(x, out, scale, rows, nvec, s);
    case 4: return launch<4, 4, true, 1, 128>(x, out, scale, rows, nvec, s);
    case 5: return launch<8, 2, true, 4, 64>(x, out, scale, rows, nvec, s);
    case 6: return launch<8, 2, true, 2, 32>(x, out, scale, rows, nvec, s);
    case 7: return launch<8, 2, true, 1, 128, false>(x, out, scale, rows, nvec, s);
    case 8: return launch<8, 2, true, 1, 128, true, true>(x, out, scale, rows, nvec, s);
    case 9: return launch<8, 2, true, 1, 128, false, true>(x, out, scale, rows, nvec, s);
    // fp8 groups of 128 bf16 streamed from DRAM (`--streamed`)
    case 30: return launch<16, 1, true, 1, 128>(x, out, scale, rows, nvec, s);  // Triton's at 2048 wide
    case 31: return launch<4, 4, true, 1, 64>(x, out, scale, rows, nvec, s);
    case 32: return launch<4, 4, true, 1, 256>(x, out, scale, rows, nvec, s);
    case 33: return launch<2, 8, true, 1, 128>(x, out, scale, rows, nvec, s);
    case 34: return launch<4, 4, true, 2, 128>(x, out, scale, rows, nvec, s);
    case 35: return launch<16, 1, true, 2, 64>(x, out, scale, rows, nvec, s);
    case 36: return launch<4, 4, false, 1, 128>(x, out, scale, rows, nvec, s);  // a team apart
    case 37: return launch<8, 2, false, 1, 128>(x, out, scale, rows, nvec, s);
    case 38: return launch<4, 4, false, 1, 256>(x, out, scale, rows, nvec, s);
    // Triton's group kernel's order: the scale stored first, a block barrier after the reduction
    case 39: return launch<16, 1, true, 1, 128, true, false, true, false>(x, out, scale, rows, nvec, s);
    case 40: return launch<16, 1, true, 1, 128, true, false, false, true>(x, out, scale, rows, nvec, s);
    case 41: return launch<16, 1, true, 1, 128, false, false, true, true>(x, out, scale, rows, nvec, s);
    case 42: return launch<4, 4, true, 1, 128, true, false, true, true>(x, out, scale, rows, nvec, s);
    // the same barrier within the L2 (group shapes of the default run)
    case 43: return launch<8, 2, true, 1, 128, true, false, false, true>(x, out, scale, rows, nvec, s);
    case 44: return launch<4, 4, true, 1, 64, true, false, false, true>(x, out, scale, rows, nvec, s);
    case 45: return launch<8, 2, true, 2, 64, true, false, false, true>(x, out, scale, rows, nvec, s);
    // an H200's Triton layout for streamed groups (a row of up to 64 groups a program, two
    // groups a thread 2 x warps apart; plain loads, scale first, block barrier), and teams of 8
    // in blocks as wide
    case 46: return launch<16, 1, true, 2, 128, false, false, true, true>(x, out, scale, rows, nvec, s);
    case 47: return launch<16, 1, true, 2, 256, false, false, true, true>(x, out, scale, rows, nvec, s);
    case 48: return launch<16, 1, true, 2, 512, false, false, true, true>(x, out, scale, rows, nvec, s);
    case 49: return launch<16, 1, true, 2, 256>(x, out, scale, rows, nvec, s);
    case 50: return launch<16, 1, true, 2, 512>(x, out, scale, rows, nvec, s);
    case 51: return launch<8, 2, true, 1, 256>(x, out, scale, rows, nvec, s);
    case 52: return launch<8, 2, true, 1, 512>(x, out, scale, rows, nvec, s);
    case 53: return launch<8, 2, true, 1, 512, true, false, false, true>(x, out, scale, rows, nvec, s);
    // per-token rows of 2048 bf16 (256 vectors)
    case 10: return launch<128, 2, false, 1, 128>(x, out, scale, rows, nvec, s);  // kept: ir_cuda's
    case 11: return launch<128, 2, true, 1, 128>(x, out, scale, rows, nvec, s);   // Triton's
    case 12: return launch<64, 4, true, 1, 64>(x, out, scale, rows, nvec, s);
    case 13: return launch<256, 1, true, 1, 256>(x, out, scale, rows, nvec, s);
    case 14: return launch<128, 2, false, 1, 128, false>(x, out, scale, rows, nvec, s);
    case 15: return launch<128, 2, false, 1, 128, true, true>(x, out, scale, rows, nvec, s);
    case 16: return launch<128, 2, false, 1, 128, false, true>(x, out, scale, rows, nvec, s);
    // per-token rows of 4096 bf16 (512 vectors)
    case 20: return launch<256, 2, false, 1, 256>(x, out, scale, rows, nvec, s);  // kept: ir_cuda's
    case 21: return launch<256, 2, true, 1, 256>(x, out, scale, rows, nvec, s);   // Triton's
    case 22: return launch<128, 4, true, 1, 128>(x, out, scale, rows, nvec, s);
    case 24: return launch<256, 2, false, 1, 256, false>(x, out, scale, rows, nvec, s);
    case 25: return launch<256, 2, false, 1, 256, true, true>(x, out, scale, rows, nvec, s);
    case 26: return launch<256, 2, false, 1, 256, false, true>(x, out, scale, rows, nvec, s);
    default: return -1;
  }
}
