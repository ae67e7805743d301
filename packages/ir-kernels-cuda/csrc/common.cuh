// Everything the ir_cuda kernels share, by job:
// - device.cuh: where kernels run (a GPU, or the CPU under host emulation), launching, queries
// - numerics.cuh: one-instruction approximations, fp8 conversion and scales
// - words.cuh: aligned vectors and 32-bit words of elements
// - loads.cuh: loads with a fixed place or cache policy
// - rows.cuh: row plans, register tiles, row and flat launches
// - reduce.cuh: thread, warp and team reductions
// - checks.cuh: dtype dispatch and argument checks (host side)
#pragma once

#include "device.cuh"
#include "numerics.cuh"
#include "words.cuh"
#include "loads.cuh"
#include "rows.cuh"
#include "reduce.cuh"
#include "checks.cuh"
