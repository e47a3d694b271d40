// Training from streamed datasets on the CPU backend: a DTS file of Fashion-MNIST (raw) and a JPEG image folder,
// bitwise repeatable, learning, in both DTS modes (streamed, in RAM); and their configuration errors.
#include <catch2/catch.hpp>

#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "dataio/dataset.h"
#include "dataio/jpeg.h"
#include "dataio/pack_sources.h"
#include "runtime/train/trainer.h"

using namespace trctl;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("trctl_dts_train_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// The first n samples of a Fashion-MNIST split packed raw into dir/NAME.dts.
std::string pack_fmnist(const fs::path& dir, bool train, int64_t n) {
  const std::string root = "/usr/share/datasets/fashion-mnist/";
  Result<ImageDataset> ds = idx_load(root + (train ? "train-images-idx3-ubyte.gz" : "t10k-images-idx3-ubyte.gz"),
                                     root + (train ? "train-labels-idx1-ubyte.gz" : "t10k-labels-idx1-ubyte.gz"));
  REQUIRE(ds.ok());
  ds->n = n;
  ds->pixels.resize(size_t(n) * 28 * 28);
  ds->labels.resize(size_t(n));
  std::vector<std::string> classes;
  for (int k = 0; k < 10; ++k) classes.push_back(std::to_string(k));
  const std::string out = (dir / (train ? "train.dts" : "val.dts")).string();
  PackOptions o;
  o.block_size = 64 * 1024;  // several blocks, so that streaming shuffles blocks
  REQUIRE(dts_pack(pack_source_raw(std::make_shared<const ImageDataset>(std::move(ds.value())), "idx", classes), o, out).ok());
  return out;
}

const char* kMlpModel = R"(
model:
  layers:
    - {type: flatten}
    - {type: linear, out_features: 64}
    - {type: relu}
    - {type: linear, out_features: 10}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
train: {epochs: 2, device: cpu, threads: 2}
)";

TrainResult train_yaml(const fs::path& dir, const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  const std::string cfg = (dir / "cfg.yaml").string();
  std::ofstream(cfg) << yaml;
  Result<Spec> spec = spec_load(cfg, overrides);
  INFO((spec.ok() ? std::string() : spec.error_text()));
  REQUIRE(spec.ok());
  spdlog::logger log("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  TrainOptions opt;
  opt.write_run_dir = false;
  Result<TrainResult> r = train_run(spec.value(), opt, log);
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  return r.value();
}

std::string fmnist_dts_yaml(const fs::path& dir) {
  return "seed: 3\ndata:\n  dataset: dts\n  root: " + dir.string() +
         "\n  train_path: train.dts\n  val_path: val.dts\n  batch_size: 50\n  workers: 3\n"
         "  normalization: {mean: [0.286], std: [0.353]}\n"
         "  train_transforms: [{center_crop: {size: 28}}, {random_horizontal_flip: {p: 0.5}}, normalize]\n"
         "  val_transforms: [{center_crop: {size: 28}}, normalize]\n" +
         kMlpModel;
}

}  // namespace

TEST_CASE("an MLP trains from a Fashion-MNIST DTS file, bitwise repeatably, streamed or in RAM", "[e2e][dts]") {
  const fs::path dir = temp_dir("fm");
  pack_fmnist(dir, true, 1500);
  pack_fmnist(dir, false, 500);
  const std::string yaml = fmnist_dts_yaml(dir);
  TrainResult a = train_yaml(dir, yaml);
  TrainResult b = train_yaml(dir, yaml, {"data.workers=1", "data.io_threads=3"});
  REQUIRE(a.epochs.size() == 2);
  CHECK(a.final_weights == b.final_weights);
  CHECK(a.epochs[1].train_loss < a.epochs[0].train_loss);
  CHECK(a.epochs[1].val_top1 > 0.6);
  TrainResult ram = train_yaml(dir, yaml, {"data.in_memory=true"});
  CHECK(ram.epochs[1].val_top1 > 0.6);
  CHECK(ram.final_weights == train_yaml(dir, yaml, {"data.in_memory=true", "data.workers=2"}).final_weights);
  fs::remove_all(dir);
}

TEST_CASE("data.cache_val validates from cached batches exactly as from fresh ones", "[e2e][dts]") {
  const fs::path dir = temp_dir("cache");
  pack_fmnist(dir, true, 600);
  pack_fmnist(dir, false, 230);  // a partial last validation batch too
  const std::string yaml = fmnist_dts_yaml(dir);
  TrainResult fresh = train_yaml(dir, yaml, {"train.epochs=3"});
  TrainResult cached = train_yaml(dir, yaml, {"train.epochs=3", "data.cache_val=true"});
  REQUIRE(cached.epochs.size() == 3);
  for (size_t e = 0; e < 3; ++e) {
    CHECK(cached.epochs[e].val_loss == fresh.epochs[e].val_loss);
    CHECK(cached.epochs[e].val_top1 == fresh.epochs[e].val_top1);
  }
  CHECK(cached.final_weights == fresh.final_weights);
  const std::string cfg = (dir / "cfg.yaml").string();
  spdlog::logger log("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  TrainOptions opt;
  opt.write_run_dir = false;
  Result<TrainResult> r = train_run(
      spec_load(cfg, {"data.cache_val=true", "data.val_transforms=[random_horizontal_flip, normalize]",
                      "data.val_transforms=[{center_crop: {size: 28}}, random_horizontal_flip, normalize]"})
          .value(),
      opt, log);
  CHECK_THAT(r.error_text(), Catch::Contains("data.cache_val: the val_transforms draw random parameters"));
  fs::remove_all(dir);
}

TEST_CASE("a small CNN trains from a JPEG image folder with RandomResizedCrop and flips, repeatably", "[e2e][dts]") {
  const fs::path dir = temp_dir("jpg");
  JpegCodec codec;
  for (const std::string split : {"train", "val"})
    for (int cls = 0; cls < 2; ++cls) {
      fs::create_directories(dir / split / ("c" + std::to_string(cls)));
      for (int i = 0; i < 12; ++i) {
        const int w = 40 + 3 * i, h = 36 + 2 * (i % 4);
        std::vector<uint8_t> px(size_t(w) * h * 3);
        for (int y = 0; y < h; ++y)
          for (int x = 0; x < w; ++x)
            for (int c = 0; c < 3; ++c)  // class 0 reddish, class 1 bluish, with texture
              px[(size_t(y) * w + x) * 3 + c] = static_cast<uint8_t>(
                  (c == 2 * cls ? 180 : 60) + 40 * std::sin(0.3 * x + 0.2 * y + i));
        auto jpg = codec.encode(px.data(), w, h, 3, 90, "test");
        REQUIRE(jpg.ok());
        std::ofstream((dir / split / ("c" + std::to_string(cls)) / (std::to_string(i) + ".jpg")).string(),
                      std::ios::binary)
            .write(reinterpret_cast<const char*>(jpg->data()), static_cast<std::streamsize>(jpg->size()));
      }
    }
  const std::string yaml = "seed: 1\ndata:\n  dataset: image_folder\n  root: " + dir.string() +
                           "\n  train_path: train\n  val_path: val\n  batch_size: 8\n  workers: 2\n"
                           "  normalization: {mean: [0.5, 0.5, 0.5], std: [0.25, 0.25, 0.25]}\n"
                           "  train_transforms: [{random_resized_crop: {size: 16}}, random_horizontal_flip, normalize]\n"
                           "  val_transforms: [{resize: {size: 18}}, {center_crop: {size: 16}}, normalize]\n"
                           "model:\n  layers:\n    - {type: conv2d, out_channels: 4, kernel_size: 3, padding: 1}\n"
                           "    - {type: relu}\n    - {type: global_avg_pool}\n    - {type: linear, out_features: 2}\n"
                           "optimizer: {type: sgd, lr: 0.1, momentum: 0.9}\ntrain: {epochs: 3, device: cpu}\n";
  TrainResult a = train_yaml(dir, yaml);
  TrainResult b = train_yaml(dir, yaml, {"data.workers=3"});
  CHECK(a.final_weights == b.final_weights);
  CHECK(a.epochs.back().val_top1 > 0.7);  // colour separates the classes
  fs::remove_all(dir);
}

TEST_CASE("streamed datasets: a missing level, a missing path and fixed-size-only transforms are clear errors",
          "[e2e][dts]") {
  const fs::path dir = temp_dir("bad");
  pack_fmnist(dir, true, 100);
  pack_fmnist(dir, false, 100);
  const std::string cfg = (dir / "cfg.yaml").string();
  spdlog::logger log("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  TrainOptions opt;
  opt.write_run_dir = false;
  std::ofstream(cfg) << fmnist_dts_yaml(dir);
  Result<TrainResult> r = train_run(spec_load(cfg, {"data.dts_level=160"}).value(), opt, log);
  CHECK_THAT(r.error_text(), Catch::Contains("train.dts") && Catch::Contains("no level with short side 160"));
  CHECK_THAT(spec_load(cfg, {"data.val_path="}).error_text(), Catch::Contains("needs train_path and val_path"));
  r = train_run(spec_load(cfg, {"data.train_transforms=[{pad: {padding: 2}}, normalize]"}).value(), opt, log);
  CHECK(r.error_text().find("not supported") != std::string::npos);
  fs::remove_all(dir);
}
