// `trctl bench compile` and `trctl bench CFG` on the CPU write trctl-bench/1 (docs/bench.md): the schema's fields,
// positive figures, exact flags on the compile figures, the CPU step's reference ratio; the reader's checks; the
// --layers table's replay-vs-node-sum line.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "runtime/report/bench_result.h"
#include "runtime/train/bench_suites.h"
#include "runtime/train/profile_report.h"

namespace fs = std::filesystem;
using namespace trctl;

namespace {

fs::path temp_dir(const std::string& tag) {
  fs::path d = fs::temp_directory_path() / ("trctl_bench_" + tag + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

int run_trctl(const std::string& args, const fs::path& dir) {
  const std::string cmd = std::string(TRCTL_BINARY) + " " + args + " >" + (dir / "out").string() + " 2>" +
                          (dir / "err").string();
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::string cfg(const std::string& name) { return std::string(TRCTL_SOURCE_DIR) + "/configs/" + name; }

std::map<std::string, BenchMetric> by_name(const BenchResult& r) {
  std::map<std::string, BenchMetric> m;
  for (const BenchMetric& x : r.metrics) m[x.name] = x;
  return m;
}

void check_header(const BenchResult& r, const std::string& suite, const std::string& backend) {
  CHECK(r.suite == suite);
  CHECK(r.machine.backend == backend);
  CHECK(r.machine.host_cores > 0);
  CHECK(r.machine.gpu.empty());
  CHECK_FALSE(r.commit.empty());
  CHECK(r.created.size() == 20);  // 2026-12-03T07:34:01Z
  CHECK_FALSE(r.metrics.empty());
}

}  // namespace

TEST_CASE("bench compile writes exact IR and plan figures per config", "[bench][cli]") {
  const fs::path d = temp_dir("compile");
  const std::string json = (d / "c.json").string();
  const std::string configs = cfg("mlp_fmnist.yaml") + " " + cfg("cnn_fmnist.yaml");
  REQUIRE(run_trctl("bench compile " + configs + " --json " + json, d) == 0);
  Result<BenchResult> r = bench_result_read(json);
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  check_header(r.value(), "compile", "compiler");
  CHECK(r->sources.size() == 2);
  auto m = by_name(r.value());
  for (const char* name : {"mlp_fmnist/nodes/train", "mlp_fmnist/nodes/eval", "mlp_fmnist/values",
                           "mlp_fmnist/parameters", "mlp_fmnist/bytes/weights", "mlp_fmnist/bytes/activations",
                           "mlp_fmnist/bytes/total", "mlp_fmnist/amp/bytes/total", "cnn_fmnist/nodes/train",
                           "cnn_fmnist/bytes/total"}) {
    INFO(name);
    REQUIRE(m.count(name) == 1);
    CHECK(m[name].value > 0);
    CHECK(m[name].exact);
    CHECK(m[name].check);
  }
  CHECK(m["mlp_fmnist/parameters"].value == 1462538);  // 784*1024+1024 + 1024*512+512 + 512*256+256 + 256*10+10
  CHECK(m["mlp_fmnist/bytes/activations"].value < m["mlp_fmnist/bytes/activations_naive"].value);  // reuse
  REQUIRE(m.count("mlp_fmnist/compile_ms") == 1);
  CHECK_FALSE(m["mlp_fmnist/compile_ms"].check);  // wall time: shown, not compared
  fs::remove_all(d);
}

TEST_CASE("bench compile figures are the same in every run", "[bench][cli]") {
  const fs::path d = temp_dir("compile2");
  REQUIRE(run_trctl("bench compile " + cfg("mlp_fmnist.yaml") + " --json " + (d / "a.json").string(), d) == 0);
  REQUIRE(run_trctl("bench compile " + cfg("mlp_fmnist.yaml") + " --json " + (d / "b.json").string(), d) == 0);
  Result<BenchResult> a = bench_result_read((d / "a.json").string()), b = bench_result_read((d / "b.json").string());
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(a->metrics.size() == b->metrics.size());
  for (size_t i = 0; i < a->metrics.size(); ++i)
    if (a->metrics[i].exact) CHECK(a->metrics[i].value == b->metrics[i].value);
  fs::remove_all(d);
}

TEST_CASE("bench CFG on the cpu backend times the step against the reference GEMM", "[bench][cli]") {
  const fs::path d = temp_dir("model");
  const std::string json = (d / "m.json").string();
  const std::string args = " train.threads=1 data.train_subset=400 --steps 3 --warmup 1 --json " + json;
  REQUIRE(run_trctl("bench " + cfg("mlp_fmnist.yaml") + args, d) == 0);
  Result<BenchResult> r = bench_result_read(json);
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  check_header(r.value(), "model", "cpu");
  auto m = by_name(r.value());
  for (const char* name : {"step_ms", "images_per_s", "ref_gemm_ms", "step_over_ref_gemm"}) {
    INFO(name);
    REQUIRE(m.count(name) == 1);
    CHECK(m[name].value > 0);
    CHECK_FALSE(m[name].exact);
  }
  CHECK(m["step_over_ref_gemm"].check);  // the machine-independent figure is the one compared
  CHECK_FALSE(m["step_ms"].check);
  CHECK(m["images_per_s"].higher_better);
  CHECK_FALSE(m["step_ms"].higher_better);
  fs::remove_all(d);
}

TEST_CASE("bench compile with a bad config exits 2 and writes nothing", "[bench][cli]") {
  const fs::path d = temp_dir("bad");
  CHECK(run_trctl("bench compile " + (d / "missing.yaml").string() + " --json " + (d / "x.json").string(), d) == 2);
  CHECK_FALSE(fs::exists(d / "x.json"));
  fs::remove_all(d);
}

TEST_CASE("the bench result reader lists every schema violation", "[bench]") {
  const fs::path d = temp_dir("reader");
  const std::string path = (d / "bad.json").string();
  std::ofstream(path) << R"({"schema": "trctl-bench/1", "suite": "model", "sources": ["a"], "commit": "x",
    "machine": {"host_cores": 2, "backend": "cpu"},
    "metrics": [{"name": "a", "value": 1, "unit": "ms", "better": "up"},
                {"name": "a", "value": "fast", "unit": "ms", "better": "lower"}]})";
  Result<BenchResult> r = bench_result_read(path);
  REQUIRE_FALSE(r.ok());
  CHECK(r.errors().size() == 3);  // better "up", a repeated name, a value that is not a number
  CHECK_THAT(r.error_text(), Catch::Contains("better") && Catch::Contains("twice") && Catch::Contains("value"));
  fs::remove_all(d);
}

TEST_CASE("a bench result survives writing and reading", "[bench]") {
  const fs::path d = temp_dir("roundtrip");
  BenchResult w = bench_result_begin("compile", {"configs/a \"quoted\".yaml"}, "compiler");
  w.add("a/bytes/total", 12345678901.0, "bytes", false, true);
  w.add("ratio", 9.25, "ratio", false);
  w.add("wall_ms", 3.5, "ms", false, false, false);
  w.details.emplace_back("params", "{\"k\": 1}");
  REQUIRE(bench_result_write((d / "r.json").string(), w).ok());
  Result<BenchResult> r = bench_result_read((d / "r.json").string());
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  CHECK(r->sources == w.sources);
  REQUIRE(r->metrics.size() == 3);
  CHECK(r->metrics[0].value == 12345678901.0);
  CHECK(r->metrics[0].exact);
  CHECK(r->metrics[1].value == 9.25);
  CHECK_FALSE(r->metrics[2].check);
  fs::remove_all(d);
}

TEST_CASE("the layers table puts the graph replay next to the node sum and says what the graph saves", "[bench]") {
  StepProfile p;
  p.graph_ms = 0.5;
  p.reps = 10;
  p.nodes = {{"augment", "batch_fetch", "(200, 28, 28, 1)", 0.25, 0, 1e6, {}},
             {"fc1+relu1", "linear", "(200, 1024)", 0.5, 3.2e8, 0, {}},
             {"optimizer", "adamw", "(1462538)", 0.25, 0, 2e7, {}}};
  const std::string t = profile_table(p, 200, 5);
  CHECK_THAT(t, Catch::StartsWith("step (captured graph replay): 0.500 ms = 400000 img/s at batch 200; nodes run "
                                  "one by one: 1.000 ms (3 nodes, 10 reps each)\n"));
  CHECK_THAT(t, Catch::Contains("\ngraph replay vs node sum: 0.500 ms vs 1.000 ms = 0.50; the graph saves 0.500 ms "
                                "per step"));
  p.graph_ms = 1.5;  // slower than its nodes (e.g. a capture that serialised streams): said so, not hidden
  CHECK_THAT(profile_table(p, 200, 5), Catch::Contains("= 1.50; the graph costs 0.500 ms per step"));
}

TEST_CASE("the layers table and JSON give the sustained replay time next to the burst's", "[bench]") {
  StepProfile p;
  p.graph_ms = 31.872;
  p.reps = 10;
  p.nodes = {{"augment", "batch_fetch", "(256, 224, 224, 3)", 0.16, 0, 7.7e7, {}}};
  CHECK_THAT(profile_table(p, 256, 5), !Catch::Contains("sustained"));  // not measured (--sustain 0): no line
  p.sustained_ms = 32.35;
  p.sustained_reps = 31;
  p.sustain_s = 3.02;
  CHECK_THAT(profile_table(p, 256, 5),
             Catch::Contains("\nsustained: 32.350 ms = 7913 img/s over 31 replays after 3.0 s of replays (+1.5 % vs "
                             "the burst: slower under sustained load, e.g. the card's power cap)"));
  StepProfile faster = p;  // run 51's VGG16-BN: the sustained replays ran faster than the burst
  faster.sustained_ms = 30.0;
  CHECK_THAT(profile_table(faster, 256, 5), Catch::Contains("(-5.9 % vs the burst: faster once the clocks have settled"));
  BenchResult r;
  profile_metrics(p, 256, &r);
  bool seen = false;
  for (const BenchMetric& m : r.metrics) {
    if (m.name != "step_ms_sustained") continue;
    seen = true;
    CHECK(m.value == Approx(32.35));
    CHECK_FALSE(m.check);  // shown, not compared: the device baselines predate it
  }
  CHECK(seen);
}

TEST_CASE("the layers table and JSON give the step's and the nodes' energy when measured (--energy)", "[bench]") {
  StepProfile p;
  p.graph_ms = 50.0;
  p.reps = 10;
  p.nodes = {{"features_3", "conv2d", "(256, 224, 224, 64)", 2.0, 2.4e12, 0, {}},
             {"features_1+features_2", "batch_norm", "(256, 224, 224, 64)", 1.0, 0, 3.3e9, {}},
             {"optimizer.sgd", "optimizer_step", "(64, 3, 3, 3)", 0.5, 0, 1.1e9, {}}};
  CHECK_THAT(profile_table(p, 256, 5), !Catch::Contains("energy"));  // not measured (--energy 0): no section
  p.nodes[0].mj = 1400;  // 560 W over its energy runs: 2.5 ms per run there (the power cap), 2 ms in the burst
  p.nodes[0].w = 560;
  p.nodes[1].mj = 450;   // 450 W for 1 ms
  p.nodes[2].mj = 150;   // 300 W for 0.5 ms
  p.step_mj = 34000;
  p.step_w = 680;
  p.energy_s = 1.0;
  const std::string t = profile_table(p, 256, 5);
  CHECK_THAT(t, Catch::Contains("\nenergy (the board's counter over 1.0 s of back-to-back runs each): step 34.00 J "
                                "per replay at 680 W; nodes one by one 2.00 J\n"));
  CHECK_THAT(t, Catch::Contains("      J   share      W  loaded ms  burst ms\n"));
  CHECK_THAT(t, Catch::Contains("  conv2d                           1    1.400  70.0%    560      2.500     2.000\n"));
  // no power recorded (an older profile): the burst's ms stands for the loaded time
  CHECK_THAT(t, Catch::Contains("  batch_norm                       1    0.450  22.5%    450      1.000     1.000\n"));
  CHECK_THAT(t, Catch::Contains("most energy: 5 nodes (W and loaded ms over its energy runs; burst ms)\n  features_3 "));
  CHECK_THAT(t, !Catch::Contains("state after the profile"));  // not read: no line
  BenchResult r;
  profile_metrics(p, 256, &r);
  std::map<std::string, BenchMetric> m = by_name(r);
  REQUIRE(m.count("step_j"));
  CHECK(m["step_j"].value == Approx(34.0));
  CHECK_FALSE(m["step_j"].check);
  CHECK(m["step_w"].value == Approx(680));
  std::string nodes;
  for (const auto& [k, v] : r.details)
    if (k == "nodes") nodes = v;
  CHECK_THAT(nodes, Catch::Contains("\"mj\": 1400, \"w\": 560"));
  std::map<std::string, std::string> details(r.details.begin(), r.details.end());
  CHECK(details["energy_s"] == "1");
  CHECK(details["energy_settle_s"] == "0");
  // each figure counted after a settle (--energy-settle): said in the section's first line and the JSON
  p.energy_settle_s = 1.5;
  CHECK_THAT(profile_table(p, 256, 5),
             Catch::Contains("\nenergy (the board's counter over 1.0 s of back-to-back runs each, after 1.5 s of "
                             "them): step 34.00 J per replay at 680 W; nodes one by one 2.00 J\n"));
  BenchResult r2;
  profile_metrics(p, 256, &r2);
  std::map<std::string, std::string> details2(r2.details.begin(), r2.details.end());
  CHECK(details2["energy_settle_s"] == "1.5");
}

TEST_CASE("bench --epochs gives the steady epochs' joules per step and power where every one measured them",
          "[bench]") {
  TrainResult tr;
  tr.backend = "cuda";
  tr.seconds = 3.0;
  for (int e = 1; e <= 3; ++e) {
    EpochRecord r;
    r.epoch = e;
    r.step = 10 * e;
    r.steps = 10;
    r.epoch_seconds = 1.0;
    r.images_per_s = 2560;
    r.train_seconds = e == 1 ? 0.5 : 0.4 + 0.1 * (e - 2);  // epochs 2-3: 0.4 and 0.5 s of training steps
    r.energy_j = e == 1 ? 100 : 700 * r.train_seconds;      // epoch 1 (warm-up) left out; epochs 2-3 at 700 W
    tr.epochs.push_back(r);
  }
  BenchResult r;
  REQUIRE(bench_train_metrics(tr, false, false, &r).ok());
  std::map<std::string, BenchMetric> m = by_name(r);
  REQUIRE(m.count("j_per_step_steady"));
  CHECK(m["j_per_step_steady"].value == Approx(31.5));  // 280 + 350 J over 20 steps
  CHECK_FALSE(m["j_per_step_steady"].check);            // shown, not compared with a baseline
  CHECK(m["power_w_steady"].value == Approx(700.0));     // 630 J over the training steps' 0.9 s, not the epochs' 2
  tr.epochs[2].energy_j = std::numeric_limits<double>::quiet_NaN();  // one steady epoch unmeasured: no figure
  BenchResult partial;
  REQUIRE(bench_train_metrics(tr, false, false, &partial).ok());
  CHECK(by_name(partial).count("j_per_step_steady") == 0);
  CHECK(by_name(partial).count("power_w_steady") == 0);
}

TEST_CASE("the layers table says the training state the profile left, and warns when the loss is not finite",
          "[bench]") {
  StepProfile p;
  p.graph_ms = 50.0;
  p.reps = 10;
  p.nodes = {{"features_3", "conv2d", "(256, 224, 224, 64)", 2.0, 2.4e12, 0, {}}};
  p.end_loss = 6.9078;
  p.skipped_steps = 3;
  std::string t = profile_table(p, 256, 5);
  CHECK_THAT(t, Catch::Contains("\nstate after the profile: loss 6.9078, 3 steps skipped for non-finite gradients\n"));
  CHECK_THAT(t, !Catch::Contains("WARNING"));
  p.end_loss = std::numeric_limits<double>::quiet_NaN();
  t = profile_table(p, 256, 5);
  CHECK_THAT(t, Catch::Contains("state after the profile: loss nan") &&
                    Catch::Contains("WARNING: the loss is not finite: the model diverged during the profile"));
  BenchResult r;
  profile_metrics(p, 256, &r);
  std::map<std::string, std::string> details(r.details.begin(), r.details.end());
  CHECK(details["end_loss"] == "null");
  CHECK(details["skipped_steps"] == "3");
}

namespace {
// `trctl bench mlp_fmnist.yaml ARGS` exits 2 and its stderr says `message`.
void check_bench_refused(const std::string& args, const std::string& message) {
  const fs::path d = temp_dir("bench_refused");
  CHECK(run_trctl("bench " + cfg("mlp_fmnist.yaml") + " " + args, d) == 2);
  std::ifstream err(d / "err");
  const std::string e((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  CHECK_THAT(e, Catch::Contains(message));
  fs::remove_all(d);
}
}  // namespace

TEST_CASE("bench --energy without --layers exits 2 with a clear error", "[bench][cli]") {
  check_bench_refused("--energy 1", "--energy measures the nodes of --layers; give --layers too");
}

TEST_CASE("bench --energy-settle without --energy exits 2 with a clear error", "[bench][cli]") {
  check_bench_refused("--layers --energy-settle 2",
                      "--energy-settle belongs to the --energy measurement; give --energy too");
}
