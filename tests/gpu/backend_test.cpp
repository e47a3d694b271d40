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
  Result<GpuPipeline> gp = gpu_pipeline_make(tf.value());
  REQUIRE(gp.ok());
  const int64_t batch = 512, n = d->n;
  std::vector<int32_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = static_cast<int32_t>((i * 7919) % n);
  uint8_t* px;
  int32_t *lab, *ord, *y;
  uint32_t* counters;
  float* x;
  REQUIRE(cudaMalloc(&px, d->pixels.size()) == cudaSuccess);
  REQUIRE(cudaMalloc(&lab, n * 4) == cudaSuccess);
  REQUIRE(cudaMalloc(&ord, n * 4) == cudaSuccess);
  REQUIRE(cudaMalloc(&y, batch * 4) == cudaSuccess);
  REQUIRE(cudaMalloc(&counters, 8) == cudaSuccess);
  REQUIRE(cudaMalloc(&x, batch * 784 * 4) == cudaSuccess);
  cudaMemcpy(px, d->pixels.data(), d->pixels.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(lab, d->labels.data(), n * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(ord, order.data(), n * 4, cudaMemcpyHostToDevice);
  const uint32_t init[2] = {1000, 3};  // cursor, epoch
  cudaMemcpy(counters, init, 8, cudaMemcpyHostToDevice);
  ResidentSplit rs{px, lab, ord, n, counters, counters + 1};
  REQUIRE(augment_batch_cuda(nullptr, gp.value(), rs, 42, batch, x, GpuDType::F32, y).ok());
  std::vector<float> gx(batch * 784);
  std::vector<int32_t> gy(batch);
  uint32_t after[2];
  REQUIRE(cudaMemcpy(gx.data(), x, gx.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
  cudaMemcpy(gy.data(), y, batch * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(after, counters, 8, cudaMemcpyDeviceToHost);
  CHECK(after[0] == 1000 + batch);
  int64_t mismatched = 0, label_bad = 0;
  for (int64_t j = 0; j < batch; ++j) {
    const int32_t idx = order[1000 + j];
    label_bad += gy[j] != d->labels[idx];
    std::vector<float> ref(784);
    transforms_apply(tf.value(), transforms_draw(tf.value(), 42, 3, static_cast<uint32_t>(idx)),
                     &d->pixels[static_cast<size_t>(idx) * 784], ref.data());
    for (int k = 0; k < 784; ++k) mismatched += std::abs(ref[k] - gx[j * 784 + k]) > 1e-6f;
  }
  INFO(mismatched << " of " << batch * 784 << " pixels differ");
  CHECK(label_bad == 0);
  CHECK(mismatched <= batch * 784 / 100000);  // ties of libm vs CUDA math at rounding boundaries only
  cudaFree(px); cudaFree(lab); cudaFree(ord); cudaFree(y); cudaFree(counters); cudaFree(x);
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
