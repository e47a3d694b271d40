// Host-fed steps on the CUDA backend (datasets streamed from DTS files or image folders): batches decoded on the
// host into pinned buffers and copied into input slot A or B while the previous step runs. Against the CPU
// backend in fp32 (same batches, so weights agree to rounding); bitwise repeatable in fp16 and bf16 AMP; learning.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "dataio/dts_writer.h"
#include "dataio/jpeg.h"
#include "dataio/pack_sources.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/train/trainer.h"
#include "tests/support/weights_diff.h"
#include "tests/gpu/gpu_train_util.h"

using namespace trctl;
namespace fs = std::filesystem;

namespace {

// dir/{train,val}/cK/N.jpg: 3 classes told apart by colour, 40 (train) / 16 (val) images each, sizes 40..70.
fs::path make_jpeg_folder() {
  const fs::path dir = fs::temp_directory_path() / ("trctl_fed_" + std::to_string(::getpid()));
  if (fs::exists(dir / "val.dts")) return dir;
  JpegCodec codec;
  for (const std::string split : {"train", "val"})
    for (int cls = 0; cls < 3; ++cls) {
      fs::create_directories(dir / split / ("c" + std::to_string(cls)));
      for (int i = 0; i < (split == "train" ? 40 : 16); ++i) {
        const int w = 40 + (7 * i) % 31, h = 40 + (5 * i) % 23;
        std::vector<uint8_t> px(size_t(w) * h * 3);
        for (int y = 0; y < h; ++y)
          for (int x = 0; x < w; ++x)
            for (int c = 0; c < 3; ++c)
              px[(size_t(y) * w + x) * 3 + c] =
                  static_cast<uint8_t>((c == cls ? 170 : 70) + 50 * std::sin(0.2 * x * (c + 1) + 0.3 * y + i));
        auto jpg = codec.encode(px.data(), w, h, 3, 90, "test");
        REQUIRE(jpg.ok());
        std::ofstream((dir / split / ("c" + std::to_string(cls)) / (std::to_string(i) + ".jpg")).string(),
                      std::ios::binary)
            .write(reinterpret_cast<const char*>(jpg->data()), static_cast<std::streamsize>(jpg->size()));
      }
    }
  PackOptions o;
  o.block_size = 32 * 1024;
  o.reduced = {PackLevelSpec{24, 90}};
  for (const std::string split : {"train", "val"})
    REQUIRE(dts_pack(pack_source_folder((dir / split).string()).value(), o, (dir / (split + ".dts")).string()).ok());
  return dir;
}

Spec fed_spec(const fs::path& dir, std::vector<std::string> overrides) {
  const std::string yaml = "seed: 5\ndata:\n  dataset: dts\n  root: " + dir.string() +
                           "\n  train_path: train.dts\n  val_path: val.dts\n  dts_level: 24\n  batch_size: 16\n"
                           "  val_batch_size: 20\n  workers: 3\n"
                           "  normalization: {mean: [0.5, 0.5, 0.5], std: [0.25, 0.25, 0.25]}\n"
                           "  train_transforms: [{random_resized_crop: {size: 16}}, random_horizontal_flip, normalize]\n"
                           "  val_transforms: [{resize: {size: 18}}, {center_crop: {size: 16}}, normalize]\n"
                           "model:\n  layers:\n"
                           "    - {type: conv2d, name: c1, out_channels: 16, kernel_size: 3, padding: 1, bias: false}\n"
                           "    - {type: batch_norm, name: bn1}\n    - {type: relu, name: r1}\n"
                           "    - {type: max_pool, name: p1, kernel_size: 2}\n"
                           "    - {type: conv2d, name: c2, out_channels: 16, kernel_size: 3, padding: 1, bias: false}\n"
                           "    - {type: batch_norm, name: bn2}\n    - {type: add, name: a2, inputs: [bn2, p1]}\n"
                           "    - {type: relu, name: r2}\n    - {type: global_avg_pool, name: gap}\n"
                           "    - {type: linear, name: fc, out_features: 3}\n"
                           "optimizer: {type: sgd, lr: 0.05, momentum: 0.9}\n"
                           "train: {epochs: 2, precision: fp32}\nrun: {progress: off}\n";
  Result<Spec> s = spec_parse(yaml, "fed.yaml", overrides);
  INFO((s.ok() ? std::string() : s.error_text()));
  REQUIRE(s.ok());
  return s.value();
}

TrainResult train(const Spec& spec) { return gputest::train_cuda(spec); }

using testing::rel_diff;

}  // namespace

TEST_CASE("host-fed GPU steps from a DTS file give the CPU backend's weights (fp32)", "[gpu][backend][fed]") {
  const fs::path dir = make_jpeg_folder();
  TrainResult cpu = train(fed_spec(dir, {"train.device=cpu"}));
  TrainResult gpu = train(fed_spec(dir, {"train.device=cuda"}));
  CHECK(gpu.backend == "cuda");
  REQUIRE(cpu.final_weights.size() == gpu.final_weights.size());
  const double r = rel_diff(gpu.final_weights, cpu.final_weights);
  INFO("relative weight difference " << r << "; val loss cpu " << cpu.epochs.back().val_loss << " gpu "
                                     << gpu.epochs.back().val_loss);
  CHECK(r < 2e-3);
  CHECK(std::abs(cpu.epochs.back().val_loss - gpu.epochs.back().val_loss) < 5e-3);
  CHECK(std::abs(cpu.epochs.back().val_top1 - gpu.epochs.back().val_top1) < 0.05);
}

TEST_CASE("host-fed GPU runs are bitwise repeatable in fp16 and bf16 AMP and learn", "[gpu][backend][fed]") {
  const fs::path dir = make_jpeg_folder();
  for (const char* prec : {"fp16", "bf16"}) {
    INFO(prec);
    const std::vector<std::string> o = {"train.device=cuda", std::string("train.precision=") + prec, "train.epochs=4"};
    TrainResult a = train(fed_spec(dir, o));
    std::vector<std::string> o2 = o;
    o2.push_back("data.workers=1");  // other thread counts, same batches
    o2.push_back("data.io_threads=3");
    TrainResult b = train(fed_spec(dir, o2));
    CHECK(a.final_weights == b.final_weights);
    CHECK(a.epochs.back().val_top1 > 0.6);  // colour separates the three classes
  }
}

TEST_CASE("a raw image folder feeds the GPU host-side, bitwise repeatably", "[gpu][backend][fed]") {
  const fs::path dir = make_jpeg_folder();
  const std::vector<std::string> o = {"train.device=cuda", "train.precision=fp16", "data.dataset=image_folder",
                                      "data.train_path=train", "data.val_path=val"};
  TrainResult a = train(fed_spec(dir, o));
  std::vector<std::string> o2 = o;
  o2.push_back("data.workers=2");
  CHECK(a.final_weights == train(fed_spec(dir, o2)).final_weights);
}
