// Internal to `trctl bench kernels` (bench_kernels.cpp, bench_kernels_conv.cpp): the timing harness both files
// share (Bench, DeviceBuffer, time_us, random fills) and the convolution benches bench_kernels_conv.cpp defines.
// Not an API: include only from runtime/cuda/bench_kernels*.cpp.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/util/error.h"
#include "runtime/cuda/bench_kernels.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/lt_gemm.h"

namespace trctl::bench_detail {

struct DeviceBuffer {
  void* p = nullptr;
  ~DeviceBuffer() { TRCTL_CUDA_WARN(cudaFree(p)); }
};

// Median time in microseconds of `reps` launches of f, after `warm` untimed ones.
Result<double> time_us(cudaStream_t s, const std::function<Status()>& f, int warm = 3, int reps = 20);

// Random floats in [-1, 1) (never zeros: zeros can run faster than real data).
Status fill_random(void* p, size_t floats, uint32_t seed);

// n f16 values from the 64 Mi random floats `src` (repeated): random conv operands without a host copy.
Status fill_f16(cudaStream_t s, const void* src, int64_t src_n, void* dst, int64_t n);

struct Bench {
  CudaContext& ctx;
  std::vector<KernelBenchRow> rows;
  std::vector<std::string> only;  // `--only`: the rows whose name contains one of these (empty: every row)
  double copy_gbs = 0, gemm_f16 = 0, gemm_f32 = 0, gemm_tf32 = 0;

  // Whether row `name` runs: every row without `--only`, else the ceilings (every row is set against them) and the
  // rows whose name contains one of its strings.
  bool wanted(const std::string& name) const {
    if (only.empty() || name.rfind("ceiling:", 0) == 0) return true;
    for (const std::string& o : only)
      if (name.find(o) != std::string::npos) return true;
    return false;
  }
  // A row without a timing (a path with no engine or not supported here), kept when wanted.
  void note(KernelBenchRow r) {
    if (wanted(r.name)) rows.push_back(std::move(r));
  }

  Status add(const std::string& name, const std::string& size, double bytes_or_flops, bool flops, double ceiling,
             const std::function<Status()>& f) {
    if (!wanted(name)) return ok_status();
    Result<double> us = time_us(ctx.stream, f);
    if (!us.ok()) return us.errors();
    KernelBenchRow r;
    r.name = name;
    r.size = size;
    r.unit = flops ? "TFLOP/s" : "GB/s";
    r.median_us = us.value();
    r.achieved = flops ? bytes_or_flops / (us.value() * 1e6) : bytes_or_flops / (us.value() * 1e3);
    r.ceiling = ceiling;
    rows.push_back(r);
    return ok_status();
  }

  // D = A B for (m, n, k) square-ish; returns TFLOP/s. record: a row named `name` against `ceiling` (< 0: the
  // rate itself, for the ceiling rows); a row `--only` leaves out is not run (0 returned).
  Result<double> gemm_rate(GpuDType t, GemmMath math, int64_t m, int64_t n, int64_t k, void* a, void* b, void* d,
                           bool record, const std::string& name, double ceiling = -1) {
    if (record && !wanted(name)) return 0.0;
    GemmDesc desc;
    desc.m = m;
    desc.n = n;
    desc.k = k;
    desc.trans_b = true;
    desc.ab_type = desc.d_type = t;
    desc.math = math;
    Result<LtGemmPlan> plan = lt_gemm_plan(ctx, desc);
    if (!plan.ok()) return plan.errors();
    LtGemmPlan& pl = plan.value();
    GemmArgs args;
    args.a = a;
    args.b = b;
    args.d = d;
    Result<double> us = time_us(ctx.stream, [&] { return lt_gemm_run(ctx, pl, args); });
    if (!us.ok()) return us.errors();
    const double tflops = 2.0 * m * n * k / (us.value() * 1e6);
    if (record) {
      KernelBenchRow r{name, std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k), "TFLOP/s",
                       us.value(), tflops, ceiling < 0 ? tflops : ceiling};
      rows.push_back(r);
    }
    return tflops;
  }
};

// The convolution benches (bench_kernels_conv.cpp); random: the 64 Mi random floats (random_n) their operands are
// cast from.
Status bench_stem_convs(Bench& b, const void* random, int64_t random_n);
Status bench_wgconv(Bench& b, const void* random, int64_t random_n);
Status bench_conv_bn_stats(Bench& b, const void* random, int64_t random_n);
Status bench_conv_bn_bwd(Bench& b, const void* random, int64_t random_n);

}  // namespace trctl::bench_detail
