// Training at one image size and validating at another on the CPU backend (issue 9; docs/data.md): a small CNN
// with a global average pool trained on 24x24 random crops of Fashion-MNIST and validated on the full 28x28
// images, in memory and streamed from a DTS file: bitwise repeatable, validation batches at the validation size
// (plan and run log), trctl eval's engine and resume giving the training run's numbers; a flatten -> linear
// model with two sizes refused naming the layer.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "dataio/dataset.h"
#include "dataio/pack_sources.h"
#include "runtime/train/trainer.h"
#include "tests/support/scratch_dir.h"

using namespace trctl;
using trctl::testing::ScratchDir;
namespace fs = std::filesystem;

namespace {

constexpr const char* kScratch = "trctl_val_size";  // ScratchDir prefix

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

const char* kModel = R"(
model:
  layers:
    - {type: conv2d, name: c1, out_channels: 16, kernel_size: 3, padding: 1, bias: false}
    - {type: batch_norm, name: bn1}
    - {type: relu, name: r1}
    - {type: max_pool, name: p1, kernel_size: 2}
    - {type: conv2d, name: c2, out_channels: 32, kernel_size: 3, padding: 1, bias: false}
    - {type: batch_norm, name: bn2}
    - {type: relu, name: r2}
    - {type: global_avg_pool, name: gap}
    - {type: linear, name: fc, out_features: 10}
optimizer: {type: sgd, lr: 0.1, momentum: 0.9, nesterov: true}
train: {epochs: 2, device: cpu, threads: 2}
run: {progress: off}
)";

// Fashion-MNIST in memory: 2000 training images cropped to 24x24 at random, all 10000 test images at 28x28.
std::string fmnist_yaml() {
  return std::string(
             "seed: 7\ndata:\n  dataset: fashion_mnist\n  root: /usr/share/datasets/fashion-mnist\n"
             "  batch_size: 32\n  val_batch_size: 1000\n  workers: 2\n  train_subset: 2000\n"
             "  normalization: {mean: [0.286], std: [0.353]}\n"
             "  train_transforms: [{random_crop: {size: 24}}, random_horizontal_flip, normalize]\n"
             "  val_transforms: [normalize]\n") +
         kModel;
}

Spec spec_of(const ScratchDir& s, const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  const fs::path cfg = s.path / "two_sizes.yaml";
  std::ofstream(cfg) << yaml;
  Result<Spec> spec = spec_load(cfg.string(), overrides);
  INFO((spec.ok() ? std::string() : spec.error_text()));
  REQUIRE(spec.ok());
  return spec.value();
}

TrainResult train(const Spec& spec, bool write_dir = false, std::ostream* log_to = nullptr) {
  std::shared_ptr<spdlog::sinks::sink> sink;
  if (log_to) sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(*log_to);
  else sink = std::make_shared<spdlog::sinks::null_sink_mt>();
  spdlog::logger log("test", sink);
  TrainOptions opt;
  opt.write_run_dir = write_dir;
  Result<TrainResult> r = train_run(spec, opt, log);
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  return r.value();
}

// The first n samples of a Fashion-MNIST split packed raw into dir/{train,val}.dts.
void pack_fmnist(const fs::path& dir, bool train, int64_t n) {
  const std::string root = "/usr/share/datasets/fashion-mnist/";
  Result<ImageDataset> ds = idx_load(root + (train ? "train-images-idx3-ubyte.gz" : "t10k-images-idx3-ubyte.gz"),
                                     root + (train ? "train-labels-idx1-ubyte.gz" : "t10k-labels-idx1-ubyte.gz"));
  REQUIRE(ds.ok());
  ds->n = n;
  ds->pixels.resize(size_t(n) * 28 * 28);
  ds->labels.resize(size_t(n));
  std::vector<std::string> classes;
  for (int k = 0; k < 10; ++k) classes.push_back(std::to_string(k));
  PackOptions o;
  o.block_size = 64 * 1024;
  auto src = pack_source_raw(std::make_shared<const ImageDataset>(std::move(ds.value())), "idx", classes);
  REQUIRE(dts_pack(src, o, (dir / (train ? "train.dts" : "val.dts")).string()).ok());
}

}  // namespace

TEST_CASE("a CNN trained at 24x24 validates at 28x28 on the CPU backend, bitwise repeatably", "[e2e][val_size]") {
  ScratchDir s(kScratch);
  const Spec spec = spec_of(s, fmnist_yaml(), {"run.out_dir=" + s.path.string(), "run.name=r"});
  std::ostringstream log;
  TrainResult a = train(spec, true, &log);
  Spec other = spec;
  other.data.workers = 3;  // other loader and compute thread counts: the same batches and sums
  other.train.threads = 1;
  TrainResult b = train(other);
  REQUIRE(a.epochs.size() == 2);
  CHECK(a.final_weights == b.final_weights);
  for (size_t e = 0; e < 2; ++e) {
    CHECK(a.epochs[e].train_loss == b.epochs[e].train_loss);
    CHECK(a.epochs[e].val_loss == b.epochs[e].val_loss);
    CHECK(a.epochs[e].val_top1 == b.epochs[e].val_top1);
  }
  INFO("val top1 " << a.epochs[1].val_top1 << ", loss " << a.epochs[1].val_loss);
  CHECK(a.epochs[1].val_top1 > 0.4);  // it learns, and validates on the whole 28x28 images
  CHECK(a.epochs[1].train_loss < a.epochs[0].train_loss);
  // The validation batches are at 28x28: the run log says so, and the plan holds the eval programs at that size.
  CHECK_THAT(log.str(), Catch::Contains("2000 train / 10000 val samples (train 24x24, val 28x28)"));
  const std::string plan = slurp(s.path / "r" / "plan.txt");
  CHECK_THAT(plan, Catch::Contains("sample (H, W, C) = (24, 24, 1), validation (28, 28, 1)") &&
                       Catch::Contains(":train/c1 (32, 24, 24, 16) f32 = conv2d") &&
                       Catch::Contains(":eval/c1 (1000, 28, 28, 16) f32 = conv2d") &&
                       Catch::Contains(":eval/c2 (1000, 14, 14, 32) f32 = conv2d"));
  const std::string resolved = slurp(s.path / "r" / "config.resolved.yaml");
  CHECK_THAT(resolved, Catch::Contains("random_crop") && Catch::Contains("val_transforms"));
}

TEST_CASE("trctl eval's engine and a resumed run validate at the validation size like the training run",
          "[e2e][val_size][eval][resume]") {
  ScratchDir s(kScratch);
  const Spec spec = spec_of(s, fmnist_yaml(), {"run.out_dir=" + s.path.string(), "run.name=r",
                                               "train.checkpoint_every=1"});
  TrainResult full = train(spec, true);
  spdlog::logger log("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  Result<EvalResult> e = eval_run(spec, TrainOptions{}, full.run_dir, log);
  INFO((e.ok() ? std::string() : e.error_text()));
  REQUIRE(e.ok());
  CHECK(e->images == 10000);
  CHECK(e->loss == full.epochs[1].val_loss);
  CHECK(e->top1 == full.epochs[1].val_top1);
  TrainOptions opt;
  opt.write_run_dir = false;
  opt.resume = full.run_dir + "/checkpoints/epoch-0001";
  Result<TrainResult> resumed = train_run(spec, opt, log);
  INFO((resumed.ok() ? std::string() : resumed.error_text()));
  REQUIRE(resumed.ok());
  REQUIRE(resumed->epochs.size() == 1);
  CHECK(resumed->final_weights == full.final_weights);
  CHECK(resumed->epochs[0].val_loss == full.epochs[1].val_loss);
}

TEST_CASE("a streamed dataset trains at one size and validates at another, bitwise repeatably", "[e2e][val_size]") {
  ScratchDir s(kScratch);
  pack_fmnist(s.path, true, 2000);
  pack_fmnist(s.path, false, 330);  // a partial last validation batch too
  const std::string yaml =
      "seed: 3\ndata:\n  dataset: dts\n  root: " + s.path.string() +
      "\n  train_path: train.dts\n  val_path: val.dts\n  batch_size: 32\n  val_batch_size: 100\n  workers: 2\n"
      "  normalization: {mean: [0.286], std: [0.353]}\n"
      "  train_transforms: [{random_resized_crop: {size: 20, scale: [0.5, 1.0]}}, random_horizontal_flip, "
      "normalize]\n"
      "  val_transforms: [{center_crop: {size: 26}}, normalize]\n" +
      std::string(kModel);
  const Spec spec = spec_of(s, yaml);
  Result<DataShape> shape = data_shape(spec);
  REQUIRE(shape.ok());
  CHECK(shape->h == 20);
  CHECK(shape->val_h == 26);
  CHECK(shape->val_w == 26);
  TrainResult a = train(spec);
  Spec other = spec;
  other.data.workers = 1;  // other decoder and reader thread counts: the same batches
  other.data.io_threads = 3;
  TrainResult b = train(other);
  REQUIRE(a.epochs.size() == 2);
  CHECK(a.final_weights == b.final_weights);
  CHECK(a.epochs[1].val_loss == b.epochs[1].val_loss);
  INFO("val top1 " << a.epochs[1].val_top1);
  CHECK(a.epochs[1].val_top1 > 0.3);
  Spec cached = spec;
  cached.data.cache_val = true;  // cached validation batches are at the validation size too
  TrainResult c = train(cached);
  CHECK(c.final_weights == a.final_weights);
  CHECK(c.epochs[1].val_loss == a.epochs[1].val_loss);
}

TEST_CASE("a flatten -> linear model with two image sizes is refused naming the layer", "[e2e][val_size]") {
  ScratchDir s(kScratch);
  std::string yaml = fmnist_yaml();
  const std::string from = "    - {type: global_avg_pool, name: gap}\n";
  yaml.replace(yaml.find(from), from.size(), "    - {type: flatten, name: flat}\n");
  spdlog::logger log("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  TrainOptions opt;
  opt.write_run_dir = false;
  Result<TrainResult> r = train_run(spec_of(s, yaml), opt, log);
  REQUIRE_FALSE(r.ok());
  CHECK(r.errors()[0].code == ErrCode::Invalid);
  CHECK_THAT(r.error_text(), Catch::Contains("two_sizes.yaml:") && Catch::Contains("linear layer 'fc'") &&
                                 Catch::Contains("24x24") && Catch::Contains("28x28") &&
                                 Catch::Contains("global_avg_pool"));
}
