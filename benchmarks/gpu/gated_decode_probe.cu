// The gated activations (bf16 x [rows, 2d] in, bf16 [rows, d] out) at decode sizes as
// standalone kernels on raw pointers, for `gated_decode_probe.py`: elements a thread and threads
// a block swept, beside ir_cuda's launch form. Every variant computes as ir_cuda's `Elementwise`
// (float32 math, the gate's activation times the up value, rounded to bf16 once; silu by the
// hardware's approximate exponential and division), so all write the same bits. Built by nvcc.
#include <cuda_bf16.h>
#include <cstdint>

namespace {

constexpr int kSilu = 0;
constexpr int kGelu = 1;

template <int ACT>
__device__ __forceinline__ float gated(float g, float u) {
  if constexpr (ACT == kSilu) return __fdividef(g, 1.f + __expf(-g)) * u;
  return 0.5f * g * (1.f + erff(g * 0.70710678118654752f)) * u;
}

__device__ __forceinline__ float lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

__device__ __forceinline__ uint32_t pack(float a, float b) {
  const __nv_bfloat162 p = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&p);
}

// E bf16 values as 32-bit words (E = 1: one 16-bit value in the low half).
template <int E>
struct Unit {
  static constexpr int kWords = E < 2 ? 1 : E / 2;
  uint32_t w[kWords];
};

// A unit loaded where it is written (ir_cuda's `load_now`: ptxas keeps the up half's load
// beside the gate's instead of sinking it below the gate's math).
template <int E>
__device__ __forceinline__ Unit<E> load_unit(const uint16_t* p) {
  Unit<E> u;
  if constexpr (E == 1) {
    uint16_t h;
    asm volatile("ld.global.u16 %0, [%1];" : "=h"(h) : "l"(p));
    u.w[0] = static_cast<uint32_t>(h) << 16;  // as the high half: `hi` reads it
  } else if constexpr (E == 2) {
    asm volatile("ld.global.u32 %0, [%1];" : "=r"(u.w[0]) : "l"(p));
  } else if constexpr (E == 4) {
    asm volatile("ld.global.v2.u32 {%0, %1}, [%2];" : "=r"(u.w[0]), "=r"(u.w[1]) : "l"(p));
  } else {
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(u.w[0]), "=r"(u.w[1]), "=r"(u.w[2]), "=r"(u.w[3])
                 : "l"(p));
  }
  return u;
}

template <int ACT, int E>
__device__ __forceinline__ void store_unit(uint16_t* p, const Unit<E>& g, const Unit<E>& u) {
  if constexpr (E == 1) {
    const float y = gated<ACT>(hi(g.w[0]), hi(u.w[0]));
    *p = static_cast<uint16_t>(pack(y, 0.f) & 0xffffu);
  } else {
    Unit<E> o;
#pragma unroll
    for (int k = 0; k < Unit<E>::kWords; ++k) {
      o.w[k] = pack(gated<ACT>(lo(g.w[k]), lo(u.w[k])), gated<ACT>(hi(g.w[k]), hi(u.w[k])));
    }
    if constexpr (E == 2) {
      *reinterpret_cast<uint32_t*>(p) = o.w[0];
    } else if constexpr (E == 4) {
      *reinterpret_cast<uint2*>(p) = make_uint2(o.w[0], o.w[1]);
    } else {
      *reinterpret_cast<uint4*>(p) = make_uint4(o.w[0], o.w[1], o.w[2], o.w[3]);
    }
  }
}

// ir_cuda's form (`aligned_elementwise_kernel`, two elements a thread): rows on grid y, the
// block size read from blockDim, threads past the row's end leave before any load.
template <int ACT>
__global__ void __launch_bounds__(256, 5) rows_exit_first(uint16_t* out, const uint16_t* x, int d) {
  const int j = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (j * 2 >= d) return;
  const int row = static_cast<int>(blockIdx.y);
  const uint16_t* gate = x + static_cast<int64_t>(row) * 2 * d;
  const Unit<2> g = load_unit<2>(gate + 2 * j);
  const Unit<2> u = load_unit<2>(gate + d + 2 * j);
  store_unit<ACT, 2>(out + static_cast<int64_t>(row) * d + 2 * j, g, u);
}

// E elements a thread in blocks of THREADS (a constant); rows on grid y; the loads and the
// store predicated rather than an exit.
template <int ACT, int E, int THREADS>
__global__ void __launch_bounds__(THREADS) rows_const(uint16_t* out, const uint16_t* x, int d) {
  const int j = static_cast<int>(blockIdx.x) * THREADS + static_cast<int>(threadIdx.x);
  const int row = static_cast<int>(blockIdx.y);
  const uint16_t* gate = x + static_cast<int64_t>(row) * 2 * d;
  const bool in_row = j * E < d;
  Unit<E> g{}, u{};
  if (in_row) {
    g = load_unit<E>(gate + E * j);
    u = load_unit<E>(gate + d + E * j);
  }
  if (in_row) store_unit<ACT, E>(out + static_cast<int64_t>(row) * d + E * j, g, u);
}

template <int ACT, int E, int THREADS>
void launch_const(uint16_t* o, const uint16_t* x, int rows, int d, cudaStream_t s) {
  const dim3 grid((d / E + THREADS - 1) / THREADS, rows);
  rows_const<ACT, E, THREADS><<<grid, THREADS, 0, s>>>(o, x, d);
}

template <int ACT>
int launch(int variant, uint16_t* o, const uint16_t* x, int rows, int d, cudaStream_t s) {
  switch (variant) {
    case 0: {
      constexpr int kThreads = ACT == kGelu ? 128 : 256;  // ir_cuda's decode blocks
      rows_exit_first<ACT><<<dim3((d / 2 + kThreads - 1) / kThreads, rows), kThreads, 0, s>>>(o, x, d);
      break;
    }
    case 1: launch_const<ACT, 1, 64>(o, x, rows, d, s); break;
    case 2: launch_const<ACT, 1, 128>(o, x, rows, d, s); break;
    case 3: launch_const<ACT, 1, 256>(o, x, rows, d, s); break;
    case 4: launch_const<ACT, 2, 64>(o, x, rows, d, s); break;
    case 5: launch_const<ACT, 2, 128>(o, x, rows, d, s); break;
    case 6: launch_const<ACT, 2, 256>(o, x, rows, d, s); break;
    case 7: launch_const<ACT, 4, 64>(o, x, rows, d, s); break;
    case 8: launch_const<ACT, 4, 128>(o, x, rows, d, s); break;
    case 9: launch_const<ACT, 4, 256>(o, x, rows, d, s); break;
    case 10: launch_const<ACT, 8, 64>(o, x, rows, d, s); break;
    case 11: launch_const<ACT, 8, 128>(o, x, rows, d, s); break;
    default: return -1;
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

// variant: 100 * activation (0 silu, 1 gelu) + layout (0 ir_cuda's form; 1-11 elements a
// thread x threads a block: 1 x {64, 128, 256}, 2 x {64, 128, 256}, 4 x {64, 128, 256},
// 8 x {64, 128}). `scale` is unused; d, a gated row's width, is a multiple of 8.
extern "C" int probe_launch(int variant, const void* x, void* out, const float* scale, int rows, int d,
                            void* stream) {
  (void)scale;
  auto s = static_cast<cudaStream_t>(stream);
  const auto* xs = static_cast<const uint16_t*>(x);
  auto* o = static_cast<uint16_t*>(out);
  const int act = variant / 100;
  if (act == kSilu) return launch<kSilu>(variant % 100, o, xs, rows, d, s);
  if (act == kGelu) return launch<kGelu>(variant % 100, o, xs, rows, d, s);
  return -1;
}
