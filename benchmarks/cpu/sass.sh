#!/usr/bin/env bash
# Machine code of the ir_cuda kernels for Hopper, built on a machine without a GPU: registers
# per kernel (ptxas) and the SASS of one kernel, to check a change's load order, register count
# and instruction count before spending GPU time on it. Needs nvcc (CUDA 13) and the cuobjdump
# that Triton's package carries; torch's CPU wheel lacks one generated header of c10/cuda, which
# an empty stand-in replaces (only its macros' defaults are used).
# Usage: benchmarks/cpu/sass.sh SOURCE [KERNEL_PATTERN]
#   SOURCE: norm, activation or rotary (csrc/SOURCE.cu); KERNEL_PATTERN: a regex on the mangled
#   name, e.g. 'aligned_row_kernelIN3c108BFloat16ELi256ELi2ELb0ELb1ELi0E' (bf16 rms_norm, 8192
#   wide). Prints registers of the matching kernels, then memory, barrier and branch instructions
#   of the first match; the full SASS is left in $OUT_DIR/SOURCE.sass.
set -euo pipefail
cd "$(dirname "$0")/../.."
src=$1
pattern=${2:-.}
out=${OUT_DIR:-/tmp/ir-cuda-sass}
mkdir -p "$out/shim/c10/cuda/impl"
printf '#pragma once\n' > "$out/shim/c10/cuda/impl/cuda_cmake_macros.h"
tools=$(python -c 'import os, triton; print(os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin"))')
includes=$(python -c 'import torch.utils.cpp_extension as c; print(" ".join("-I" + p for p in c.include_paths()))')
# shellcheck disable=SC2086
nvcc -std=c++17 -O3 --expt-relaxed-constexpr -arch=sm_90a -cubin -w -I"$out/shim" $includes \
  -Ipackages/ir-kernels-cuda/csrc "packages/ir-kernels-cuda/csrc/$src.cu" -o "$out/$src.cubin" \
  -Xptxas -v 2> "$out/$src.ptxas"
awk '/Compiling entry function/ {name=$0} /Used [0-9]+ registers/ {print name " :: " $0}' "$out/$src.ptxas" |
  grep -E "$pattern" | sed -E "s/.*function '([^']*)'.*Used ([0-9]+) registers.*/\2 registers  \1/" || true
"$tools/cuobjdump" -sass "$out/$src.cubin" > "$out/$src.sass"
awk -v pat="$pattern" '/Function :/ {if (done) exit; on = ($0 ~ pat); if (on) {print; done = 1}; next}
  on && /\/\*[0-9a-f][0-9a-f][0-9a-f][0-9a-f]\*\// {n++; if ($0 ~ /LDG|STG|BAR|SHFL|BRA|CALL|EXIT/) print}
  END {print n " instructions"}' "$out/$src.sass"
