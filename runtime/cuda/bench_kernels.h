// `trctl bench kernels`: each CUDA kernel of the backend timed with CUDA events on random data, its achieved GB/s
// (memory-bound kernels: bytes read + written) or TFLOP/s (GEMMs) set against the ceilings measured on the same
// card in the same run (a large device-to-device copy; large cuBLASLt GEMMs per dtype).
#pragma once
#include <string>
#include <vector>

#include "core/util/error.h"
#include "runtime/report/bench_result.h"

namespace trctl {

struct KernelBenchRow {
  std::string name, size, unit;  // unit: "GB/s" or "TFLOP/s"
  double median_us = 0, achieved = 0, ceiling = 0;
};

// only: run just the rows whose name contains one of these strings (and the ceilings); empty: every row.
Result<std::vector<KernelBenchRow>> cuda_bench_kernels(const std::vector<std::string>& only = {});

std::string kernel_bench_table(const std::vector<KernelBenchRow>& rows);
// Adds "<kernel>/median_us" and "<kernel>/achieved" (GB/s or TFLOP/s) per row; the rows, with sizes and ceilings,
// go into the details as "rows".
void kernel_bench_metrics(const std::vector<KernelBenchRow>& rows, BenchResult* out);

}  // namespace trctl
