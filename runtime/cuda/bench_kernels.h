// `trctl bench kernels`: each CUDA kernel of the backend timed with CUDA events on random data, its achieved GB/s
// (memory-bound kernels: bytes read + written) or TFLOP/s (GEMMs) set against the ceilings measured on the same
// card in the same run (a large device-to-device copy; large cuBLASLt GEMMs per dtype).
#pragma once
#include <string>
#include <vector>

#include "core/util/error.h"

namespace trctl {

struct KernelBenchRow {
  std::string name, size, unit;  // unit: "GB/s" or "TFLOP/s"
  double median_us = 0, achieved = 0, ceiling = 0;
};

Result<std::vector<KernelBenchRow>> cuda_bench_kernels();

std::string kernel_bench_table(const std::vector<KernelBenchRow>& rows);
std::string kernel_bench_json(const std::vector<KernelBenchRow>& rows, const std::string& device);

}  // namespace trctl
