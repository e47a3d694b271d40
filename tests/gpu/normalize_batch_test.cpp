// augment_batch_cuda's normalize-only path (normalize_batch_kernel: no geometry, fp16 / bf16 batches, the batch's
// bytes in order through the per-channel table) against the general kernel: the general kernel's fp32 output of the
// same batch (it never takes the packed path) rounded to fp16 / bf16 on the host must be bitwise the packed path's,
// with the same labels and the cursor advanced alike -- for RGB and single-channel samples, a cursor that wraps the
// epoch order, and a batch whose elements are not a multiple of a block.
#include <catch2/catch.hpp>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "dataio/transforms.h"
#include "runtime/ops/augment/augment_cuda.h"

using namespace trctl;

namespace {

struct Batch {
  std::vector<uint16_t> x;  // fp16 / bf16 bits, or the fp32 output rounded to them
  std::vector<int32_t> y;
  uint32_t cursor_after = 0;
};

// One batch of `batch` samples from cursor `cursor` of a fixed permutation, as `type` (F32: rounded to `round` here).
Batch run_batch(const GpuPipeline& gp, const std::vector<uint8_t>& pixels, const std::vector<int32_t>& labels,
                int64_t batch, uint32_t cursor, GpuDType type, GpuDType round) {
  const int64_t n = static_cast<int64_t>(labels.size());
  const int64_t out = static_cast<int64_t>(gp.out_h) * gp.out_w * gp.c;
  std::vector<int32_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % n);
  uint8_t* px = nullptr;
  int32_t *lab = nullptr, *ord = nullptr, *y = nullptr;
  uint32_t* counters = nullptr;
  void* x = nullptr;
  const size_t esize = type == GpuDType::F32 ? 4 : 2;
  REQUIRE(cudaMalloc(&px, pixels.size()) == cudaSuccess);
  REQUIRE(cudaMalloc(&lab, static_cast<size_t>(n) * 4) == cudaSuccess);
  REQUIRE(cudaMalloc(&ord, static_cast<size_t>(n) * 4) == cudaSuccess);
  REQUIRE(cudaMalloc(&y, static_cast<size_t>(batch) * 4) == cudaSuccess);
  REQUIRE(cudaMalloc(&counters, 8) == cudaSuccess);
  REQUIRE(cudaMalloc(&x, static_cast<size_t>(batch * out) * esize) == cudaSuccess);
  REQUIRE(cudaMemcpy(px, pixels.data(), pixels.size(), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(lab, labels.data(), static_cast<size_t>(n) * 4, cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(ord, order.data(), static_cast<size_t>(n) * 4, cudaMemcpyHostToDevice) == cudaSuccess);
  const uint32_t init[2] = {cursor, 3};  // cursor, epoch
  REQUIRE(cudaMemcpy(counters, init, 8, cudaMemcpyHostToDevice) == cudaSuccess);
  ResidentSplit rs{px, lab, ord, n, counters, counters + 1};
  REQUIRE(augment_batch_cuda(nullptr, gp, rs, 42, batch, x, type, y).ok());
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  Batch b;
  b.x.resize(static_cast<size_t>(batch * out));
  b.y.resize(static_cast<size_t>(batch));
  if (type == GpuDType::F32) {
    std::vector<float> f(static_cast<size_t>(batch * out));
    REQUIRE(cudaMemcpy(f.data(), x, f.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (size_t i = 0; i < f.size(); ++i) {
      if (round == GpuDType::F16) {
        const __half h = __float2half_rn(f[i]);
        std::memcpy(&b.x[i], &h, 2);
      } else {
        const __nv_bfloat16 h = __float2bfloat16_rn(f[i]);
        std::memcpy(&b.x[i], &h, 2);
      }
    }
  } else {
    REQUIRE(cudaMemcpy(b.x.data(), x, b.x.size() * 2, cudaMemcpyDeviceToHost) == cudaSuccess);
  }
  REQUIRE(cudaMemcpy(b.y.data(), y, b.y.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
  uint32_t after[2] = {};
  REQUIRE(cudaMemcpy(after, counters, 8, cudaMemcpyDeviceToHost) == cudaSuccess);
  b.cursor_after = after[0];
  cudaFree(px);
  cudaFree(lab);
  cudaFree(ord);
  cudaFree(y);
  cudaFree(counters);
  cudaFree(x);
  return b;
}

void check_packed(int64_t side, int64_t c, int64_t n, int64_t batch, uint32_t cursor) {
  std::vector<uint8_t> pixels(static_cast<size_t>(n * side * side * c));
  uint32_t h = 12345;
  for (auto& v : pixels) v = static_cast<uint8_t>((h = h * 1664525u + 1013904223u) >> 24);
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>((i * 31) % 1000);
  std::vector<TransformSpec> steps(1);
  steps[0].kind = TransformKind::Normalize;
  const std::vector<double> mean = c == 3 ? std::vector<double>{0.485, 0.456, 0.406} : std::vector<double>{0.2860};
  const std::vector<double> sd = c == 3 ? std::vector<double>{0.229, 0.224, 0.225} : std::vector<double>{0.3530};
  Result<TransformPipeline> tf = transforms_build(steps, mean, sd, static_cast<int>(side), static_cast<int>(side),
                                                  static_cast<int>(c), "test");
  INFO((tf.ok() ? std::string() : tf.error_text()));
  REQUIRE(tf.ok());
  Result<GpuPipeline> gp = gpu_pipeline_make(tf.value());
  REQUIRE(gp.ok());
  REQUIRE(normalize_only(gp.value()));
  for (GpuDType t : {GpuDType::F16, GpuDType::BF16}) {
    INFO("side " << side << " c " << c << " batch " << batch << " cursor " << cursor << " type "
                 << (t == GpuDType::F16 ? "f16" : "bf16"));
    const Batch packed = run_batch(gp.value(), pixels, labels, batch, cursor, t, t);
    const Batch general = run_batch(gp.value(), pixels, labels, batch, cursor, GpuDType::F32, t);
    CHECK(packed.y == general.y);
    CHECK(packed.cursor_after == cursor + batch);
    CHECK(general.cursor_after == cursor + batch);
    int64_t differ = 0;
    for (size_t i = 0; i < packed.x.size(); ++i) differ += packed.x[i] != general.x[i];
    CHECK(differ == 0);
  }
}

}  // namespace

TEST_CASE("GPU normalize-only batches (the packed path) are bitwise the general kernel's values",
          "[gpu][augment]") {
  check_packed(32, 3, 1300, 64, 1000);   // CIFAR-sized RGB; the cursor wraps past the 1,300-sample order
  check_packed(28, 1, 700, 37, 690);     // Fashion-MNIST-sized, an odd batch: 28,196 elements, not a block multiple
  check_packed(224, 3, 40, 16, 30);      // ImageNet-sized RGB (the VGG and ResNet recipes' synthetic data)
}
