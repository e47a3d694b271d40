// trctl export: a run's latest checkpoint as one safetensors file with PyTorch's names, layouts and dtypes, the
// EMA weights on request, written atomically; bad input exits 2, an unwritable output 1.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "core/ckpt/checkpoint.h"
#include "core/ckpt/safetensors.h"
#include "dataio/image_ops.h"
#include "runtime/train/export.h"
#include "runtime/train/trainer.h"

using namespace trctl;
namespace fs = std::filesystem;

namespace {

struct Scratch {
  fs::path path = fs::temp_directory_path() / ("trctl_export_" + std::to_string(::getpid()));
  Scratch() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

struct Cli {
  int code = -1;
  std::string out, err;
};

Cli run_cli(const std::string& args, const fs::path& scratch) {
  const std::string o = (scratch / "cli.out").string(), e = (scratch / "cli.err").string();
  const int st = std::system((std::string(TRCTL_BINARY) + " " + args + " >" + o + " 2>" + e).c_str());
  auto slurp = [](const std::string& p) {
    std::ifstream f(p);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  };
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, slurp(o), slurp(e)};
}

// A one-epoch CPU run with a checkpoint; returns its run directory.
std::string train(const std::string& config, const fs::path& out, const std::string& name,
                  std::vector<std::string> overrides) {
  overrides.insert(overrides.end(), {"train.device=cpu", "train.epochs=1", "train.checkpoint_every=1",
                                     "run.progress=off", "run.out_dir=" + out.string(), "run.name=" + name});
  Result<Spec> spec = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/" + config, overrides);
  REQUIRE(spec.ok());
  spdlog::logger log("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  Result<TrainResult> r = train_run(spec.value(), TrainOptions{}, log);
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  return r->run_dir;
}

SafetensorsFile read(const fs::path& p) {
  Result<SafetensorsFile> f = safetensors_read(p.string());
  INFO((f.ok() ? std::string() : f.error_text()));
  REQUIRE(f.ok());
  return f.value();
}

std::vector<float> floats(const TensorView& t) {
  std::vector<float> v(t.data.size() / 4);
  std::memcpy(v.data(), t.data.data(), t.data.size());
  return v;
}

}  // namespace

TEST_CASE("export writes the MLP's weights under their state_dict names, bitwise in f32", "[e2e][export]") {
  Scratch s;
  const std::string run = train("mlp_fmnist.yaml", s.path, "mlp", {"data.train_subset=400"});
  const fs::path out = s.path / "mlp.safetensors";
  Cli c = run_cli("export " + run + " --format safetensors -o " + out.string(), s.path);
  INFO(c.err);
  REQUIRE(c.code == 0);
  CHECK_THAT(c.out, Catch::Contains("exported 8 tensors"));
  const SafetensorsFile ckpt = read(fs::path(run) / "checkpoints" / "epoch-0001" / "weights.safetensors");
  const SafetensorsFile f = read(out);
  REQUIRE(f.tensors.size() == ckpt.tensors.size());
  for (const TensorView& t : ckpt.tensors) {
    const TensorView* e = f.find(t.name);
    REQUIRE(e);
    CHECK(e->dtype == DType::F32);
    CHECK(e->shape == t.shape);  // linear weights are (out, in) as nn.Linear's; a 1-channel flatten needs no reorder
    CHECK(e->data == t.data);
  }
  CHECK(f.find("fc1.weight")->shape == std::vector<int64_t>{1024, 784});
  CHECK(f.metadata.at("format") == "pt");
  CHECK(f.metadata.at("weights") == "model");
  CHECK(f.metadata.at("step") == "2");
  for (const auto& e : fs::directory_iterator(s.path)) CHECK(e.path().string().find(".tmp.") == std::string::npos);
}

TEST_CASE("export --dtype f16 and bf16 round each weight to nearest even", "[e2e][export]") {
  Scratch s;
  const std::string run = train("mlp_fmnist.yaml", s.path, "mlp", {"data.train_subset=200"});
  const SafetensorsFile ckpt = read(fs::path(run) / "checkpoints" / "epoch-0001" / "weights.safetensors");
  for (const char* dt : {"f16", "bf16"}) {
    INFO(dt);
    ExportOptions o;
    o.source = run;
    o.output = (s.path / (std::string(dt) + ".safetensors")).string();
    o.dtype = std::string(dt) == "f16" ? DType::F16 : DType::BF16;
    Result<ExportReport> r = export_checkpoint(o);
    INFO((r.ok() ? std::string() : r.error_text()));
    REQUIRE(r.ok());
    const SafetensorsFile f = read(o.output);
    const TensorView* w = f.find("fc2.weight");
    REQUIRE(w);
    CHECK(w->dtype == o.dtype);
    const std::vector<float> src = floats(*ckpt.find("fc2.weight"));
    REQUIRE(w->data.size() == src.size() * 2);
    size_t bad = 0;
    for (size_t i = 0; i < src.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, w->data.data() + 2 * i, 2);
      bad += h != (o.dtype == DType::F16 ? float_to_half_bits(src[i]) : float_to_bf16_bits(src[i]));
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("export of a CNN gives PyTorch's conv layout, (C, H, W) features after the flatten and BN buffers",
          "[e2e][export]") {
  Scratch s;
  const std::string run = train("cnn_fmnist.yaml", s.path, "cnn", {"data.train_subset=64", "data.val_batch_size=1000"});
  const SafetensorsFile ckpt = read(fs::path(run) / "checkpoints" / "epoch-0001" / "weights.safetensors");
  ExportOptions o;
  o.source = run;
  o.output = (s.path / "cnn.safetensors").string();
  Result<ExportReport> r = export_checkpoint(o);
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  const SafetensorsFile f = read(o.output);
  // conv2: trctl (K, R, S, C) = (32, 3, 3, 32) -> PyTorch (K, C, R, S).
  const TensorView* conv = f.find("conv2.weight");
  REQUIRE(conv);
  REQUIRE(conv->shape == std::vector<int64_t>{32, 32, 3, 3});
  const std::vector<float> cw = floats(*ckpt.find("conv2.weight")), ew = floats(*conv);
  for (int k : {0, 5, 31})
    for (int c : {0, 7, 31})
      for (int rs : {0, 4, 8}) CHECK(ew[((k * 32 + c) * 9) + rs] == cw[(k * 9 + rs) * 32 + c]);
  // fc1 after flatten of (7, 7, 64): column s * 64 + c of trctl is column c * 49 + s of PyTorch.
  const TensorView* fc = f.find("fc1.weight");
  REQUIRE(fc);
  REQUIRE(fc->shape == std::vector<int64_t>{256, 3136});
  const std::vector<float> tf = floats(*ckpt.find("fc1.weight")), ef = floats(*fc);
  for (int row : {0, 255})
    for (int sp : {0, 17, 48})
      for (int c : {0, 63}) CHECK(ef[row * 3136 + c * 49 + sp] == tf[row * 3136 + sp * 64 + c]);
  CHECK(f.find("fc2.weight")->data == ckpt.find("fc2.weight")->data);  // after fc1: plain features
  CHECK(f.find("bn3.running_var")->data == ckpt.find("bn3.running_var")->data);
  CHECK(f.find("bn3.running_mean")->shape == std::vector<int64_t>{64});
  CHECK(r->relaid == std::vector<std::string>{"conv1.weight", "conv2.weight", "conv3.weight", "conv4.weight", "fc1.weight"});
}

TEST_CASE("export --ema writes the moving average, and refuses a run without one", "[e2e][export]") {
  Scratch s;
  const std::string plain = train("mlp_fmnist.yaml", s.path, "plain", {"data.train_subset=200"});
  Cli no = run_cli("export " + plain + " -o " + (s.path / "x.safetensors").string() + " --ema", s.path);
  CHECK(no.code == 2);
  CHECK_THAT(no.err, Catch::Contains("no EMA weights"));
  CHECK_FALSE(fs::exists(s.path / "x.safetensors"));
  const std::string ema = train("mlp_fmnist.yaml", s.path, "ema", {"data.train_subset=400", "train.ema_decay=0.9"});
  const fs::path out = s.path / "ema.safetensors";
  Cli c = run_cli("export " + ema + " -o " + out.string() + " --ema", s.path);
  INFO(c.err);
  REQUIRE(c.code == 0);
  const SafetensorsFile f = read(out);
  CHECK(f.metadata.at("weights") == "ema");
  Result<CkptStateFile> st = ckpt_read_state(ema + "/checkpoints/epoch-0001/state.bin");
  REQUIRE(st.ok());
  const auto& slots = st->slots.at("fc3.weight");
  REQUIRE(slots.size() == 3);  // AdamW's m, v, then the EMA
  CHECK(f.find("fc3.weight")->data == slots[2]);
  const SafetensorsFile ckpt = read(fs::path(ema) / "checkpoints" / "epoch-0001" / "weights.safetensors");
  CHECK(f.find("fc3.weight")->data != ckpt.find("fc3.weight")->data);
}

TEST_CASE("export errors: corrupt checkpoint, missing config, unwritable output, no checkpoint", "[e2e][export]") {
  Scratch s;
  const std::string run = train("mlp_fmnist.yaml", s.path, "mlp", {"data.train_subset=200"});
  // A checkpoint copied out of its run directory needs --config.
  const fs::path lone = s.path / "lone";
  fs::copy(fs::path(run) / "checkpoints" / "epoch-0001", lone);
  Cli nocfg = run_cli("export " + lone.string() + " -o " + (s.path / "a.safetensors").string(), s.path);
  CHECK(nocfg.code == 2);
  CHECK_THAT(nocfg.err, Catch::Contains("config.resolved.yaml") && Catch::Contains("--config"));
  Cli cfg = run_cli("export " + lone.string() + " --config " + run + "/config.resolved.yaml -o " +
                      (s.path / "a.safetensors").string(),
                  s.path);
  CHECK(cfg.code == 0);
  // Another run's spec is refused.
  Cli other = run_cli("export " + lone.string() + " --config " + TRCTL_SOURCE_DIR + "/configs/cnn_fmnist.yaml -o " +
                        (s.path / "b.safetensors").string(),
                    s.path);
  CHECK(other.code == 2);
  CHECK_THAT(other.err, Catch::Contains("not the checkpoint's"));
  // The output directory does not exist: exit 1, the path named, nothing written.
  const std::string nowhere = (s.path / "no" / "such" / "dir" / "w.safetensors").string();
  Cli unwritable = run_cli("export " + run + " -o " + nowhere, s.path);
  CHECK(unwritable.code == 1);
  CHECK_THAT(unwritable.err, Catch::Contains(nowhere) && Catch::Contains("No such file or directory"));
  // One flipped byte in the tensor data.
  {
    std::fstream w((lone / "weights.safetensors").string(), std::ios::in | std::ios::out | std::ios::binary);
    w.seekg(-3, std::ios::end);
    char b = 0;
    w.read(&b, 1);
    b ^= 0x40;
    w.seekp(-3, std::ios::end);
    w.write(&b, 1);
  }
  Cli corrupt = run_cli("export " + lone.string() + " --config " + run + "/config.resolved.yaml -o " +
                          (s.path / "c.safetensors").string(),
                      s.path);
  CHECK(corrupt.code == 2);
  CHECK_THAT(corrupt.err, Catch::Contains("checksum mismatch"));
  Cli none = run_cli("export " + (s.path / "lone" / "..").string() + "/nothing -o x.safetensors", s.path);
  CHECK(none.code == 2);
  CHECK_THAT(none.err, Catch::Contains("no checkpoint here"));
}
