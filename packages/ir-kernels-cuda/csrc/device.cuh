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

#include "tuning.cuh"

namespace ir_cuda {

// Programmatic dependent launch (compute capability 9.0 and later): a kernel launched with it may
// become resident while the kernel before it on its stream still runs, and waits for that
// kernel's results before it touches memory. The sources build twice: as `ir_cuda`, launched
// plainly (the default), and with IR_CUDA_PROGRAMMATIC as `ir_cuda_programmatic`, every launch
// programmatic (`ir_kernels_cuda.launch`). It pays only behind kernels that let their dependents
// start early, and costs time behind a plain kernel, so it is off by default. A plain build
// keeps no trace of it: the wait and the trigger below, though no-ops without a programmatic
// launch, slow plain launches at shapes inside the L2.
#if defined(IR_CUDA_PROGRAMMATIC)
constexpr bool kProgrammatic = true;
#else
constexpr bool kProgrammatic = false;
#endif

// The first step of every ir_cuda kernel. In the programmatic build: wait until the kernel before
// on the stream has finished and its writes are visible (so this kernel neither reads its inputs
// early nor overwrites memory that kernel still reads), then, in a grid of one wave, let the
// launch after it start (`tuning::kEarlyTriggerThreads`: only a launch's latency is worth hiding,
// and past one wave an early start slows the rows inside the L2). In the plain build, nothing.
__device__ __forceinline__ void await_previous_grid() {
#if defined(IR_CUDA_PROGRAMMATIC) && defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ < 900
#error "IR_CUDA_PROGRAMMATIC needs compute capability 9.0 or later"
#endif
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const unsigned long long threads = static_cast<unsigned long long>(gridDim.x) * gridDim.y *
                                     gridDim.z * (blockDim.x * blockDim.y * blockDim.z);
  if (threads <= tuning::kEarlyTriggerThreads) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
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

// The emulated card's L2 (50 MiB, that of the shallow-loads class's card, so that emulated
// launches take its paths); tests set IR_CUDA_EMULATED_L2_BYTES to reach the paths of batches
// over the L2 with small tensors.
inline int64_t l2_cache_bytes() {
  const char* bytes = std::getenv("IR_CUDA_EMULATED_L2_BYTES");
  return bytes != nullptr ? std::atoll(bytes) : int64_t{50} << 20;
}

// The emulated card's DRAM bandwidth per SM (`dram_gbps_per_sm`): 25.4 GB/s, a shallow-loads
// card's; tests set IR_CUDA_EMULATED_DRAM_GBPS_PER_SM to take another device class's launches.
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

// `launch` with at most two blocks of the kernel an SM: each block reserves shared memory it never
// uses (`tuning::kTwoBlocksSharedBytes`) under a carve-out (`tuning::kTwoBlocksCarveoutPercent`)
// that fits two such blocks an SM but not three, and leaves the rest of the SM's memory to L1.
// The driver rounds the carve-out up to a size it has (8, 16, 32, 64, 100, 132 KB, ...). For a
// kernel whose own shared memory stays under 1 KB; it lowers the occupancy only where more than
// two blocks would fit otherwise.
template <typename... Params, typename... Args>
void launch_two_blocks_an_sm(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream,
                             Args... args) {
  // a function attribute of the current device's context, set at every launch rather than
  // remembered per device: one host call beside a kernel that streams hundreds of MB
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                      tuning::kTwoBlocksCarveoutPercent));
  LaunchConfig c(grid, block, 1u, stream, tuning::kTwoBlocksSharedBytes);
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
// rate) and bus width, asked of the driver once per device; 0 where it reports no clock. It
// sets the card's device class (`device_class`).
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

// The current card's device class (`tuning.cuh`), from its DRAM bandwidth per SM (a driver
// query once per device). The launches that depend on it read the per-class table.
inline DeviceClass device_class() {
  return dram_gbps_per_sm() >= tuning::kDeepLoadsGbpsPerSm ? kDeepLoads : kShallowLoads;
}

}  // namespace ir_cuda
