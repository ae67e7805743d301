// Shared helpers of the ir_cuda kernels: vectors, row plans (vector body with a scalar head and
// tail), register tiles, team reductions, fp8 conversion, and where kernels run (a CUDA stream,
// or fibers on the CPU when built with IR_CUDA_HOST_EMULATION for tests without a GPU).
#pragma once

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>

#if defined(IR_CUDA_HOST_EMULATION)
#include "emulation.h"
#else
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#endif
#include <cuda_fp8.h>

namespace ir_cuda {

// Programmatic dependent launch (compute capability 9.0 and later): a kernel launched with it may
// become resident while the kernel before it on its stream still runs, and waits for that
// kernel's results before it touches memory. The sources build twice: as `ir_cuda`, launched
// plainly (the default), and with IR_CUDA_PROGRAMMATIC as `ir_cuda_programmatic`, every launch
// programmatic (`ir_kernels_cuda.launch`). It pays only behind kernels that let their dependents
// start early: on an H200 a decode-size op behind one of ours took a median 0.41 µs less, behind
// a plain kernel 0.50 µs more (`programmatic-launch-H200.md`). A plain build keeps no trace
// of it: the wait and the trigger below, though no-ops without a programmatic launch, slowed
// plain launches by 1-30 % at shapes inside the L2 (`cuda-kernels-notes-H100.md`, round 39).
#if defined(IR_CUDA_PROGRAMMATIC)
constexpr bool kProgrammatic = true;
#else
constexpr bool kProgrammatic = false;
#endif

// Grids of at most this many threads let the launch after them start early: one wave of 1024
// threads an SM on a card of 128 SMs or more (an H100 or H200 has 132). Past one wave, an early
// trigger made 12-24 MB inside the L2 read as if from DRAM (H200, static quant 1024 x 8192: 5.75
// against 3.94 µs; 1024 x 4096, 262144 threads in blocks of at most 1280 threads an SM: 2.99
// against 2.56), and only a launch's latency is worth hiding.
constexpr unsigned long long kEarlyTriggerThreads = 128ull * 1024;

// The first step of every ir_cuda kernel. In the programmatic build: wait until the kernel before
// on the stream has finished and its writes are visible (so this kernel neither reads its inputs
// early nor overwrites memory that kernel still reads), then, in a grid of one wave, let the
// launch after it start. In the plain build, nothing.
__device__ __forceinline__ void await_previous_grid() {
#if defined(IR_CUDA_PROGRAMMATIC) && defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ < 900
#error "IR_CUDA_PROGRAMMATIC needs compute capability 9.0 or later"
#endif
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const unsigned long long threads = static_cast<unsigned long long>(gridDim.x) * gridDim.y *
                                     gridDim.z * (blockDim.x * blockDim.y * blockDim.z);
  if (threads <= kEarlyTriggerThreads) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

#if defined(IR_CUDA_HOST_EMULATION)
constexpr const char* kDeviceName = "CPU (emulated CUDA)";
inline bool on_kernel_device(const at::Tensor& t) { return t.is_cpu(); }

// Emulated kernels run synchronously on the calling thread (`emulation.h`).
struct DeviceScope {
  explicit DeviceScope(const at::Tensor& /*t*/) {}
  cudaStream_t stream = nullptr;
};

// An H100's L2 size, so that emulated launches take the paths an H100 would; tests set
// IR_CUDA_EMULATED_L2_BYTES to reach the paths of batches over the L2 with small tensors.
inline int64_t l2_cache_bytes() {
  const char* bytes = std::getenv("IR_CUDA_EMULATED_L2_BYTES");
  return bytes != nullptr ? std::atoll(bytes) : int64_t{50} << 20;
}

// An H100 SXM's DRAM bandwidth per SM (`dram_gbps_per_sm`); tests set
// IR_CUDA_EMULATED_DRAM_GBPS_PER_SM to take the launches of a card with more (an H200's 37).
inline double dram_gbps_per_sm() {
  const char* gbps = std::getenv("IR_CUDA_EMULATED_DRAM_GBPS_PER_SM");
  return gbps != nullptr ? std::atof(gbps) : 25.4;
}
#else
constexpr const char* kDeviceName = "CUDA";
inline bool on_kernel_device(const at::Tensor& t) { return t.is_cuda(); }

// The tensor's device made current, and its current stream.
struct DeviceScope {
  explicit DeviceScope(const at::Tensor& t)
      : guard(t.device()), stream(c10::cuda::getCurrentCUDAStream()) {}
  c10::cuda::CUDAGuard guard;
  cudaStream_t stream;
};

// Bytes of the current device's L2 cache: an op whose footprint exceeds it streams from DRAM.
inline int64_t l2_cache_bytes() {
  int device = 0, bytes = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, device));
  return bytes;
}

// A launch configuration: in thread block clusters of `cluster` blocks along x where `cluster` is
// over 1, and as a programmatic dependent launch in the programmatic build. It holds the
// attributes the configuration points to, so it is neither copied nor moved.
struct LaunchConfig {
  LaunchConfig(dim3 grid, dim3 block, unsigned cluster, cudaStream_t stream, size_t shared_bytes = 0) {
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = shared_bytes;
    config.stream = stream;
    config.attrs = attributes;
    if (cluster > 1) {
      cudaLaunchAttribute& a = attributes[config.numAttrs++];
      a.id = cudaLaunchAttributeClusterDimension;
      a.val.clusterDim.x = cluster;
      a.val.clusterDim.y = 1;
      a.val.clusterDim.z = 1;
    }
    if constexpr (kProgrammatic) {
      cudaLaunchAttribute& a = attributes[config.numAttrs++];
      a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      a.val.programmaticStreamSerializationAllowed = 1;
    }
  }
  LaunchConfig(const LaunchConfig&) = delete;
  LaunchConfig& operator=(const LaunchConfig&) = delete;
  cudaLaunchAttribute attributes[2]{};
  cudaLaunchConfig_t config{};
};

// kernel<<<grid, block>>>(args...) in thread block clusters of `cluster` blocks along x (compute
// capability 9.0 and later: see `cluster_sms`).
template <typename... Params, typename... Args>
void launch_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, unsigned cluster,
                    cudaStream_t stream, Args... args) {
  LaunchConfig c(grid, block, cluster, stream);
  C10_CUDA_CHECK(cudaLaunchKernelEx(&c.config, kernel, static_cast<Params>(args)...));
}

// kernel<<<grid, block>>>(args...), as a programmatic dependent launch in the programmatic build.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, Args... args) {
  if constexpr (kProgrammatic) {
    launch_cluster(kernel, grid, block, 1u, stream, args...);
  } else {
    kernel<<<grid, block, 0, stream>>>(static_cast<Params>(args)...);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

// Shared memory a block reserves and never uses, and the carveout (percent of the SM's shared
// memory) its kernel asks for, that hold the kernel to two blocks an SM: on Hopper (228 KB of
// shared memory an SM) the 100 KB carveout fits two such blocks, with the 1 KB the driver keeps
// for each, but not three, and leaves 156 KB of the SM's 256 KB to L1. The driver rounds the
// percentage up to a size it has (8, 16, 32, 64, 100, 132 KB, ...): 44 % (100.3 KB) gave 132 KB
// (Nsight Compute on an H200, round 42 of cuda-kernels-notes-H100.md), 43 % gives 100.
constexpr size_t kTwoBlocksSharedBytes = 47 * 1024;
constexpr int kTwoBlocksCarveoutPercent = 43;

// `launch` with at most two blocks of the kernel an SM (`kTwoBlocksSharedBytes`). For a kernel
// whose own shared memory stays under 1 KB; it lowers the occupancy only where more than two
// blocks would fit otherwise.
template <typename... Params, typename... Args>
void launch_two_blocks_an_sm(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream,
                             Args... args) {
  // a function attribute of the current device's context, set at every launch rather than
  // remembered per device: one host call beside a kernel that streams hundreds of MB
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                      kTwoBlocksCarveoutPercent));
  LaunchConfig c(grid, block, 1u, stream, kTwoBlocksSharedBytes);
  C10_CUDA_CHECK(cudaLaunchKernelEx(&c.config, kernel, static_cast<Params>(args)...));
}

constexpr int kMaxDevices = 64;

// `ask(device)` (a value of at least 0) for the current device, asked once per device and kept
// in `known` (0 until asked, then the value + 1); `beyond` on devices past kMaxDevices.
template <typename Ask>
int once_per_device(std::atomic<int> (&known)[kMaxDevices], int beyond, Ask ask) {
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  if (device >= kMaxDevices) return beyond;
  int value = known[device].load(std::memory_order_relaxed);
  if (value == 0) {
    value = ask(device) + 1;
    known[device].store(value, std::memory_order_relaxed);
  }
  return value - 1;
}

// Whether KERNEL, in clusters of `cluster` blocks of `block` threads, can have a cluster resident
// on the current device: a partition of the GPU (MIG) may leave fewer SMs to a GPC than a cluster
// needs, and the launch would then fail. Asked of the runtime once per device and kernel.
template <auto KERNEL>
bool cluster_fits(unsigned block, unsigned cluster) {
  static std::atomic<int> known[kMaxDevices];
  return once_per_device(known, 0, [&](int /*device*/) {
           LaunchConfig c(dim3(cluster), dim3(block), cluster, nullptr);
           int clusters = 0;
           C10_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, KERNEL, &c.config));
           return clusters > 0 ? 1 : 0;
         }) == 1;
}

// The current device's SM count. Asked of the driver once per device.
inline int sm_count() {
  static std::atomic<int> known[kMaxDevices];
  return once_per_device(known, 0, [](int device) {
    int sms = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return sms;
  });
}

// The current GPU's peak DRAM bandwidth per SM in GB/s, from its memory clock (double data
// rate) and bus width, asked of the driver once per device; 0 where it reports no clock. An
// H100 SXM has about 25, an H200 about 37 (as `ir_kernels_triton.platform.dram_gbps_per_sm`).
inline double dram_gbps_per_sm() {
  static std::atomic<int> known[kMaxDevices];
  const int mbps = once_per_device(known, 0, [](int device) {
    int memory_khz = 0, bus_bits = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, device));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
    // MB/s: two transfers a clock of bus_bits / 8 bytes each
    return memory_khz > 0 && bus_bits > 0 ? static_cast<int>(2.0 * memory_khz * bus_bits / 8 / 1e3) : 0;
  });
  const int sms = sm_count();
  return mbps > 0 && sms > 0 ? mbps / 1e3 / sms : 0.0;
}

// The current device's SM count where it runs thread block clusters (compute capability 9.0 and
// later), else 0. Asked of the driver once per device.
inline int cluster_sms() {
  static std::atomic<int> known[kMaxDevices];
  return once_per_device(known, 0, [](int device) {
    int major = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    return major >= 9 ? sm_count() : 0;
  });
}

// How many blocks of KERNEL, `block` threads each, the current device holds at once over all
// its SMs. Asked of the runtime once per device and kernel.
template <auto KERNEL>
int resident_blocks(unsigned block) {
  static std::atomic<int> known[kMaxDevices];
  return once_per_device(known, 0, [&](int /*device*/) {
    int per_sm = 0;
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, KERNEL, static_cast<int>(block), 0));
    return per_sm * sm_count();
  });
}
#endif

// DRAM bandwidth per SM (GB/s) from which a card takes the launches measured for deep loads:
// between the H100 SXM's 25 and the H200's 37, the two cards measured (Triton draws its line
// there too, `ir_kernels_triton.platform.DEEP_LOADS_GBPS_PER_SM`).
constexpr double kDeepLoadsGbpsPerSm = 30.0;

// Whether the current card has kDeepLoadsGbpsPerSm or more (a driver query once per device).
inline bool deep_loads() { return dram_gbps_per_sm() >= kDeepLoadsGbpsPerSm; }

constexpr float kFp8Max = 448.f;
// Smallest scale the dynamic quantizers use, so an all-zero row does not divide by zero.
constexpr float kMinScale = 1.f / (kFp8Max * 512.f);

// A float function of one float that is one PTX instruction on the GPU and `host` (an
// expression of v) in the host emulation.
#if defined(__CUDA_ARCH__)
#define IR_CUDA_PTX_FLOAT_FN(name, instruction, host)   \
  __device__ __forceinline__ float name(float v) {      \
    float r;                                            \
    asm(instruction " %0, %1;" : "=f"(r) : "f"(v));     \
    return r;                                           \
  }
#else
#define IR_CUDA_PTX_FLOAT_FN(name, instruction, host) \
  __device__ __forceinline__ float name(float v) { return host; }
#endif

// 2^v and 1 / v by the hardware's approximations, subnormal inputs and results flushed to zero
// (`.ftz`): one instruction each, where exp2f and __fdividef add a range check and two scalings
// an element for subnormal results. For the 16-bit gates, whose values never need them.
IR_CUDA_PTX_FLOAT_FN(exp2_ftz, "ex2.approx.ftz.f32", std::exp2(v))
IR_CUDA_PTX_FLOAT_FN(reciprocal_ftz, "rcp.approx.ftz.f32", 1.f / v)

// 1 / v by the hardware's approximate reciprocal (at most an ulp off over the whole float
// range; the fp8 rounding that follows is 2^-4 relative). The IEEE quotient branches to a slow
// path on v's range: a dozen dependent instructions between a row's reduction (or its scale's
// load) and its first store.
IR_CUDA_PTX_FLOAT_FN(fast_reciprocal, "rcp.approx.f32", 1.f / v)

// The dynamic scale of an absmax: amax / 448 (a multiplication by the rounded 1 / 448, within an
// ulp of the quotient), at least kMinScale.
__device__ __forceinline__ float scale_of_absmax(float amax) {
  return fmaxf(amax * (1.f / kFp8Max), kMinScale);
}

// N elements of U in one aligned access (16 bytes for the activations' own type).
template <typename U, int N>
struct alignas(sizeof(U) * N) VecN {
  U v[N];
};

// Elements of T per 16-byte vector.
template <typename T>
constexpr int vec_width() {
  return 16 / static_cast<int>(sizeof(T));
}

__device__ __forceinline__ bool aligned(const void* p, int bytes) {
  return (reinterpret_cast<uintptr_t>(p) & static_cast<uintptr_t>(bytes - 1)) == 0;
}

__device__ __forceinline__ uint8_t to_fp8(float v) {
  // saturating (clamp to +-448) and round-to-nearest-even, as torch's clamp-then-convert
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

// Two values in fp8 bits, the first in the low byte (one conversion instruction on sm_89+).
__device__ __forceinline__ uint16_t to_fp8x2(float lo, float hi) {
  return static_cast<uint16_t>(__nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, __NV_E4M3));
}

// N values times `inv_scale` (a scale's reciprocal) as N / 2 fp8 pairs into `pairs`.
template <int N>
__device__ __forceinline__ void to_fp8_pairs(const float* y, float inv_scale, uint16_t* pairs) {
#pragma unroll
  for (int e = 0; e < N; e += 2) pairs[e / 2] = to_fp8x2(y[e] * inv_scale, y[e + 1] * inv_scale);
}

// Bits of a float and back (`__uint_as_float` on the GPU).
__device__ __forceinline__ float bits_to_float(uint32_t w) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(w);
#else
  float f;
  std::memcpy(&f, &w, sizeof(f));
  return f;
#endif
}

// The 32 bits of a two-element vector type (`__nv_bfloat162`, `__half2`) or a float.
template <typename P>
__device__ __forceinline__ uint32_t word_bits(const P& p) {
  static_assert(sizeof(P) == sizeof(uint32_t), "word_bits: a 32-bit value");
  uint32_t w;
  std::memcpy(&w, &p, sizeof(w));
  return w;
}

// A two-element vector type (`__nv_bfloat162`, `__half2`) from its 32 bits.
template <typename P>
__device__ __forceinline__ P from_bits(uint32_t w) {
  static_assert(sizeof(P) == sizeof(uint32_t), "from_bits: a 32-bit value");
  P p;
  std::memcpy(&p, &w, sizeof(p));
  return p;
}

// The sum of two words of two 16-bit values each, element by element, rounded to their type
// (`add_words`): the paired add of the vector type P (`__nv_bfloat162`, `__half2`) on the GPU;
// in host builds the float32 sum rounded back by W (`Words<T>`), the same bits.
template <typename P, typename W>
__device__ __forceinline__ uint32_t paired_add(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return word_bits(__hadd2(from_bits<P>(a), from_bits<P>(b)));
#else
  float f[2], g[2];
  W::unpack(a, f);
  W::unpack(b, g);
  f[0] += g[0];
  f[1] += g[1];
  return W::pack(f);
#endif
}

// Host builds: two floats rounded to the 16-bit c10 type H, the first in the low half.
template <typename H>
inline uint32_t pack_pair_host(const float* f) {
  return static_cast<uint32_t>(H(f[0]).x) | static_cast<uint32_t>(H(f[1]).x) << 16;
}

// Elements of T as 32-bit words (two per word for the 16-bit types), converted to and from
// float a word at a time. A row held this way takes its packed size in registers, and reading
// a bfloat16 is one shift or mask where c10's type permutes bytes per element.
template <typename T>
struct Words;

template <>
struct Words<float> {
  static constexpr int kPerWord = 1;
  static constexpr uint32_t kOnes = 0x3f800000u;
  __device__ __forceinline__ static void unpack(uint32_t w, float* f) { f[0] = bits_to_float(w); }
  __device__ __forceinline__ static uint32_t pack(const float* f) { return word_bits(f[0]); }
  __device__ __forceinline__ static float round(float v) { return v; }
  __device__ __forceinline__ static uint32_t add(uint32_t a, uint32_t b) {
    return word_bits(bits_to_float(a) + bits_to_float(b));
  }
};

template <>
struct Words<c10::BFloat16> {
  static constexpr int kPerWord = 2;
  static constexpr uint32_t kOnes = 0x3f803f80u;
  __device__ __forceinline__ static void unpack(uint32_t w, float* f) {
    f[0] = bits_to_float(w << 16);
    f[1] = bits_to_float(w & 0xffff0000u);
  }
  // round to nearest even, both halves in one conversion on the GPU
  __device__ __forceinline__ static uint32_t pack(const float* f) {
#if defined(__CUDA_ARCH__)
    return word_bits(__floats2bfloat162_rn(f[0], f[1]));
#else
    return pack_pair_host<c10::BFloat16>(f);
#endif
  }
  __device__ __forceinline__ static float round(float v) {
#if defined(__CUDA_ARCH__)
    return __bfloat162float(__float2bfloat16_rn(v));
#else
    return static_cast<float>(c10::BFloat16(v));
#endif
  }
  __device__ __forceinline__ static uint32_t add(uint32_t a, uint32_t b) {
    return paired_add<__nv_bfloat162, Words>(a, b);
  }
};

template <>
struct Words<c10::Half> {
  static constexpr int kPerWord = 2;
  static constexpr uint32_t kOnes = 0x3c003c00u;
  __device__ __forceinline__ static void unpack(uint32_t w, float* f) {
#if defined(__CUDA_ARCH__)
    __half2 h;
    std::memcpy(&h, &w, sizeof(h));
    const float2 v = __half22float2(h);
    f[0] = v.x;
    f[1] = v.y;
#else
    f[0] = static_cast<float>(c10::Half(static_cast<uint16_t>(w & 0xffffu), c10::Half::from_bits()));
    f[1] = static_cast<float>(c10::Half(static_cast<uint16_t>(w >> 16), c10::Half::from_bits()));
#endif
  }
  __device__ __forceinline__ static uint32_t pack(const float* f) {
#if defined(__CUDA_ARCH__)
    return word_bits(__floats2half2_rn(f[0], f[1]));
#else
    return pack_pair_host<c10::Half>(f);
#endif
  }
  __device__ __forceinline__ static float round(float v) {
#if defined(__CUDA_ARCH__)
    return __half2float(__float2half_rn(v));
#else
    return static_cast<float>(c10::Half(v));
#endif
  }
  __device__ __forceinline__ static uint32_t add(uint32_t a, uint32_t b) {
    return paired_add<__half2, Words>(a, b);
  }
};

// N words in one access (a 16-byte vector at N = 4), and their elements as floats.
template <int N>
using WordsN = VecN<uint32_t, N>;
using Words4 = WordsN<4>;

template <typename T, int N>
__device__ __forceinline__ void unpack_words(const WordsN<N>& v, float* f) {
#pragma unroll
  for (int w = 0; w < N; ++w) Words<T>::unpack(v.v[w], f + w * Words<T>::kPerWord);
}

template <typename T, int N = 4>
__device__ __forceinline__ WordsN<N> pack_words(const float* f) {
  WordsN<N> v;
#pragma unroll
  for (int w = 0; w < N; ++w) v.v[w] = Words<T>::pack(f + w * Words<T>::kPerWord);
  return v;
}

// a + b element by element, rounded to T: the 16-bit types' paired add, one instruction a word
// where unpacking, two float adds and a conversion took seven. The same bits as the float32 sum
// rounded to T: two T values sum exactly in float32 unless one is under 2^-12 of the other
// (fp16; 2^-15 for bfloat16), and then both roundings return the larger.
template <typename T, int N>
__device__ __forceinline__ WordsN<N> add_words(const WordsN<N>& a, const WordsN<N>& b) {
  WordsN<N> v;
#pragma unroll
  for (int w = 0; w < N; ++w) v.v[w] = Words<T>::add(a.v[w], b.v[w]);
  return v;
}

// N floats rounded to T and widened again, as `Words<T>::round` each, two to a conversion: the
// scalar bf16 conversion is an F2F on the slow conversion pipe, which bounds a quantizing tail
// at decode sizes (Triton's round 5, `triton-tuning-H100.log` section 13).
template <typename T, int N>
__device__ __forceinline__ void round_pairs(float* f) {
  if constexpr (Words<T>::kPerWord == 2) {
#pragma unroll
    for (int e = 0; e < N; e += 2) Words<T>::unpack(Words<T>::pack(f + e), f + e);
  }
}

// A load of N words that stays where it is written in the PTX. NVVM otherwise sinks a load next
// to its first use to save registers: after the gate's erf in gelu_and_mul, the up half's load
// waited for that math and cost a second memory round trip. ptxas still schedules it: it too
// issues a load shortly before its first use (see the row kernels' x * w).
template <int N>
__device__ __forceinline__ WordsN<N> load_now(const WordsN<N>* p) {
#if defined(__CUDA_ARCH__)
  WordsN<N> v;
  if constexpr (N == 4) {
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.v[0]), "=r"(v.v[1]), "=r"(v.v[2]), "=r"(v.v[3])
                 : "l"(p));
  } else if constexpr (N == 2) {
    asm volatile("ld.global.v2.u32 {%0, %1}, [%2];" : "=r"(v.v[0]), "=r"(v.v[1]) : "l"(p));
  } else {
    static_assert(N == 1, "load_now: 1, 2 or 4 words");
    asm volatile("ld.global.u32 %0, [%1];" : "=r"(v.v[0]) : "l"(p));
  }
  return v;
#else
  return *p;
#endif
}

// A float loaded where it is written (`load_now`): a scale the row's end needs. Its own asm
// rather than a one-word `load_now`: the kernels measured on the GPU were compiled with this
// one, and the other allocates registers differently in some of them.
__device__ __forceinline__ float load_now(const float* p) {
#if defined(__CUDA_ARCH__)
  float v;
  asm volatile("ld.global.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
#else
  return *p;
#endif
}

// Asks for `p`'s line in L1 now. ptxas schedules a load just before its first use, and a
// scale first used after a row's reduction was loaded there: a round trip to L2 between the
// reduction and the first store. Prefetched at the start, that load finds the line in L1.
__device__ __forceinline__ void prefetch_l1(const void* p) {
#if defined(__CUDA_ARCH__)
  asm volatile("prefetch.global.L1 [%0];" : : "l"(p));
#else
  (void)p;
#endif
}

// A 16-byte load where `in_row` (else zeros) with an L2 eviction policy on the access (and the
// same hint in L1), as Triton's `eviction_policy`. Evict-first: for rows read once by an op
// whose bytes just exceed the L2, so that they do not push out the lines the next call reads.
// Evict-last: for rows read again from L2 after their reduction (`RELOAD` in norm.cu), so that
// the lines stay until then. Predicated inside the asm, as the compiler predicates a plain load
// (it branches around an asm). The "memory" clobber keeps it ahead of the stores that follow it
// in the program (an in-place op writes over what it loaded).
template <bool EVICT_LAST>
__device__ __forceinline__ Words4 load_with_eviction(const Words4* p, bool in_row) {
#if defined(__CUDA_ARCH__)
  Words4 v{};
  uint64_t policy;
  // the hint is part of each instruction's text: one asm pair per policy
#define IR_CUDA_LOAD_WITH_EVICTION(HINT)                                                    \
  asm volatile("createpolicy.fractional.L2::" HINT ".b64 %0, 1.0;" : "=l"(policy));         \
  asm volatile(                                                                            \
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %6, 0;\n\t"                                     \
      "@p ld.global.L1::" HINT ".L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n\t}"   \
      : "+r"(v.v[0]), "+r"(v.v[1]), "+r"(v.v[2]), "+r"(v.v[3])                             \
      : "l"(p), "l"(policy), "r"(static_cast<int>(in_row))                                  \
      : "memory")
  if constexpr (EVICT_LAST) {
    IR_CUDA_LOAD_WITH_EVICTION("evict_last");
  } else {
    IR_CUDA_LOAD_WITH_EVICTION("evict_first");
  }
#undef IR_CUDA_LOAD_WITH_EVICTION
  return v;
#else
  return in_row ? *p : Words4{};
#endif
}

__device__ __forceinline__ Words4 load_evict_first(const Words4* p, bool in_row) {
  return load_with_eviction<false>(p, in_row);
}

__device__ __forceinline__ Words4 load_evict_last(const Words4* p, bool in_row) {
  return load_with_eviction<true>(p, in_row);
}

__device__ __forceinline__ Words4 fill4(uint32_t word) {
  Words4 v;
#pragma unroll
  for (int w = 0; w < 4; ++w) v.v[w] = word;
  return v;
}

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

struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// v[0] op v[1] op ... op v[N - 1] as a tree: log2(N) dependent steps where a running
// accumulator takes N. At decode sizes a row's time is its chain of dependent instructions
// between the loads and the first store, and each thread's sum or absmax was the longest link
// of it. `v` is overwritten.
template <int N, typename Op>
__device__ __forceinline__ float tree_reduce(float* v, Op op) {
#pragma unroll
  for (int step = 1; step < N; step *= 2) {
#pragma unroll
    for (int i = 0; i + step < N; i += 2 * step) v[i] = op(v[i], v[i + step]);
  }
  return v[0];
}

// log2 of a power of two, at compile time where `v` is a constant.
__host__ __device__ constexpr int log2_of(int v) { return v <= 1 ? 0 : 1 + log2_of(v / 2); }

// One value of a reduction and the operation that combines it: `reducing(acc, SumOp{})`. The
// reductions below take several of these at once, so their shuffle trees interleave and one
// barrier or exchange serves them all; each value gets the same steps, so the same bits, as
// when reduced alone.
template <typename Op>
struct Reducing {
  float& value;
  Op op;
  // combines the value with that of the lane `offset` away
  __device__ __forceinline__ void with_lane(int offset) {
    value = op(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
};
template <typename Op>
__device__ __forceinline__ Reducing<Op> reducing(float& value, Op op) {
  return Reducing<Op>{value, op};
}

// The first N partials at `p` (shared memory) combined by `op` in one tree, neighbours first:
// the order of a shuffle tree over N lanes, so the same bits.
template <int N, typename Op>
__device__ __forceinline__ float combine_partials(const float* p, Op op) {
  float w[N];
#pragma unroll
  for (int i = 0; i < N; ++i) w[i] = p[i];
  return tree_reduce<N>(w, op);
}

// Reduces each value over a team of `team` consecutive threads (a power of two up to 512,
// dividing the block); every member gets the results. Every thread of the block must call it.
// Each list of `Op`s has its own shared array, and a kernel reduces with each list once, so no
// barrier is needed before the partials are written. `team_reduce<TEAM>` below is the same
// reduction, to the bit, for a team known at compile time.
template <typename... Op>
__device__ __forceinline__ void team_reduce(int team, Reducing<Op>... r) {
  __shared__ float partial[sizeof...(Op)][32];
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    if (offset < team) (r.with_lane(offset), ...);
  }
  if (team <= 32) return;
  if ((threadIdx.x & 31) == 0) {
    int k = 0;
    ((partial[k++][threadIdx.x >> 5] = r.value), ...);
  }
  __syncthreads();
  // the team's warp partials, one per lane (repeated across the warp), reduced by shuffles:
  // five steps at most instead of a chain of shared-memory reads; neighbours first, as
  // `RowExchange` combines a spread row's warps, so a team's sum is its two halves' sums added
  const int warps = team >> 5;
  const int first = static_cast<int>(threadIdx.x & ~(team - 1)) >> 5;
  const int i = first + (static_cast<int>(threadIdx.x) & (warps - 1));
  int k = 0;
  ((r.value = partial[k++][i]), ...);
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    if (offset < warps) (r.with_lane(offset), ...);
  }
}

// `team_reduce` for a team of TEAM threads: the same trees, but after the barrier every thread
// reads its team's warp partials of a single reduction in wide loads (a warp's lanes the same
// words, one broadcast a load) and combines them itself, instead of by shuffles, which wait on
// each other. H100, against shuffles (cuda-kernels-notes-H100.md, round 24): rms_norm at
// 1024 x 4096 4.68 to 4.26 µs, 16 x 4096 1.70 to 1.61; two reductions at once (the dynamic
// norm's sum and absmax) lost 1-5 % at 4096 wide, and teams of 512 (`RowExchange`) lost up to
// 8 %, so those keep the shuffles.
template <int TEAM, typename... Op>
__device__ __forceinline__ void team_reduce(Reducing<Op>... r) {
  constexpr int kWarps = TEAM / 32;
  if constexpr (kWarps <= 1 || sizeof...(Op) > 1) {
    team_reduce(TEAM, r...);
  } else {
    alignas(16) __shared__ float partial[32];
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) (r.with_lane(offset), ...);
    if ((threadIdx.x & 31) == 0) ((partial[threadIdx.x >> 5] = r.value), ...);
    __syncthreads();
    const int first = static_cast<int>(threadIdx.x & ~(TEAM - 1)) >> 5;
    ((r.value = combine_partials<kWarps>(partial + first, r.op)), ...);
  }
}

// `v` back after a barrier of the whole block, through shared memory so that the barrier
// waits on it: no thread goes on before every thread of the block has computed its `v` (a bare
// __syncthreads does not depend on the loads `v` comes from, and ptxas may issue it first).
// Every thread of the block must call it, once per kernel.
template <int THREADS>
__device__ __forceinline__ float after_block_barrier(float v) {
  __shared__ float staged[THREADS];
  staged[threadIdx.x] = v;
  __syncthreads();
  return staged[threadIdx.x];
}

// `v` reduced by `op` over the team, as above.
template <typename Op>
__device__ __forceinline__ float team_reduce(float v, int team, Op op) {
  team_reduce(team, reducing(v, op));
  return v;
}

// The launch of a row kernel: `team` threads per row, each holding VPT vectors per chunk.
// Depends on the row width only, so a row's result does not depend on the batch.
constexpr int kMaxTeam = 512;  // 128 registers per thread, so a tile of 4 vectors does not spill

// Threads of a row kernel's block for a team: at least four warps, so a block of short rows
// holds several of them.
__host__ __device__ constexpr int row_block_threads(int team) { return team > 128 ? team : 128; }

struct RowLaunch {
  int team;     // at least 8, so a lane holds each scalar of a row's unaligned head or tail
  int vpt;      // vectors a thread: 2 or 4, or 1 for `one_vector` launches and the streamed
                // fp8 groups (`streamed_short_rows`); at least two loads in flight per thread
                // otherwise (fp8 groups of 128 within the L2 with one vector a thread took up
                // to 1.8x Triton's time on an H100)
  bool stream;  // the row does not fit one tile: it is read in chunks, twice
  int threads;  // per block: `row_block_threads(team)`
};

// Rows of more than 128 and at most 512 vectors take one vector a thread where `one_vector`
// (the fused add's aligned kernels: a residual doubles a thread's loads, and the wider team
// halves each thread's chain of adds and stores; Triton's tuned norms take 8 and 16 warps for
// 2048 and 4096 bf16 elements with a residual and fp8 output,
// `ir_kernels_triton.norm_kernels.norm_warps`). The plain fused add's teams of 512 take two
// vectors a thread where their rows are not spread over a cluster and the chip holds the batch
// at once (`kHalves`, `launch_typed` in norm.cu).
inline RowLaunch row_launch(int64_t width, int vec, bool one_vector = false) {
  const int64_t units = (width + vec - 1) / vec;
  const int vpt = one_vector && units > 128 && units <= kMaxTeam ? 1 : units <= 1024 ? 2 : 4;
  int team = 8;
  while (team < kMaxTeam && static_cast<int64_t>(team) * vpt < units) team *= 2;
  const bool stream = static_cast<int64_t>(team) * vpt < units;
  return RowLaunch{team, vpt, stream, row_block_threads(team)};
}

// AT_DISPATCH_FLOATING_TYPES_AND2 without double: the kernels take float32, float16, bfloat16.
#define IR_CUDA_DISPATCH_FLOAT(TYPE, NAME, ...)                                          \
  AT_DISPATCH_SWITCH(TYPE, "ir_cuda_" NAME,                                              \
                     AT_DISPATCH_CASE(at::kFloat, __VA_ARGS__)                          \
                         AT_DISPATCH_CASE(at::kHalf, __VA_ARGS__)                       \
                             AT_DISPATCH_CASE(at::kBFloat16, __VA_ARGS__))

// Host side: `p` is `bytes`-aligned.
inline bool aligned_host(const void* p, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0;
}

// Host side: the bytes of `t`'s elements.
inline int64_t tensor_bytes(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

// Host side: every row of the 2-D tensor `t` starts `bytes`-aligned (its base and its row stride).
inline bool rows_aligned(const at::Tensor& t, int64_t bytes) {
  return aligned_host(t.data_ptr(), bytes) &&
         (t.size(0) <= 1 || (t.stride(0) * static_cast<int64_t>(t.element_size())) % bytes == 0);
}

// A grid of `rows` x `blocks_per_row` blocks, flattened so that a row's blocks run next to each
// other (DRAM page locality: silu_and_mul at 16384 x 14336 went from 0.98 to 1.02 of copy on an
// H100 against a (rows, blocks) grid). `flat_grid` is the launch's grid, `FlatBlock` the block's
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

inline void check_rows(const at::Tensor& t, const char* name) {
  TORCH_CHECK(on_kernel_device(t) && t.dim() == 2 && (t.size(1) <= 1 || t.stride(1) == 1),
              "ir_cuda: ", name, " must be a 2-D ", kDeviceName,
              " tensor with contiguous rows, got sizes ", t.sizes(), " strides ", t.strides(),
              " on ", t.device());
}

// Host side: a stride as the kernels take it, in 32 bits (an address is then one
// 32 x 32 -> 64-bit multiply); `what` names it in the error.
inline int stride_32(int64_t stride, const char* what) {
  TORCH_CHECK(stride >= 0 && stride <= std::numeric_limits<int>::max(), "ir_cuda: ", what,
              " is ", stride, " elements; the kernels take strides of 0 to 2^31 - 1");
  return static_cast<int>(stride);
}

// Host side: the row stride of the 2-D tensor `t` in 32 bits. A single row's stride is never
// used.
inline int row_stride(const at::Tensor& t, const char* name) {
  if (t.size(0) <= 1) return 0;
  const std::string what = std::string(name) + "'s row stride";
  return stride_32(t.stride(0), what.c_str());
}

inline void check_same(const at::Tensor& t, const char* name, const at::Tensor& x) {
  check_rows(t, name);
  TORCH_CHECK(t.sizes() == x.sizes() && t.scalar_type() == x.scalar_type(), "ir_cuda: ", name,
              " must match x in shape ", x.sizes(), " and dtype ", x.scalar_type(), ", got ",
              t.sizes(), " ", t.scalar_type());
}

inline void check_fp8(const at::Tensor& t, const char* name, at::IntArrayRef sizes) {
  check_rows(t, name);
  TORCH_CHECK(t.scalar_type() == at::kFloat8_e4m3fn && t.sizes() == sizes, "ir_cuda: ", name,
              " must be float8_e4m3fn of sizes ", sizes, ", got ", t.scalar_type(), " ",
              t.sizes());
}

inline void check_scale(const at::Tensor& t, const char* name, const at::Tensor& x) {
  TORCH_CHECK(on_kernel_device(t) && t.device() == x.device() && t.scalar_type() == at::kFloat &&
                  t.numel() == 1,
              "ir_cuda: ", name, " must be a one-element float32 tensor on ", x.device());
}

}  // namespace ir_cuda
