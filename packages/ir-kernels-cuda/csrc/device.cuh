// The device the ir_cuda kernels run on: a CUDA GPU, or fibers on the CPU when built with
// IR_CUDA_HOST_EMULATION for tests without a GPU (`emulation.h`). How a kernel is launched on it
// (programmatic dependent launch, clusters, blocks an SM) and what the kernels ask of it (SMs,
// L2 size, DRAM bandwidth per SM), once per device.
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

}  // namespace ir_cuda
