// One fp32 training step of the benchmark MLP on the CUDA backend, dumped for a side-by-side check against
// PyTorch (benchmarks/torch_check_mlp.py): initial weights, the batch, the loss, every gradient and the weights
// after AdamW. The dump goes to $TRCTL_DUMP_DIR when it is set (tools/device_run.sh sets it); the test itself checks
// that the step ran and wrote finite values.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "core/compiler.h"
#include "dataio/dataset.h"
#include "dataio/loader.h"
#include "dataio/transforms.h"
#include "runtime/cuda/cuda_backend.h"

using namespace trctl;

namespace {

std::vector<float> as_floats(const std::vector<std::byte>& b) {
  std::vector<float> f(b.size() / 4);
  std::memcpy(f.data(), b.data(), f.size() * 4);
  return f;
}

void write_bin(const std::string& path, const float* p, size_t n) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(p), static_cast<std::streamsize>(n * 4));
}

}  // namespace

TEST_CASE("one fp32 MLP step on the GPU, dumped for the PyTorch comparison", "[gpu][torch]") {
  std::vector<std::string> o = {"data.train_subset=200", "train.precision=fp32", "data.train_transforms=[normalize]",
                                "data.val_batch_size=200"};
  if (const char* root = std::getenv("TRCTL_FMNIST_ROOT")) o.push_back(std::string("data.root=") + root);
  Result<Spec> spec = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/mlp_fmnist.yaml", o);
  REQUIRE(spec.ok());
  Result<ImageDataset> tr = dataset_load(spec->data, true), va = dataset_load(spec->data, false);
  REQUIRE(tr.ok());
  REQUIRE(va.ok());
  Result<TransformPipeline> tf = transforms_build(spec->data.train_transforms, spec->data.mean, spec->data.std, 28,
                                                  28, 1, "test");
  REQUIRE(tf.ok());
  Result<Compiled> c = compile_spec(spec.value(), DataShape{28, 28, 1, 10, tr->n, va->n});
  REQUIRE(c.ok());
  Result<std::unique_ptr<Backend>> be = make_cuda_backend(c.value(), spec->seed);
  INFO((be.ok() ? std::string() : be.error_text()));
  REQUIRE(be.ok());
  Backend& b = *be.value();
  const std::vector<std::byte> w0 = params_init(c.value(), spec->seed);
  REQUIRE(b.write_region(Region::Weights, w0).ok());
  REQUIRE(b.upload_split(DataSplit::Train, tr.value(), tf.value()).ok());
  REQUIRE(b.upload_split(DataSplit::Val, va.value(), tf.value()).ok());
  const std::vector<int64_t> order = loader_epoch_order(tr->n, true, spec->seed, 1);
  REQUIRE(b.begin_epoch(DataSplit::Train, 1, order).ok());
  b.set_lr(1e-3);
  REQUIRE(b.run_resident(0, DataSplit::Train).ok());
  const double loss = b.last_loss(0);
  const std::vector<float> grads = as_floats(b.read_region(Region::Grads));
  const std::vector<float> w1 = as_floats(b.read_region(Region::Weights));
  CHECK(std::isfinite(loss));
  for (float g : grads) REQUIRE(std::isfinite(g));

  const char* dir = std::getenv("TRCTL_DUMP_DIR");
  if (!dir) return;
  const std::string d(dir);
  std::vector<float> x(200 * 784);
  std::vector<int32_t> y(200);
  for (int j = 0; j < 200; ++j) {
    const int64_t idx = order[j];
    transforms_apply(tf.value(), transforms_draw(tf.value(), spec->seed, 1, static_cast<uint32_t>(idx)),
                     &tr->pixels[static_cast<size_t>(idx) * 784], &x[static_cast<size_t>(j) * 784]);
    y[j] = tr->labels[idx];
  }
  const std::vector<float> w0f = as_floats(w0);
  write_bin(d + "/x.bin", x.data(), x.size());
  std::ofstream(d + "/y.bin", std::ios::binary).write(reinterpret_cast<const char*>(y.data()), 200 * 4);
  write_bin(d + "/w0.bin", w0f.data(), w0f.size());
  write_bin(d + "/w1.bin", w1.data(), w1.size());
  write_bin(d + "/grads.bin", grads.data(), grads.size());
  std::ofstream m(d + "/manifest.json");
  m << "{\"loss\": " << loss << ", \"lr\": 1e-3, \"label_smoothing\": " << spec->loss.label_smoothing
    << ", \"weight_decay\": " << spec->optimizer.weight_decay << ", \"params\": [";
  for (size_t i = 0; i < c->graph.params.size(); ++i) {
    const ParamInfo& p = c->graph.params[i];
    m << (i ? ", " : "") << "{\"name\": \"" << p.name << "\", \"offset\": " << c->plan.values[p.value].offset / 4
      << ", \"shape\": [";
    const auto& dims = c->graph.values[p.value].shape.dims;
    for (size_t k = 0; k < dims.size(); ++k) m << (k ? ", " : "") << dims[k];
    m << "], \"decay\": " << (p.decay ? "true" : "false") << "}";
  }
  m << "]}\n";
}
