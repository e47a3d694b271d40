// The trctl binary: exit codes, error locations on stderr, run-directory contents, and the resolved config
// being accepted back as input.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace fs = std::filesystem;

namespace {

struct Run {
  int code = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

fs::path temp_dir(const std::string& tag) {
  fs::path d = fs::temp_directory_path() / ("trctl_cli_" + tag + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

Run trctl(const std::string& args) {
  static int n = 0;
  fs::path d = temp_dir("io" + std::to_string(n++));
  std::string cmd = std::string(TRCTL_BINARY) + " " + args + " >" + (d / "out").string() + " 2>" + (d / "err").string();
  int st = std::system(cmd.c_str());
  Run r;
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = slurp((d / "out").string());
  r.err = slurp((d / "err").string());
  fs::remove_all(d);
  return r;
}

const std::string kConfig = std::string(TRCTL_SOURCE_DIR) + "/configs/mlp_fmnist.yaml";

}  // namespace

TEST_CASE("validate prints the resolved spec and exits 0", "[cli]") {
  Run r = trctl("validate " + kConfig);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("adamw") && Catch::Contains("fc1"));
}

TEST_CASE("a config error exits 2 with file:line:col and a suggestion", "[cli]") {
  fs::path d = temp_dir("bad");
  std::ofstream(d / "bad.yaml") << "model:\n  layers:\n    - {type: linear, out_features: 10}\noptimzer:\n  lr: 0.1\n";
  Run r = trctl("validate " + (d / "bad.yaml").string());
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("bad.yaml:4:1") && Catch::Contains("optimizer"));
  fs::remove_all(d);
}

TEST_CASE("a bad override exits 2 and names the override", "[cli]") {
  Run r = trctl("validate " + kConfig + " train.epochs=abc");
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("<override 1>"));
  Run t = trctl("train " + kConfig + " optimizer.lr=-1");
  CHECK(t.code == 2);
}

// The conv -> batch norm fusions default to auto: no error whatever train.deterministic says; an explicit fused
// that train.deterministic: true cannot honour is a config error.
TEST_CASE("validate accepts the default conv_bn modes either way; conv_bn_stats=fused without "
          "deterministic: false exits 2",
          "[cli]") {
  const std::string vgg = std::string(TRCTL_SOURCE_DIR) + "/configs/vgg16bn.yaml";
  Run det = trctl("validate " + vgg);
  INFO(det.err);
  CHECK(det.code == 0);
  Run nondet = trctl("validate " + vgg + " train.deterministic=false");
  INFO(nondet.err);
  CHECK(nondet.code == 0);
  CHECK_THAT(nondet.out, !Catch::Contains("conv_bn_stats") && !Catch::Contains("conv_bn_backward"));  // auto
  Run fused = trctl("validate " + vgg + " train.conv_bn_stats=fused");
  CHECK(fused.code == 2);
  CHECK_THAT(fused.err, Catch::Contains("'train.conv_bn_stats: fused' needs 'train.deterministic: false'"));
}

TEST_CASE("compile --dump prints the graph after a stage; an unknown stage exits 2", "[cli]") {
  Run r = trctl("compile " + kConfig + " --dump=after:autodiff");
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("linear_grad_weight"));
  Run m = trctl("compile " + kConfig + " --dump=after:memplan");
  CHECK_THAT(m.out, Catch::Contains("region activations"));
  CHECK(trctl("compile " + kConfig + " --dump=after:nothing").code == 2);
}

TEST_CASE("bench --only belongs to bench kernels: elsewhere it exits 2 saying so", "[cli]") {
  Run r = trctl("bench compile " + kConfig + " --only wgconv");
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("--only applies to `trctl bench kernels`"));
  // Without a GPU (or a CUDA build) bench kernels refuses as before, --only or not.
  Run k = trctl("bench kernels --only wgconv");
  CHECK(k.code == 2);
  CHECK_THAT(k.err, Catch::Contains("trctl bench kernels needs a CUDA"));
}

TEST_CASE("export with a format other than safetensors says it is not supported and exits 2", "[cli][export]") {
  Run r = trctl("export " + temp_dir("nofmt").string() + " --format onnx -o x.onnx");
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("--format onnx is not supported"));
  Run m = trctl("export " + temp_dir("noout").string());  // -o is required
  CHECK(m.code == 2);
}

TEST_CASE("eval without --weights, or with a directory holding no checkpoint, exits 2 with a message", "[cli]") {
  Run r = trctl("eval " + kConfig);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("--weights"));
  Run n = trctl("eval " + kConfig + " train.device=cpu --weights " + temp_dir("nockpt").string());
  CHECK(n.code == 2);
  CHECK_THAT(n.err, Catch::Contains("no checkpoint here"));
}

TEST_CASE("train writes the run directory and its resolved config is accepted back", "[cli][train]") {
  fs::path d = temp_dir("run");
  Run r = trctl("train " + kConfig + " train.epochs=1 data.train_subset=400 train.device=cpu run.log_interval=1 " +
                "run.out_dir=" + d.string() + " run.name=t");
  INFO(r.err);
  REQUIRE(r.code == 0);
  fs::path run = d / "t";
  for (const char* f : {"config.resolved.yaml", "metrics.jsonl", "summary.csv", "plan.txt"})
    CHECK(fs::exists(run / f));
  std::string metrics = slurp((run / "metrics.jsonl").string());
  CHECK_THAT(metrics, Catch::Contains("\"kind\":\"step\"") && Catch::Contains("\"val_top1\"") &&
                         Catch::Contains("\"val_top5\"") && Catch::Contains("\"skipped_steps\":0"));
  std::string summary = slurp((run / "summary.csv").string());
  CHECK(std::count(summary.begin(), summary.end(), '\n') == 2);
  CHECK_THAT(summary, Catch::StartsWith("epoch,step,lr,train_loss,train_top1,val_loss,val_top1,images_per_s,"
                                        "epoch_seconds,seconds,val_top5,skipped_steps\n"));
  CHECK_THAT(r.out, Catch::Contains("top5") && Catch::Contains("0 steps skipped"));
  Run again = trctl("validate " + (run / "config.resolved.yaml").string());
  INFO(again.err);
  CHECK(again.code == 0);
  CHECK(again.out == slurp((run / "config.resolved.yaml").string()));
  // A second run with the same name gets a fresh directory.
  Run r2 = trctl("train " + kConfig + " train.epochs=1 data.train_subset=200 train.device=cpu run.out_dir=" +
                 d.string() + " run.name=t");
  CHECK(r2.code == 0);
  CHECK(fs::exists(d / "t-2" / "metrics.jsonl"));
  fs::remove_all(d);
}

// A step record's images_per_s covers its window of log_interval steps: log_interval * batch images over the time
// since the previous record, which the records' "seconds" also measure. (The CUDA backend's times were taken before
// the loss read that waits for the window's steps, logging ~2x the images/s; RESULTS.md run 49.)
TEST_CASE("train's step records: images_per_s agrees with the seconds between records", "[cli][train]") {
  fs::path d = temp_dir("steprate");
  Run r = trctl("train " + kConfig + " train.epochs=1 data.train_subset=6000 train.device=cpu run.log_interval=6 " +
                "run.out_dir=" + d.string() + " run.name=t");
  INFO(r.err);
  REQUIRE(r.code == 0);
  std::istringstream lines(slurp((d / "t" / "metrics.jsonl").string()));
  auto field = [](const std::string& line, const std::string& key) {
    const size_t at = line.find("\"" + key + "\":");
    REQUIRE(at != std::string::npos);
    return std::stod(line.substr(at + key.size() + 3));
  };
  std::vector<std::pair<double, double>> steps;  // (images_per_s, seconds) of the step records, 30 steps: 5
  for (std::string line; std::getline(lines, line);)
    if (line.find("\"kind\":\"step\"") != std::string::npos)
      steps.emplace_back(field(line, "images_per_s"), field(line, "seconds"));
  REQUIRE(steps.size() == 5);
  for (size_t i = 1; i < steps.size(); ++i) {
    const double dt = steps[i].second - steps[i - 1].second;
    REQUIRE(dt > 0);
    const double from_seconds = 6 * 200 / dt;  // log_interval steps of batch 200
    INFO("record " << i << ": images_per_s " << steps[i].first << ", from the seconds " << from_seconds);
    // "seconds" is written with millisecond resolution: 6 MLP steps on the CPU take tens of milliseconds.
    CHECK(steps[i].first == Approx(from_seconds).epsilon(0.25));
  }
  fs::remove_all(d);
}

// A real SIGTERM to a training process: it finishes its step, writes a checkpoint and exits 143 (exact resumption
// from such a checkpoint: resume_test.cpp).
TEST_CASE("SIGTERM stops training with a checkpoint and exit code 143", "[cli][signal]") {
  fs::path d = temp_dir("sig");
  const std::string train = std::string(TRCTL_BINARY) + " train " + kConfig +
                            " train.device=cpu train.epochs=50 data.train_subset=2000 run.out_dir=" + d.string() +
                            " run.name=s run.progress=off";
  // The shell reports the child's own exit status through `wait`.
  const std::string cmd = "sh -c '" + train + " >" + (d / "out").string() + " 2>" + (d / "err").string() +
                          " & pid=$!; sleep 2; kill -TERM $pid; wait $pid; exit $?'";
  const int st = std::system(cmd.c_str());
  const int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  INFO(slurp((d / "err").string()));
  CHECK(code == 143);
  CHECK_THAT(slurp((d / "err").string()), Catch::Contains("stopped by SIGTERM"));
  bool ckpt = false;
  for (const auto& e : fs::directory_iterator(d / "s" / "checkpoints")) ckpt |= fs::exists(e.path() / "state.bin");
  CHECK(ckpt);
  fs::remove_all(d);
}

TEST_CASE("pack-dts, --verify and dts info: a packed IDX file, and bad input exits 2 naming the file", "[cli][dts]") {
  const fs::path d = temp_dir("dts");
  const std::string fm = "/usr/share/datasets/fashion-mnist/";
  const std::string out = (d / "val.dts").string();
  Run p = trctl("pack-dts " + fm + "t10k-images-idx3-ubyte.gz --labels " + fm + "t10k-labels-idx1-ubyte.gz -o " + out +
                " --block-kib 1024");
  INFO(p.err);
  REQUIRE(p.code == 0);
  CHECK_THAT(p.out, Catch::Contains("packed 10000 samples (0 skipped)"));
  Run v = trctl("pack-dts --verify " + out);
  CHECK(v.code == 0);
  CHECK_THAT(v.out, Catch::Contains("ok: " + out + ": 10000 samples"));
  Run i = trctl("dts info " + out);
  CHECK(i.code == 0);
  CHECK_THAT(i.out, Catch::Contains("level 0: full size, raw u8"));

  Run no_labels = trctl("pack-dts " + fm + "t10k-images-idx3-ubyte.gz -o " + (d / "x.dts").string());
  CHECK(no_labels.code == 2);
  CHECK_THAT(no_labels.err, Catch::Contains("needs --labels"));
  Run level = trctl("pack-dts " + fm + "t10k-images-idx3-ubyte.gz --labels " + fm + "t10k-labels-idx1-ubyte.gz -o " +
                    (d / "x.dts").string() + " --level 16:90");
  CHECK(level.code == 2);
  CHECK_THAT(level.err, Catch::Contains("reduced levels need a JPEG source"));
  Run bad_level = trctl("pack-dts " + (d / "nope").string() + " -o x.dts --level big");
  CHECK(bad_level.code == 2);
  Run not_dts = trctl("dts info " + fm + "t10k-labels-idx1-ubyte.gz");
  CHECK(not_dts.code == 2);
  CHECK_THAT(not_dts.err, Catch::Contains("t10k-labels-idx1-ubyte.gz:offset 0: not a DTS file"));
  Run bench = trctl("bench data " + (d / "missing.dts").string());
  CHECK(bench.code == 2);
  CHECK_THAT(bench.err, Catch::Contains("missing.dts: cannot open"));
  fs::remove_all(d);
}

// Training at one image size and validating at another (docs/data.md): validate and compile accept it and show both
// sizes; a model whose parameters would follow the image size exits 2 naming the layer.
TEST_CASE("validate and compile accept a spec with two image sizes; a flatten -> linear model exits 2", "[cli]") {
  fs::path d = temp_dir("sizes");
  const std::string head =
      "seed: 1\ndata:\n  dataset: synthetic\n"
      "  synthetic: {train_size: 64, val_size: 40, height: 12, width: 12, channels: 1, classes: 4}\n"
      "  batch_size: 16\n  normalization: {mean: [0.5], std: [0.25]}\n"
      "  train_transforms: [{random_crop: {size: 8}}, normalize]\n  val_transforms: [normalize]\n"
      "model:\n  layers:\n    - {type: conv2d, name: c1, out_channels: 4, kernel_size: 3, padding: 1}\n"
      "    - {type: relu, name: r1}\n";
  const std::string tail = "    - {type: linear, name: fc, out_features: 4}\n"
                           "optimizer: {type: sgd, lr: 0.1}\ntrain: {epochs: 1, device: cpu}\n"
                           "run: {progress: off, out_dir: " + (d / "runs").string() + "}\n";
  std::ofstream(d / "gap.yaml") << head << "    - {type: global_avg_pool, name: gap}\n" << tail;
  std::ofstream(d / "flat.yaml") << head << "    - {type: flatten, name: flat}\n" << tail;
  Run v = trctl("validate " + (d / "gap.yaml").string());
  INFO(v.err);
  CHECK(v.code == 0);
  CHECK_THAT(v.out, Catch::Contains("train_transforms:") && Catch::Contains("random_crop") &&
                        Catch::Contains("val_transforms:"));
  Run c = trctl("compile " + (d / "gap.yaml").string() + " --dump=after:memplan");
  INFO(c.err);
  CHECK(c.code == 0);
  CHECK_THAT(c.out, Catch::Contains("sample (H, W, C) = (8, 8, 1), validation (12, 12, 1)") &&
                        Catch::Contains(":train/c1 (16, 8, 8, 4)") && Catch::Contains(":eval/c1 (16, 12, 12, 4)") &&
                        Catch::Contains(":eval_last/c1 (8, 12, 12, 4)"));
  Run t = trctl("train " + (d / "gap.yaml").string());
  INFO(t.err);
  CHECK(t.code == 0);
  CHECK_THAT(t.err, Catch::Contains("(train 8x8, val 12x12)"));
  for (const char* cmd : {"compile", "train"}) {
    Run f = trctl(std::string(cmd) + " " + (d / "flat.yaml").string());
    INFO(cmd);
    CHECK(f.code == 2);
    CHECK_THAT(f.err, Catch::Contains("flat.yaml:14:7: linear layer 'fc'") &&
                          Catch::Contains("(4, 256) at the training image size 8x8") &&
                          Catch::Contains("(4, 576) at the validation image size 12x12") &&
                          Catch::Contains("global_avg_pool"));
  }
  fs::remove_all(d);
}
