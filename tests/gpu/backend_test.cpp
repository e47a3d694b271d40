// The CUDA backend against the CPU reference on the device: GPU augmentation equals the CPU transforms sample by
// sample, 20 fp32 training steps give the CPU's weights within tolerance, and one seed gives bitwise-equal GPU runs
// (fp32 and fp16 AMP).
#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdlib>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "dataio/dataset.h"
#include "dataio/transforms.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/ops/augment/augment_cuda.h"
#include "runtime/train/trainer.h"
#include "tests/support/weights_diff.h"

using namespace trctl;

namespace {

const std::string kConfig = std::string(TRCTL_SOURCE_DIR) + "/configs/mlp_fmnist.yaml";

// On the device the dataset travels in .device/data: TRCTL_FMNIST_ROOT names it (tools/device_run.sh sets it).
Spec load_spec(std::vector<std::string> overrides) {
  if (const char* root = std::getenv("TRCTL_FMNIST_ROOT")) overrides.push_back(std::string("data.root=") + root);
  Result<Spec> s = spec_load(kConfig, overrides);
  INFO((s.ok() ? std::string() : s.error_text()));
  REQUIRE(s.ok());
  return s.value();
}

TrainResult train(const std::vector<std::string>& overrides) {
  spdlog::logger log("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  TrainOptions opt;
  opt.write_run_dir = false;
  opt.gpu.device_count = cuda_device_count;
  opt.gpu.make = make_cuda_backend;
  Result<TrainResult> r = train_run(load_spec(overrides), opt, log);
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  return r.value();
}

using testing::rel_diff;

}  // namespace

namespace {

// augment_batch_cuda over a resident split (pixels (n, in_h, in_w, c) u8, labels (n)) against the CPU transforms,
// sample by sample and pixel by pixel, for a batch starting at cursor 1000 of a fixed permutation, epoch 3.
void check_augment(const TransformPipeline& tf, const std::vector<uint8_t>& pixels, const std::vector<int32_t>& labels,
                   int64_t batch) {
  Result<GpuPipeline> gp = gpu_pipeline_make(tf);
  REQUIRE(gp.ok());
  const int64_t n = static_cast<int64_t>(labels.size());
  const int64_t in_px = static_cast<int64_t>(tf.in_h) * tf.in_w * tf.c;
  const int64_t out = static_cast<int64_t>(tf.out_h) * tf.out_w * tf.c;
  std::vector<int32_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = static_cast<int32_t>((i * 7919) % n);
  uint8_t* px;
  int32_t *lab, *ord, *y;
  uint32_t* counters;
  float* x;
  REQUIRE(cudaMalloc(&px, pixels.size()) == cudaSuccess);
  REQUIRE(cudaMalloc(&lab, n * 4) == cudaSuccess);
  REQUIRE(cudaMalloc(&ord, n * 4) == cudaSuccess);
  REQUIRE(cudaMalloc(&y, batch * 4) == cudaSuccess);
  REQUIRE(cudaMalloc(&counters, 8) == cudaSuccess);
  REQUIRE(cudaMalloc(&x, batch * out * 4) == cudaSuccess);
  cudaMemcpy(px, pixels.data(), pixels.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(lab, labels.data(), n * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(ord, order.data(), n * 4, cudaMemcpyHostToDevice);
  const uint32_t init[2] = {1000, 3};  // cursor, epoch
  cudaMemcpy(counters, init, 8, cudaMemcpyHostToDevice);
  ResidentSplit rs{px, lab, ord, n, counters, counters + 1};
  REQUIRE(augment_batch_cuda(nullptr, gp.value(), rs, 42, batch, x, GpuDType::F32, y).ok());
  std::vector<float> gx(batch * out);
  std::vector<int32_t> gy(batch);
  uint32_t after[2];
  REQUIRE(cudaMemcpy(gx.data(), x, gx.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
  cudaMemcpy(gy.data(), y, batch * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(after, counters, 8, cudaMemcpyDeviceToHost);
  CHECK(after[0] == 1000 + batch);
  int64_t mismatched = 0, label_bad = 0;
  for (int64_t j = 0; j < batch; ++j) {
    const int32_t idx = order[(1000 + j) % n];
    label_bad += gy[j] != labels[idx];
    std::vector<float> ref(out);
    transforms_apply(tf, transforms_draw(tf, 42, 3, static_cast<uint32_t>(idx)),
                     &pixels[static_cast<size_t>(idx * in_px)], ref.data());
    for (int64_t k = 0; k < out; ++k) mismatched += std::abs(ref[k] - gx[j * out + k]) > 1e-6f;
  }
  INFO(mismatched << " of " << batch * out << " values differ");
  CHECK(label_bad == 0);
  CHECK(mismatched <= batch * out / 100000);  // ties of libm vs CUDA math at rounding boundaries only
  cudaFree(px); cudaFree(lab); cudaFree(ord); cudaFree(y); cudaFree(counters); cudaFree(x);
}

}  // namespace

TEST_CASE("GPU augmentation equals the CPU transforms for every sample and pixel", "[gpu][augment]") {
  Spec spec = load_spec({});
  Result<ImageDataset> d = dataset_load(spec.data, false);
  REQUIRE(d.ok());
  // The config's augmentation with a horizontal flip after the crop: every geometric kind the kernel mirrors.
  std::vector<TransformSpec> steps = spec.data.train_transforms;
  TransformSpec flip;
  flip.kind = TransformKind::RandomHorizontalFlip;
  steps.insert(steps.begin() + 2, flip);
  Result<TransformPipeline> tf = transforms_build(steps, spec.data.mean, spec.data.std, 28, 28, 1, "test");
  REQUIRE(tf.ok());
  check_augment(tf.value(), d->pixels, d->labels, 512);
}

TEST_CASE("GPU augmentation of large RGB images (several blocks per sample) equals the CPU transforms",
          "[gpu][augment]") {
  // 160x160x3 random pixels, pad 4 -> random crop 144 -> flip -> normalize: 20,736 output pixels, 10 slices.
  const int64_t n = 1300, side = 160;
  std::vector<uint8_t> pixels(static_cast<size_t>(n * side * side * 3));
  uint32_t h = 12345;
  for (auto& v : pixels) v = static_cast<uint8_t>((h = h * 1664525u + 1013904223u) >> 24);
  std::vector<int32_t> labels(n);
  for (int64_t i = 0; i < n; ++i) labels[i] = static_cast<int32_t>(i % 1000);
  std::vector<TransformSpec> steps(4);
  steps[0].kind = TransformKind::Pad, steps[0].padding = 4;
  steps[1].kind = TransformKind::RandomCrop, steps[1].size = 144;
  steps[2].kind = TransformKind::RandomHorizontalFlip;
  steps[3].kind = TransformKind::Normalize;
  Result<TransformPipeline> tf =
      transforms_build(steps, {0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}, side, side, 3, "test");
  INFO((tf.ok() ? std::string() : tf.error_text()));
  REQUIRE(tf.ok());
  REQUIRE(tf->out_h == 144);
  check_augment(tf.value(), pixels, labels, 64);
}

TEST_CASE("20 fp32 training steps on the GPU give the CPU backend's weights within tolerance", "[gpu][backend]") {
  const std::vector<std::string> o = {"data.train_subset=4000", "train.epochs=1", "train.precision=fp32",
                                      "scheduler.warmup_epochs=0"};
  std::vector<std::string> cpu = o, gpu = o;
  cpu.push_back("train.device=cpu");
  gpu.push_back("train.device=cuda");
  TrainResult a = train(cpu), b = train(gpu);
  CHECK(b.backend == "cuda");
  REQUIRE(a.final_weights.size() == b.final_weights.size());
  const double r = rel_diff(b.final_weights, a.final_weights);
  INFO("relative weight difference " << r << "; val top1 cpu " << a.epochs[0].val_top1 << " gpu "
                                     << b.epochs[0].val_top1);
  CHECK(r < 2e-3);
  CHECK(std::abs(a.epochs[0].val_top1 - b.epochs[0].val_top1) < 0.01);
  CHECK(std::abs(a.epochs[0].train_loss - b.epochs[0].train_loss) < 1e-3);
}

TEST_CASE("two GPU runs with one seed are bitwise equal, fp32 and fp16 AMP", "[gpu][backend][determinism][long]") {
  for (const char* prec : {"train.precision=fp32", "train.precision=fp16"}) {
    const std::vector<std::string> o = {"data.train_subset=6000", "train.epochs=2", prec, "train.device=cuda"};
    TrainResult a = train(o), b = train(o);
    INFO(prec);
    CHECK(a.final_weights == b.final_weights);
    CHECK(a.epochs.back().val_loss == b.epochs.back().val_loss);
  }
}

TEST_CASE("fp16 AMP on the GPU learns like fp32", "[gpu][backend][long]") {
  TrainResult a = train({"train.epochs=2", "train.precision=fp32", "train.device=cuda"});
  TrainResult b = train({"train.epochs=2", "train.precision=fp16", "train.device=cuda"});
  INFO("val top1 fp32 " << a.epochs.back().val_top1 << " fp16 " << b.epochs.back().val_top1);
  CHECK(std::abs(a.epochs.back().val_top1 - b.epochs.back().val_top1) < 0.01);
}
