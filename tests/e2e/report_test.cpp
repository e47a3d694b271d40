// trctl report: a run directory (trained, or written with the trainer's own writers) against PyTorch results in
// the trctl-bench-result schema gives report.md/html with the fairness table, the results table and four PNGs;
// bad inputs exit 2 naming the file.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/report/report_data.h"
#include "runtime/report/report_plot.h"
#include "runtime/report/report_recipe.h"
#include "runtime/run_facts.h"
#include "runtime/train/run_outputs.h"

namespace fs = std::filesystem;
using namespace trctl;

namespace {

struct Run {
  int code = -1;
  std::string out, err;
};

std::string slurp(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

fs::path temp_dir(const std::string& tag) {
  fs::path d = fs::temp_directory_path() / ("trctl_report_" + tag + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// `env` is prepended to the command (VAR=value ...).
Run run_trctl(const std::string& args, const std::string& env = "") {
  static int n = 0;
  const fs::path d = temp_dir("io" + std::to_string(n++));
  const std::string cmd = env + " " + std::string(TRCTL_BINARY) + " " + args + " >" + (d / "out").string() + " 2>" +
                          (d / "err").string();
  const int st = std::system(cmd.c_str());
  Run r;
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = slurp(d / "out");
  r.err = slurp(d / "err");
  fs::remove_all(d);
  return r;
}

const std::string kConfig = std::string(TRCTL_SOURCE_DIR) + "/configs/mlp_fmnist.yaml";

bool have_gnuplot() { return gnuplot_find().ok(); }

bool is_png(const fs::path& p) {
  const std::string s = slurp(p);
  return s.size() > 100 && s.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0;
}

// A PyTorch result in the schema: the recipe items that matter for the tests and one run of `top1` per epoch.
void write_torch_json(const fs::path& path, int batch, const std::vector<double>& top1, double epoch_seconds) {
  std::ofstream f(path);
  f << R"({"schema": "trctl-bench-result/1", "tool": "pytorch", "name": "pytorch",
  "recipe": {"framework": "torch 2.11.0", "dataset": "fashion_mnist, train subset 2000", "batch_size": )"
    << batch << R"(, "label_smoothing": "0.1", "precision": "fp16 AMP, dynamic loss scaling, fp32 master weights"},
  "runs": [{"epochs": [)";
  for (size_t i = 0; i < top1.size(); ++i)
    f << (i ? ", " : "") << R"({"epoch": )" << i + 1 << R"(, "train_loss": )" << 2.0 - 0.1 * i
      << R"(, "train_top1": null, "val_loss": 1.2, "val_top1": )" << top1[i]
      << R"(, "lr": 0.0002, "images_per_s": 9000, "seconds": )" << epoch_seconds << "}";
  f << "]}]}\n";
}

// A run directory written with the trainer's own writers: the resolved MLP config (with `overrides`) and one
// epoch record per (val top-1, epoch seconds) pair.
fs::path write_run_dir(const fs::path& dir, const std::vector<std::pair<double, double>>& epochs,
                       const std::vector<std::string>& overrides = {"train.device=cpu"}) {
  fs::create_directories(dir);
  Result<Spec> spec = spec_load(kConfig, overrides);
  REQUIRE(spec.ok());
  std::ofstream(dir / "config.resolved.yaml") << spec_to_yaml(spec.value());
  RunOutputs out;
  REQUIRE(out.open(dir.string()).ok());
  double t = 0;
  for (size_t i = 0; i < epochs.size(); ++i) {
    EpochRecord r;
    r.epoch = static_cast<int>(i + 1);
    r.step = 300 * r.epoch;
    r.lr = 1e-3;
    r.train_loss = 1.0;
    r.train_top1 = 0.5;
    r.val_loss = 0.9;
    r.val_top1 = epochs[i].first;
    r.epoch_seconds = epochs[i].second;
    r.images_per_s = 60000 / epochs[i].second;
    r.seconds = t += epochs[i].second;
    out.step(r.epoch, r.step - 10, 1.0, 1e-3, 5000, t);
    out.epoch(r);
  }
  return dir;
}

const std::string kVggConfig = std::string(TRCTL_SOURCE_DIR) + "/configs/vgg16bn.yaml";

// A run directory of configs/vgg16bn.yaml on synthetic data (the cnn stage's overrides), one epoch per images/s
// value, a random-label val top-1 of 1.23 %, and a plan.txt that states only the planned bytes.
// joules: each epoch's energy over its 25 training steps, as a GPU run's metrics.jsonl records it (none: not measured).
fs::path write_synthetic_run_dir(const fs::path& dir, const std::vector<double>& images_per_s, double plan_bytes,
                                 const std::vector<double>& joules = {}) {
  fs::create_directories(dir);
  Result<Spec> spec = spec_load(kVggConfig, {"train.device=cuda", "train.epochs=3", "data.synthetic.train_size=6400"});
  REQUIRE(spec.ok());
  std::ofstream(dir / "config.resolved.yaml") << spec_to_yaml(spec.value());
  std::ofstream(dir / "plan.txt") << "# after memplan\nmemory plan (" << static_cast<long long>(plan_bytes)
                                  << " bytes):\n  region weights 0 bytes\n";
  RunOutputs out;
  REQUIRE(out.open(dir.string()).ok());
  double t = 0;
  for (size_t i = 0; i < images_per_s.size(); ++i) {
    EpochRecord r;
    r.epoch = static_cast<int>(i + 1);
    r.step = 25 * r.epoch;
    r.lr = 0.0045 * r.epoch;
    r.train_loss = r.val_loss = 6.9;
    r.train_top1 = 0.0011;
    r.val_top1 = 0.0123;
    r.images_per_s = images_per_s[i];
    r.epoch_seconds = 6400 / images_per_s[i] + 0.2;
    r.seconds = t += r.epoch_seconds;
    r.steps = 25;
    r.train_seconds = r.epoch_seconds - 0.2;  // the 0.2 s: validation
    if (i < joules.size()) r.energy_j = joules[i];
    out.epoch(r);
  }
  return dir;
}

// A throughput result as benchmarks/pytorch_cnn.py --out-dir writes it, reduced to what the report reads: one run
// per timed window (images/s and peak memory; no ms_per_step, so the report derives it from the batch size).
// measurement: the members of the result's "measurement" object (pytorch_cnn.py's), e.g. R"("loss_finite": false)";
// j_per_step: each run's joules per step (the board's energy over its window; none: not measured).
void write_throughput_json(const fs::path& path, const std::string& name, const std::vector<double>& images_per_s,
                           const std::string& measurement = "", const std::vector<double>& j_per_step = {}) {
  std::ofstream f(path);
  f << R"({"schema": "trctl-bench-result/1", "tool": "pytorch", "name": ")" << name << R"(",
  "recipe": {"dataset": "synthetic 224x224x3, 1000 classes, 6400 train images", "batch_size": 256,
             "epochs": "3 timed windows", "memory_measure": "torch.cuda.max_memory_allocated"},
  "runs": [)";
  for (size_t i = 0; i < images_per_s.size(); ++i) {
    f << (i ? ", " : "") << R"({"images_per_s_steady": )" << images_per_s[i]
      << R"(, "peak_memory_bytes": 536870912, "window": )" << i + 1;
    if (i < j_per_step.size()) f << R"(, "j_per_step": )" << j_per_step[i];
    f << "}";
  }
  f << "]";
  if (!measurement.empty()) f << R"(, "measurement": {)" << measurement << "}";
  f << "}\n";
}

// One real CPU run of the benchmark MLP (2 epochs on 2000 images, about 3 s) under `root`; its run directory.
fs::path trained_run(const fs::path& root) {
  Run r = run_trctl("train " + kConfig + " train.epochs=2 data.train_subset=2000 train.device=cpu run.progress=off "
                    "run.name=mlp run.out_dir=" + root.string());
  INFO(r.err);
  REQUIRE(r.code == 0);
  REQUIRE(fs::exists(root / "mlp" / "metrics.jsonl"));
  return root / "mlp";
}

}  // namespace

TEST_CASE("a report of a trained run vs a PyTorch result has the fairness table, the results table and 4 PNGs",
          "[report][cli]") {
  const fs::path d = temp_dir("full");
  const fs::path run = trained_run(d / "runs");
  write_torch_json(d / "torch.json", 256, {0.40, 0.45}, 2.0);
  const bool plots = have_gnuplot();
  if (!plots) WARN("skipped the PNG checks: gnuplot is not installed (tools/setup.sh installs gnuplot-nox)");
  Run r = run_trctl("report " + run.string() + " --vs " + (d / "torch.json").string() + " -o " +
                    (d / "rep").string() + (plots ? "" : " --no-plots"));
  INFO(r.err);
  REQUIRE(r.code == 0);
  const std::string md = slurp(d / "rep" / "report.md");
  CHECK_THAT(md, Catch::Contains("| item | trctl | pytorch | differs |"));
  CHECK_THAT(md, Catch::Contains("| **batch size** | **200** | **256** | ≠ trctl: 200 / pytorch: 256 |"));
  CHECK_THAT(md, Catch::Contains("| label smoothing | 0.1 | 0.1 | = |"));
  CHECK_THAT(md, Catch::Contains("| dataset | fashion_mnist, train subset 2000 | fashion_mnist, train subset 2000 "
                                 "| = |"));
  CHECK_THAT(md, Catch::Contains("| optimizer | adamw lr=0.001 betas=(0.9, 0.999) eps=1e-08 | — "
                                 "| ? not stated by pytorch |"));
  CHECK_THAT(md, Catch::Contains("## Results"));
  CHECK_THAT(md, Catch::Contains("| tool | runs | epochs/s (steady) | images/s (steady) | final val top-1"));
  CHECK_THAT(md, Catch::Contains("| pytorch | 1 | 0.50 | 9000 | 45.00 % | 45.00 % |"));
  CHECK_THAT(md, Catch::Contains("| *trctl / pytorch* |"));
  const std::string html = slurp(d / "rep" / "report.html");
  CHECK_THAT(html, Catch::Contains("<tr class=\"diff\"><td><strong>batch size</strong></td>"));
  for (const char* png : {"loss.png", "accuracy.png", "lr.png", "throughput.png"}) {
    if (!plots) break;
    INFO(png);
    CHECK(is_png(d / "rep" / png));
    CHECK_THAT(md, Catch::Contains(std::string("](") + png + ")"));
    CHECK_THAT(html, Catch::Contains(std::string("<img src=\"") + png + "\""));
  }
  CHECK(fs::exists(d / "rep" / "plots.gp") == plots);
  fs::remove_all(d);
}

TEST_CASE("several run directories give the median with min and max, and the ratio divides the medians",
          "[report][cli]") {
  const fs::path d = temp_dir("median");
  // steady epochs/s (epochs 2..3): 2 / (0.5 + 0.5) = 2, 2 / (0.25 + 0.25) = 4, 2 / (1 + 1) = 1
  write_run_dir(d / "a", {{0.80, 3.0}, {0.85, 0.5}, {0.87, 0.5}});
  write_run_dir(d / "b", {{0.80, 3.0}, {0.86, 0.25}, {0.88, 0.25}});
  write_run_dir(d / "c", {{0.80, 3.0}, {0.84, 1.0}, {0.86, 1.0}});
  write_torch_json(d / "torch.json", 200, {0.70, 0.80, 0.84}, 1.0);  // 1 epoch/s steady
  Run r = run_trctl("report " + (d / "a").string() + " " + (d / "b").string() + " " + (d / "c").string() + " --vs " +
                    (d / "torch.json").string() + " -o " + (d / "rep").string() + " --no-plots");
  INFO(r.err);
  REQUIRE(r.code == 0);
  const std::string md = slurp(d / "rep" / "report.md");
  CHECK_THAT(md, Catch::Contains("| trctl | 3 | 2.00 (1.00–4.00) |"));
  CHECK_THAT(md, Catch::Contains("87.00 % (86.00–88.00)"));
  CHECK_THAT(md, Catch::Contains("| *trctl / pytorch* | — | 2.00× |"));
  CHECK_THAT(md, Catch::Contains("| **number of runs** | **3** | **1** | ≠ trctl: 3 / pytorch: 1 |"));
  fs::remove_all(d);
}

TEST_CASE("time to accuracy is the time of the epochs up to the first that reaches --tta", "[report][cli]") {
  const fs::path d = temp_dir("tta");
  write_run_dir(d / "run", {{0.80, 1.5}, {0.86, 1.0}, {0.88, 1.0}});
  write_torch_json(d / "torch.json", 200, {0.80, 0.84, 0.85}, 2.0);
  Run r = run_trctl("report " + (d / "run").string() + " --vs " + (d / "torch.json").string() + " -o " +
                    (d / "rep").string() + " --no-plots --tta 0.85");
  INFO(r.err);
  REQUIRE(r.code == 0);
  const std::string md = slurp(d / "rep" / "report.md");
  CHECK_THAT(md, Catch::Contains("threshold: 85.00 % val top-1 (--tta)"));
  CHECK_THAT(md, Catch::Contains("| time to 85.00 % | epochs to 85.00 % |"));
  CHECK_THAT(md, Catch::Contains("| 2.50 s | 2 |"));  // trctl: epochs 1-2, 1.5 + 1.0 s
  CHECK_THAT(md, Catch::Contains("| 6.00 s | 3 |"));  // pytorch: epochs 1-3 of 2 s
  CHECK_THAT(md, Catch::Contains("| 0.42× | 0.67× |"));
  // Without --tta: the lower final accuracy (85 %) minus one point.
  r = run_trctl("report " + (d / "run").string() + " --vs " + (d / "torch.json").string() + " -o " +
                (d / "rep2").string() + " --no-plots");
  REQUIRE(r.code == 0);
  CHECK_THAT(slurp(d / "rep2" / "report.md"), Catch::Contains("| time to 84.00 % |"));
  fs::remove_all(d);
}

TEST_CASE("a run directory without metrics.jsonl is read from summary.csv", "[report][cli]") {
  const fs::path d = temp_dir("csv");
  write_run_dir(d / "run", {{0.80, 2.0}, {0.85, 1.0}});
  fs::remove(d / "run" / "metrics.jsonl");
  Result<ToolResult> t = report_read_run_dir((d / "run").string());
  INFO((t.ok() ? std::string() : t.error_text()));
  REQUIRE(t.ok());
  REQUIRE(t->runs.size() == 1);
  REQUIRE(t->runs[0].epochs.size() == 2);
  CHECK(t->runs[0].final_val_top1 == Approx(0.85));
  CHECK(t->runs[0].epochs_per_s_steady == Approx(1.0));
  fs::remove_all(d);
}

TEST_CASE("trctl's recipe states every documented fairness item", "[report]") {
  Result<Spec> spec = spec_load(kConfig, {"train.device=cuda"});
  REQUIRE(spec.ok());
  Result<std::vector<RecipeItem>> r = recipe_from_trctl(spec_to_yaml(spec.value()), "config.resolved.yaml",
                                                        "graph: x; compute f32, activations stored as f16\nparams:\n"
                                                        "  fc1.weight (1024, 784) decay grad=%1\n"
                                                        "  fc1.bias (1024) no_decay grad=%2\nprogram train:\n");
  REQUIRE(r.ok());
  for (const RecipeKey& k : recipe_keys()) {
    INFO(k.key);
    // "runs" is the report's count; an MLP has no image memory format and no convolution algorithms; the memory
    // measure comes with the plan's bytes of a synthetic-data run (report_read_run_dir), not from the recipe.
    const std::string key = k.key;
    if (key != "runs" && key != "memory_format" && key != "conv_algorithms" && key != "memory_measure")
      CHECK(recipe_find(r.value(), k.key));
  }
  CHECK(*recipe_find(r.value(), "parameters") == "803840");
  CHECK(*recipe_find(r.value(), "weight_decay") == "0.0001 decoupled on 1 tensors, 0 on 1");
  CHECK(*recipe_find(r.value(), "precision") == "fp16 AMP, dynamic loss scaling, fp32 master weights");
  CHECK(*recipe_find(r.value(), "graph_mode") == "CUDA graph: whole step (augmentation, forward, backward, optimizer)");
  CHECK(*recipe_find(r.value(), "data_loading") == "GPU-resident dataset, augmentation on the GPU");
}

TEST_CASE("trctl's recipe of a synthetic CNN run: the training images in the dataset, NHWC memory format",
          "[report]") {
  Result<Spec> spec = spec_load(kVggConfig, {"train.device=cuda", "data.synthetic.train_size=6400"});
  REQUIRE(spec.ok());
  Result<std::vector<RecipeItem>> r = recipe_from_trctl(spec_to_yaml(spec.value()), "config.resolved.yaml", "");
  REQUIRE(r.ok());
  CHECK(*recipe_find(r.value(), "dataset") == "synthetic 224x224x3, 1000 classes, 6400 train images");
  CHECK(*recipe_find(r.value(), "validation") == "every epoch, 512 synthetic images, batch 256, transforms: normalize");
  CHECK(*recipe_find(r.value(), "memory_format") == "channels_last (NHWC)");
  CHECK(*recipe_find(r.value(), "conv_algorithms") ==
        "cuDNN, deterministic algorithms only: from the autotune cache (trctl bench --autotune) when it holds the "
        "shape, else cuDNN's heuristics; chosen at compile time");
  CHECK(recipe_find(r.value(), "conv_algorithms")->find("deterministic algorithms only") != std::string::npos);
  Result<Spec> nondet = spec_load(kVggConfig, {"train.device=cuda", "train.deterministic=false"});
  REQUIRE(nondet.ok());
  Result<std::vector<RecipeItem>> rn = recipe_from_trctl(spec_to_yaml(nondet.value()), "config.resolved.yaml", "");
  REQUIRE(rn.ok());
  CHECK(recipe_find(rn.value(), "conv_algorithms")->find("any algorithm (train.deterministic: false)") !=
        std::string::npos);
  CHECK(*recipe_find(r.value(), "model") ==
        "52 layers: 13 conv2d, 13 batch_norm, 15 relu, 5 max_pool, 1 flatten, 3 linear, 2 dropout");
}

TEST_CASE("run.json's conv algorithm record says how many cuDNN plans came from the autotune cache or heuristics",
          "[report]") {
  Result<Spec> spec = spec_load(kVggConfig, {"train.device=cuda"});
  REQUIRE(spec.ok());
  const std::string yaml = spec_to_yaml(spec.value());
  RunFacts f;
  f.backend = "cuda";
  f.has_conv = true;
  f.conv.cache = "/root/.cache/trctl/conv_autotune.txt";
  auto conv_text = [&](int from_cache, int from_heuristics, bool exists) {
    f.conv.from_cache = from_cache;
    f.conv.from_heuristics = from_heuristics;
    f.conv.cache_exists = exists;
    Result<std::vector<RecipeItem>> r = recipe_from_trctl(yaml, "config.resolved.yaml", "", &f);
    REQUIRE(r.ok());
    return *recipe_find(r.value(), "conv_algorithms");
  };
  CHECK(conv_text(39, 0, true) == "cuDNN, deterministic algorithms only, chosen at compile time: 39 of 39 plans from "
                                  "the autotune cache (measured by trctl bench --autotune)");
  CHECK(conv_text(0, 39, false) == "cuDNN, deterministic algorithms only, chosen at compile time: 39 of 39 plans from "
                                   "cuDNN's heuristics (no autotune cache file)");
  CHECK(conv_text(0, 39, true) == "cuDNN, deterministic algorithms only, chosen at compile time: 39 of 39 plans from "
                                  "cuDNN's heuristics (the autotune cache holds none of these shapes)");
  CHECK(conv_text(38, 1, true) == "cuDNN, deterministic algorithms only, chosen at compile time: 38 of 39 plans from "
                                  "the autotune cache (measured by trctl bench --autotune), 1 from cuDNN's heuristics "
                                  "(shapes the cache does not hold)");
  CHECK(conv_text(0, 0, true) ==
        "cuDNN, deterministic algorithms only: no cuDNN convolution plans (1x1 convolutions run as cuBLASLt GEMMs)");
  Result<Spec> nondet = spec_load(kVggConfig, {"train.deterministic=false"});  // device auto: run.json names cuda
  REQUIRE(nondet.ok());
  f.conv.from_cache = 39;
  f.conv.from_heuristics = 0;
  Result<std::vector<RecipeItem>> rn = recipe_from_trctl(spec_to_yaml(nondet.value()), "config.resolved.yaml", "", &f);
  REQUIRE(rn.ok());
  CHECK(*recipe_find(rn.value(), "conv_algorithms") ==
        "cuDNN, any algorithm (train.deterministic: false), chosen at compile time: 39 of 39 plans from the autotune "
        "cache (measured by trctl bench --autotune)");
  CHECK(*recipe_find(rn.value(), "device") == "cuda backend");
  f.device = "NVIDIA H200, sm_90, 132 SMs, cuDNN 91900";  // run.json's device description, where recorded
  Result<std::vector<RecipeItem>> rd = recipe_from_trctl(spec_to_yaml(nondet.value()), "config.resolved.yaml", "", &f);
  REQUIRE(rd.ok());
  CHECK(*recipe_find(rd.value(), "device") == "cuda backend: NVIDIA H200, sm_90, 132 SMs, cuDNN 91900");
  // The cpu backend records no conv algorithms; run.json's backend settles device: auto.
  RunFacts cpu;
  cpu.backend = "cpu";
  Result<Spec> dev_auto = spec_load(kVggConfig, {"train.precision=fp32"});
  REQUIRE(dev_auto.ok());
  Result<std::vector<RecipeItem>> rc = recipe_from_trctl(spec_to_yaml(dev_auto.value()), "config.resolved.yaml", "",
                                                         &cpu);
  REQUIRE(rc.ok());
  CHECK(*recipe_find(rc.value(), "conv_algorithms") == "the cpu backend's own convolution");
  CHECK(*recipe_find(rc.value(), "device") == "cpu backend");
}

TEST_CASE("a run directory's run.json gives the conv algorithms' source; one without it keeps the config's text",
          "[report]") {
  const fs::path d = temp_dir("run_facts");
  write_synthetic_run_dir(d / "old", {2000, 3000, 3000}, 1e9);
  Result<ToolResult> old = report_read_run_dir((d / "old").string());
  INFO((old.ok() ? std::string() : old.error_text()));
  REQUIRE(old.ok());
  CHECK(*recipe_find(old->recipe, "conv_algorithms") ==
        "cuDNN, deterministic algorithms only: from the autotune cache (trctl bench --autotune) when it holds the "
        "shape, else cuDNN's heuristics; chosen at compile time");

  write_synthetic_run_dir(d / "new", {2000, 3000, 3000}, 1e9);
  RunFacts f;
  f.backend = "cuda";
  f.has_conv = true;
  f.conv.cache = "/tmp/cache.txt";
  f.conv.cache_exists = true;
  f.conv.from_cache = 39;
  std::ofstream(d / "new" / "run.json") << run_facts_json(f);
  Result<ToolResult> tuned = report_read_run_dir((d / "new").string());
  INFO((tuned.ok() ? std::string() : tuned.error_text()));
  REQUIRE(tuned.ok());
  CHECK(*recipe_find(tuned->recipe, "conv_algorithms") ==
        "cuDNN, deterministic algorithms only, chosen at compile time: 39 of 39 plans from the autotune cache "
        "(measured by trctl bench --autotune)");

  std::ofstream(d / "new" / "run.json") << R"({"backend": "cuda", "conv_algorithms": {"from_cache": "x"}})";
  Result<ToolResult> bad = report_read_run_dir((d / "new").string());
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error_text(), Catch::Contains("run.json") && Catch::Contains("conv_algorithms.from_cache"));
  fs::remove_all(d);
}

TEST_CASE("run.json's conv -> batch norm statistics counts (train.conv_bn_stats) round-trip; separate writes none",
          "[report]") {
  RunFacts f;
  f.backend = "cuda";
  f.has_conv = true;
  f.conv.from_heuristics = 12;
  const std::string plain = run_facts_json(f);
  CHECK_THAT(plain, !Catch::Contains("bn_stats"));  // the default mode: run.json as before
  f.conv.bn_stats_mode = "auto";
  f.conv.bn_stats_fused = 5;
  f.conv.bn_stats_separate = 8;
  f.conv.bn_stats_fallback = 1;
  f.conv.bn_stats_fallback_reason = "conv5: no engine";
  const std::string text = run_facts_json(f);
  CHECK_THAT(text,
             Catch::Contains("\"bn_stats\": {\"mode\": \"auto\", \"fused\": 5, \"separate\": 8, \"fallback\": 1"));
  Result<RunFacts> back = run_facts_parse(text, "run.json");
  REQUIRE(back.ok());
  CHECK(back->conv.bn_stats_mode == "auto");
  CHECK(back->conv.bn_stats_fused == 5);
  CHECK(back->conv.bn_stats_separate == 8);
  CHECK(back->conv.bn_stats_fallback == 1);
  CHECK(back->conv.bn_stats_fallback_reason == "conv5: no engine");
  f.conv.bn_apply_mode = "prologue";
  f.conv.bn_apply_folded = 4;
  const std::string with_apply = run_facts_json(f);
  CHECK_THAT(with_apply, Catch::Contains("\"apply\": {\"mode\": \"prologue\", \"folded\": 4, \"fallback\": 0"));
  Result<RunFacts> back2 = run_facts_parse(with_apply, "run.json");
  REQUIRE(back2.ok());
  CHECK(back2->conv.bn_apply_mode == "prologue");
  CHECK(back2->conv.bn_apply_folded == 4);
  CHECK(back->conv.bn_apply_mode == "separate");  // the object without "apply"
  Result<RunFacts> old = run_facts_parse(plain, "run.json");
  REQUIRE(old.ok());
  CHECK(old->conv.bn_stats_mode == "separate");
  CHECK(old->conv.bn_grad_folded == 0);
  CHECK_THAT(plain, !Catch::Contains("bn_grad_folded"));  // written only when a batch norm's dx was folded
  f.conv.bn_grad_folded = 2;
  const std::string with_grad = run_facts_json(f);
  CHECK_THAT(with_grad, Catch::Contains("\"bn_grad_folded\": 2"));
  Result<RunFacts> back3 = run_facts_parse(with_grad, "run.json");
  REQUIRE(back3.ok());
  CHECK(back3->conv.bn_grad_folded == 2);
  Result<RunFacts> bad_grad =
      run_facts_parse(R"({"backend": "cuda", "conv_algorithms": {"from_cache": 0, "from_heuristics": 1,
      "bn_grad_folded": 1.5}})",
                      "run.json");
  REQUIRE_FALSE(bad_grad.ok());
  CHECK_THAT(bad_grad.error_text(), Catch::Contains("conv_algorithms.bn_grad_folded"));
  CHECK_THAT(with_grad, !Catch::Contains("bn_backward"));  // train.conv_bn_backward: separate writes none
  CHECK(back3->conv.wgconv_dgrad == 0);
  CHECK_THAT(with_grad, !Catch::Contains("wgconv_dgrad"));  // written only when a data gradient ran on wgconv
  f.conv.wgconv_dgrad = 2;
  const std::string with_wg = run_facts_json(f);
  CHECK_THAT(with_wg, Catch::Contains("\"wgconv_dgrad\": 2"));
  Result<RunFacts> back_wg = run_facts_parse(with_wg, "run.json");
  REQUIRE(back_wg.ok());
  CHECK(back_wg->conv.wgconv_dgrad == 2);
  Result<RunFacts> bad_wg = run_facts_parse(
      R"({"backend": "cuda", "conv_algorithms": {"from_cache": 0, "from_heuristics": 1, "wgconv_dgrad": -1}})",
      "run.json");
  REQUIRE_FALSE(bad_wg.ok());
  CHECK_THAT(bad_wg.error_text(), Catch::Contains("conv_algorithms.wgconv_dgrad"));
  f.conv.wgconv_dgrad = 0;
  CHECK_THAT(with_grad, !Catch::Contains("wgconv_fwd"));  // train.conv_wgconv fwd / both only
  f.conv.wgconv_fwd = 1;
  f.conv.wgconv_bn_folded = 1;
  const std::string with_fwd = run_facts_json(f);
  CHECK_THAT(with_fwd, Catch::Contains("\"wgconv_fwd\": 1") && Catch::Contains("\"wgconv_bn_folded\": 1"));
  Result<RunFacts> back_fwd = run_facts_parse(with_fwd, "run.json");
  REQUIRE(back_fwd.ok());
  CHECK((back_fwd->conv.wgconv_fwd == 1 && back_fwd->conv.wgconv_bn_folded == 1));
  Result<RunFacts> bad_fwd = run_facts_parse(
      R"({"backend": "cuda", "conv_algorithms": {"from_cache": 0, "from_heuristics": 1, "wgconv_bn_folded": "x"}})",
      "run.json");
  REQUIRE_FALSE(bad_fwd.ok());
  CHECK_THAT(bad_fwd.error_text(), Catch::Contains("conv_algorithms.wgconv_bn_folded"));
  CHECK_THAT(with_fwd, !Catch::Contains("wgconv_bn_unwritten"));  // train.conv_wgconv all's folds only
  f.conv.wgconv_bn_unwritten = 1;
  const std::string with_unwritten = run_facts_json(f);
  CHECK_THAT(with_unwritten, Catch::Contains("\"wgconv_bn_unwritten\": 1"));
  Result<RunFacts> back_unwritten = run_facts_parse(with_unwritten, "run.json");
  REQUIRE(back_unwritten.ok());
  CHECK(back_unwritten->conv.wgconv_bn_unwritten == 1);
  f.conv.wgconv_fwd = f.conv.wgconv_bn_folded = f.conv.wgconv_bn_unwritten = 0;
  // Counts written only when > 0 (train.conv_wgconv wgrad / all; train.conv_dgrad_fwd), read back, a fraction refused.
  for (auto [key, field] : {std::pair{"wgconv_wgrad", &ConvAlgoSources::wgconv_wgrad},
                            std::pair{"dgrad_fwd", &ConvAlgoSources::dgrad_fwd}}) {
    CAPTURE(key);
    CHECK_THAT(with_grad, !Catch::Contains(key));
    f.conv.*field = 3;
    const std::string with = run_facts_json(f);
    CHECK_THAT(with, Catch::Contains("\"" + std::string(key) + "\": 3"));
    Result<RunFacts> back = run_facts_parse(with, "run.json");
    REQUIRE(back.ok());
    CHECK(back->conv.*field == 3);
    Result<RunFacts> bad = run_facts_parse(R"({"backend": "cuda", "conv_algorithms": {"from_cache": 0, )"
                                           R"("from_heuristics": 1, ")" + std::string(key) + R"(": 1.5}})",
                                           "run.json");
    REQUIRE_FALSE(bad.ok());
    CHECK_THAT(bad.error_text(), Catch::Contains("conv_algorithms." + std::string(key)));
    f.conv.*field = 0;
  }
  CHECK_THAT(with_grad, !Catch::Contains("graph_engines"));  // written only when a plan runs a graph-API config
  f.conv.graph_engines = 3;
  const std::string with_engines = run_facts_json(f);
  CHECK_THAT(with_engines, Catch::Contains("\"graph_engines\": 3"));
  Result<RunFacts> back_engines = run_facts_parse(with_engines, "run.json");
  REQUIRE(back_engines.ok());
  CHECK(back_engines->conv.graph_engines == 3);
  CHECK(old->conv.graph_engines == 0);
  Result<RunFacts> bad_engines = run_facts_parse(
      R"({"backend": "cuda", "conv_algorithms": {"from_cache": 1, "from_heuristics": 0, "graph_engines": -1}})",
      "run.json");
  REQUIRE_FALSE(bad_engines.ok());
  CHECK_THAT(bad_engines.error_text(), Catch::Contains("conv_algorithms.graph_engines"));
  f.conv.graph_engines = 0;
  f.conv.bn_bwd_mode = "fused";
  f.conv.bn_bwd_fused = 7;
  f.conv.bn_bwd_separate = 6;
  f.conv.bn_bwd_fallback = 1;
  f.conv.bn_bwd_fallback_reason = "features_3.grad_input: no engine";
  const std::string with_bwd = run_facts_json(f);
  CHECK_THAT(with_bwd, Catch::Contains("\"bn_backward\": {\"mode\": \"fused\", \"fused\": 7, \"separate\": 6, "
                                       "\"fallback\": 1"));
  Result<RunFacts> back4 = run_facts_parse(with_bwd, "run.json");
  REQUIRE(back4.ok());
  CHECK(back4->conv.bn_bwd_mode == "fused");
  CHECK(back4->conv.bn_bwd_fused == 7);
  CHECK(back4->conv.bn_bwd_separate == 6);
  CHECK(back4->conv.bn_bwd_fallback == 1);
  CHECK(back4->conv.bn_bwd_fallback_reason == "features_3.grad_input: no engine");
  CHECK(back3->conv.bn_bwd_mode == "separate");
  Result<RunFacts> bad = run_facts_parse(
      R"({"backend": "cuda", "conv_algorithms": {"from_cache": 0, "from_heuristics": 1, "bn_stats": {"mode": "auto",
      "fused": -2, "separate": 0, "fallback": 0}}})",
      "run.json");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error_text(), Catch::Contains("conv_algorithms.bn_stats.fused"));
}

TEST_CASE("run.json's device memory round-trips and becomes the report's peak memory (all allocations)",
          "[report]") {
  RunFacts f;
  f.backend = "cuda";
  f.has_memory = true;
  f.memory.plan = int64_t{10460} << 20;
  f.memory.amp_weight_copy = int64_t{49} << 20;
  f.memory.workspaces = int64_t{50} << 20;
  f.memory.resident_data = int64_t{992} << 20;
  const std::string text = run_facts_json(f);
  CHECK_THAT(text, Catch::Contains("\"total_bytes\": " + std::to_string(f.memory.total())));
  Result<RunFacts> back = run_facts_parse(text, "run.json");
  REQUIRE(back.ok());
  CHECK(back->has_memory);
  CHECK(back->memory.plan == f.memory.plan);
  CHECK(back->memory.amp_weight_copy == f.memory.amp_weight_copy);
  CHECK(back->memory.workspaces == f.memory.workspaces);
  CHECK(back->memory.resident_data == f.memory.resident_data);
  CHECK_FALSE(back->has_conv);
  Result<RunFacts> none = run_facts_parse(R"({"backend": "cpu"})", "run.json");
  REQUIRE(none.ok());
  CHECK_FALSE(none->has_memory);
  Result<RunFacts> bad = run_facts_parse(R"({"backend": "cuda", "device_memory": {"plan_bytes": -1}})", "run.json");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error_text(), Catch::Contains("device_memory.plan_bytes"));

  // A synthetic run directory whose run.json has device_memory: the report counts every allocation and says so.
  const fs::path d = temp_dir("run_memory");
  write_synthetic_run_dir(d / "t", {2000, 3000, 3000}, 2.0 * 1073741824);  // plan.txt: 2 GiB
  std::ofstream(d / "t" / "run.json") << text;
  Result<ToolResult> t = report_read_run_dir((d / "t").string());
  INFO((t.ok() ? std::string() : t.error_text()));
  REQUIRE(t.ok());
  REQUIRE(t->runs.size() == 1);
  CHECK(t->runs[0].peak_memory_bytes == Approx(static_cast<double>(f.memory.total())));
  CHECK_THAT(*recipe_find(t->recipe, "memory_measure"), Catch::StartsWith("every device allocation of the run"));
  fs::remove_all(d);
}

TEST_CASE("synthetic-data runs give a throughput report: images/s, ms/step and peak memory, no accuracy",
          "[report][cli]") {
  const fs::path d = temp_dir("throughput");
  // epochs 2..3 at 3000 and 3000 img/s: 3000 steady, 1000 * 256 / 3000 = 85.33 ms/step; val top-1 0.0123 (random)
  write_synthetic_run_dir(d / "trctl_vgg", {2000, 3000, 3000}, 2.0 * 1073741824);
  write_throughput_json(d / "eager.json", "pytorch eager", {1000, 1200, 1100});
  Run r = run_trctl("report " + (d / "trctl_vgg").string() + " --vs " + (d / "eager.json").string() + " -o " +
                    (d / "rep").string() + " --no-plots");
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("throughput only (synthetic data)"));
  const std::string md = slurp(d / "rep" / "report.md");
  CHECK_THAT(md, Catch::Contains("Throughput only: every input trained on synthetic data"));
  CHECK_THAT(md, Catch::Contains("| tool | runs | images/s (steady) | ms/step (steady) | peak memory |"));
  CHECK_THAT(md, Catch::Contains("| trctl | 1 | 3000 | 85.33 | 2.00 GiB |"));
  // No ms_per_step in the result: 1000 * batch 256 / images/s; memory as stated.
  CHECK_THAT(md, Catch::Contains("| pytorch eager | 3 | 1100 (1000–1200) | 232.73 (213.33–256.00) | "
                                 "512 MiB (512–512) |"));
  CHECK_THAT(md, Catch::Contains("| *trctl / pytorch eager* | — | 2.73× | 0.37× | — |"));
  CHECK_THAT(md, !Catch::Contains("top-1") && !Catch::Contains("1.23") && !Catch::Contains("epochs/s"));
  CHECK_THAT(md, !Catch::Contains("J/step"));  // neither side measured its energy: no column
  CHECK_THAT(md, Catch::Contains("| epochs | 3 | 3 timed windows | (info: throughput report: no effect on a training "
                                 "step) |"));
  CHECK_THAT(md, Catch::Contains("| peak memory measure | the memory plan (plan.txt"));
  CHECK_THAT(slurp(d / "rep" / "report.html"), !Catch::Contains("top-1"));
  fs::remove_all(d);
}

TEST_CASE("a throughput report shows joules per step where an input measured them, with the watts they imply",
          "[report][cli]") {
  const fs::path d = temp_dir("joules");
  // trctl: epochs 2..3 spent 950 and 925 J over 25 steps each = 37.50 J per step; at 85.33 ms per step = 439 W
  write_synthetic_run_dir(d / "trctl_vgg", {2000, 3000, 3000}, 2.0 * 1073741824, {900, 950, 925});
  write_throughput_json(d / "eager.json", "pytorch eager", {1000, 1200, 1100}, "", {50, 54, 52});
  write_throughput_json(d / "compiled.json", "pytorch compiled", {1500});  // not measured: a dash
  Run r = run_trctl("report " + (d / "trctl_vgg").string() + " --vs " + (d / "eager.json").string() + " --vs " +
                    (d / "compiled.json").string() + " -o " + (d / "rep").string() + " --no-plots");
  INFO(r.err);
  REQUIRE(r.code == 0);
  const std::string md = slurp(d / "rep" / "report.md");
  CHECK_THAT(md, Catch::Contains("| tool | runs | images/s (steady) | ms/step (steady) | peak memory | "
                                 "J/step (steady) |"));
  CHECK_THAT(md, Catch::Contains("| trctl | 1 | 3000 | 85.33 | 2.00 GiB | 37.50 at 439 W |"));
  // median 52 J over a median 232.73 ms per step = 223 W
  CHECK_THAT(md, Catch::Contains("| pytorch eager | 3 | 1100 (1000–1200) | 232.73 (213.33–256.00) | "
                                 "512 MiB (512–512) | 52.00 (50.00–54.00) at 223 W |"));
  CHECK_THAT(md, Catch::Contains("| pytorch compiled | 1 | 1500 | 170.67 | 512 MiB | — |"));
  CHECK_THAT(md, Catch::Contains("| *trctl / pytorch eager* | — | 2.73× | 0.37× | — | 0.72× |"));
  CHECK_THAT(md, Catch::Contains("| *trctl / pytorch compiled* | — | 2.00× | 0.50× | — | — |"));
  // A steady epoch without its energy: no figure for the run (epoch 1 alone unmeasured does not matter).
  write_synthetic_run_dir(d / "partial", {2000, 3000, 3000}, 1e9, {900, 950});
  Result<ToolResult> t = report_read_run_dir((d / "partial").string());
  REQUIRE(t.ok());
  CHECK_FALSE(std::isfinite(t->runs.at(0).j_per_step));
  write_synthetic_run_dir(d / "warm", {2000, 3000, 3000}, 1e9, {std::nan(""), 950, 925});
  t = report_read_run_dir((d / "warm").string());
  REQUIRE(t.ok());
  CHECK(t->runs.at(0).j_per_step == Approx(37.5));
  fs::remove_all(d);
}

TEST_CASE("a synthetic-data input next to real-data runs shows its throughput and no accuracy", "[report][cli]") {
  const fs::path d = temp_dir("mixed");
  write_run_dir(d / "mlp", {{0.80, 2.0}, {0.85, 1.0}});
  write_throughput_json(d / "syn.json", "pytorch synthetic", {5000});
  Run r = run_trctl("report " + (d / "mlp").string() + " --vs " + (d / "syn.json").string() + " -o " +
                    (d / "rep").string() + " --no-plots");
  INFO(r.err);
  REQUIRE(r.code == 0);
  const std::string md = slurp(d / "rep" / "report.md");
  CHECK_THAT(md, Catch::Contains("Time-to-accuracy threshold: 84.00 %"));  // the real-data run's final - 1 pt
  CHECK_THAT(md, Catch::Contains("| pytorch synthetic | 1 | — | 5000 | synthetic data | synthetic data | synthetic "
                                 "data | synthetic data |"));
  CHECK_THAT(md, Catch::Contains("| *trctl / pytorch synthetic* | — | — | 12.00× | — | — | — | — |"));
  fs::remove_all(d);
}

TEST_CASE("a synthetic run dir read alone: accuracies dropped, ms/step and the planned bytes kept", "[report]") {
  const fs::path d = temp_dir("synread");
  write_synthetic_run_dir(d / "run", {2000, 4000, 4000}, 1e9);
  Result<ToolResult> t = report_read_run_dir((d / "run").string());
  REQUIRE(t.ok());
  CHECK(t->synthetic);
  const RunData& run = t->runs.at(0);
  CHECK_FALSE(std::isfinite(run.final_val_top1));
  CHECK_FALSE(std::isfinite(run.best_val_top1));
  for (const EpochPoint& e : run.epochs) CHECK_FALSE((std::isfinite(e.val_top1) || std::isfinite(e.train_top1)));
  CHECK(run.images_per_s_steady == Approx(4000));
  CHECK(run.ms_per_step == Approx(64.0));
  CHECK(run.peak_memory_bytes == Approx(1e9));
  CHECK(report_throughput_only({t.value()}));
  fs::remove_all(d);
}

TEST_CASE("metrics.jsonl's epoch records carry the board's energy when measured, no energy keys otherwise",
          "[report]") {
  const fs::path d = temp_dir("energy");
  RunOutputs out;
  REQUIRE(out.open(d.string()).ok());
  EpochRecord r;
  r.epoch = 1;
  r.step = 25;
  r.steps = 25;
  r.images_per_s = 4900;
  r.epoch_seconds = r.seconds = 1.3;
  r.train_seconds = 1.25;
  out.epoch(r);  // not measured (CPU): no energy keys
  r.epoch = 2;
  r.step = 50;
  r.energy_j = 885.125;
  r.train_seconds = 1.296;  // power_w: 885.125 J / 1.296 s = 683.0 W
  out.epoch(r);
  const std::string m = slurp(d / "metrics.jsonl");
  const size_t second = m.find("\"epoch\":2");
  REQUIRE(second != std::string::npos);
  CHECK(m.substr(0, second).find("energy_j") == std::string::npos);
  CHECK_THAT(m.substr(0, second),
             Catch::Contains("\"epoch_seconds\":1.300,\"train_seconds\":1.250,\"seconds\":1.300"));
  CHECK_THAT(m.substr(second), Catch::Contains(",\"energy_j\":885.125,\"power_w\":683.0,\"steps\":25}\n"));
  fs::remove_all(d);
}

TEST_CASE("a result whose measurement ended with a non-finite loss carries a warning: a diverged model's timing",
          "[report]") {
  const fs::path d = temp_dir("diverged");
  write_throughput_json(d / "nan.json", "pytorch compiled", {3500}, R"("last_loss": null, "loss_finite": false)");
  write_throughput_json(d / "ok.json", "pytorch compiled", {3500}, R"("last_loss": 6.9, "loss_finite": true)");
  write_throughput_json(d / "none.json", "pytorch compiled", {3500});
  Result<ToolResult> nan = report_read_result_json((d / "nan.json").string());
  REQUIRE(nan.ok());
  REQUIRE(nan->notes.size() == 1);
  CHECK_THAT(nan->notes[0], Catch::Contains("pytorch compiled's loss was not finite") &&
                                Catch::Contains("no training speed"));
  for (const char* ok : {"ok.json", "none.json"}) {
    Result<ToolResult> t = report_read_result_json((d / ok).string());
    REQUIRE(t.ok());
    CHECK(t->notes.empty());
  }
  // The note reaches the report as a warning under its tool's results.
  write_synthetic_run_dir(d / "run", {2000, 4000, 4000}, 1e9);
  Run r = run_trctl("report " + (d / "run").string() + " --vs " + (d / "nan.json").string() + " -o " +
                    (d / "rep").string() + " --no-plots");
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(slurp(d / "rep" / "report.md"), Catch::Contains("**warning**: pytorch compiled's loss was not finite"));
  fs::remove_all(d);
}

TEST_CASE("bad inputs exit 2 with a message naming the file", "[report][cli]") {
  const fs::path d = temp_dir("bad");
  const std::string out = " -o " + (d / "rep").string() + " --no-plots";
  Run r = run_trctl("report " + (d / "nope").string() + out);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains((d / "nope").string() + ": no such run directory"));

  write_run_dir(d / "nometrics", {{0.8, 1.0}});
  fs::remove(d / "nometrics" / "metrics.jsonl");
  fs::remove(d / "nometrics" / "summary.csv");
  r = run_trctl("report " + (d / "nometrics").string() + out);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("nometrics: no metrics"));

  write_run_dir(d / "noepochs", {});
  r = run_trctl("report " + (d / "noepochs").string() + out);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("metrics.jsonl: no epoch records"));

  std::ofstream(d / "bad.json") << "{\"tool\": \"pytorch\",\n \"runs\": [1,]}";
  r = run_trctl("report --vs " + (d / "bad.json").string() + out);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains((d / "bad.json").string() + ":offset 32 (line 2, column 13): malformed JSON"));

  std::ofstream(d / "notool.json") << "{\"framework\": \"pytorch\", \"records\": []}";
  r = run_trctl("report --vs " + (d / "notool.json").string() + out);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("notool.json: no \"tool\" string"));

  fs::create_directories(d / "ckpt");
  std::ofstream(d / "ckpt" / "weights.safetensors") << "x";
  r = run_trctl("report " + (d / "ckpt").string() + out);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("ckpt: a checkpoint directory, not a run directory"));

  r = run_trctl("report " + (d / "notool.json").string() + out);  // a file where a run directory belongs
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("notool.json: not a directory"));
  r = run_trctl("report --vs " + (d / "ckpt").string() + out);  // a directory where a result file belongs
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("ckpt: a directory: --vs takes result JSON files"));
  CHECK_FALSE(fs::exists(d / "rep" / "report.md"));
  fs::remove_all(d);
}

TEST_CASE("without gnuplot the report exits 2 and says how to get it", "[report][cli]") {
  const fs::path d = temp_dir("nognuplot");
  write_run_dir(d / "run", {{0.8, 1.0}});
  Run r = run_trctl("report " + (d / "run").string() + " -o " + (d / "rep").string(), "PATH=/nonexistent");
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("gnuplot: not found on PATH") && Catch::Contains("apt-get install gnuplot-nox"));
  r = run_trctl("report " + (d / "run").string() + " -o " + (d / "rep").string(), "TRCTL_GNUPLOT=/nonexistent/gnuplot");
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("TRCTL_GNUPLOT: '/nonexistent/gnuplot' is not an executable file"));
  CHECK_FALSE(fs::exists(d / "rep" / "report.md"));
  fs::remove_all(d);
}

TEST_CASE("the plot script overlays every tool's runs on the same axes", "[report]") {
  ToolResult a, b;
  a.tool = a.name = "trctl";
  b.tool = b.name = "pytorch";
  for (ToolResult* t : {&a, &b}) {
    RunData run;
    run.source = t->name;
    for (int e = 1; e <= 3; ++e) {
      EpochPoint p;
      p.epoch = e;
      p.train_loss = p.val_loss = 1.0 / e;
      p.val_top1 = 0.5 + 0.1 * e;
      p.lr = 1e-3;
      p.images_per_s = t == &a ? 100000 : 5000;
      run.epochs.push_back(p);
    }
    t->runs = {run, run};
  }
  const std::string gp = plot_script({a, b});
  CHECK_THAT(gp, Catch::Contains("$g0r1 << EOD") && Catch::Contains("$g1r1 << EOD"));
  CHECK_THAT(gp, Catch::Contains("title \"trctl val (2 runs)\"") && Catch::Contains("title \"pytorch val (2 runs)\""));
  CHECK_THAT(gp, Catch::Contains("set logscale y"));  // throughput 20x apart
  // No train top-1 in the data: the accuracy figure plots validation only, no empty series.
  CHECK_THAT(gp, !Catch::Contains("using 1:4"));
  for (const char* png : {"loss.png", "accuracy.png", "lr.png", "throughput.png"})
    CHECK_THAT(gp, Catch::Contains(std::string("set output \"") + png + "\""));
}

TEST_CASE("a throughput report's plots: bars of steady images/s and images/s per epoch, no accuracy", "[report]") {
  ToolResult a, b;
  a.tool = a.name = "trctl";
  b.tool = "pytorch";
  b.name = "pytorch eager";
  a.synthetic = b.synthetic = true;
  RunData ra;
  ra.source = "trctl_vgg";
  for (int e = 1; e <= 3; ++e) {
    EpochPoint p;
    p.epoch = e;
    p.train_loss = 6.9;
    p.images_per_s = e == 1 ? 2000 : 3600;
    ra.epochs.push_back(p);
  }
  report_run_finalize(ra);
  a.runs = {ra};
  for (double ips : {1200.0, 1100.0, 1300.0}) {
    RunData rb;
    rb.source = "torch_eager.json";
    rb.images_per_s_steady = ips;
    b.runs.push_back(rb);
  }
  const std::string gp = plot_script({a, b});
  CHECK_THAT(gp, Catch::Contains("set output \"throughput.png\"") &&
                     Catch::Contains("set output \"throughput_epochs.png\""));
  CHECK_THAT(gp, !Catch::Contains("accuracy.png") && !Catch::Contains("loss.png") && !Catch::Contains("lr.png"));
  CHECK_THAT(gp, Catch::Contains("$bars0 << EOD\n0 3600 3600 3600 0.3\nEOD"));
  CHECK_THAT(gp, Catch::Contains("$bars1 << EOD\n1 1200 1100 1300 0.3\nEOD"));  // median, min, max
  CHECK_THAT(gp, Catch::Contains("set xtics (\"trctl\" 0, \"pytorch eager\" 1)"));
  const std::vector<PlotRef> refs = plot_refs(true);
  REQUIRE(refs.size() == 2);
  CHECK(refs[0].file == "throughput.png");
  CHECK(refs[1].file == "throughput_epochs.png");
  CHECK(plot_refs(false).size() == 4);
}
