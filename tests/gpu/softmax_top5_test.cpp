// Top-5 in the fused softmax cross-entropy kernel against the CPU reference accuracy_topk_cpu (the same rule for
// ties: fewer than min(5, C) logits strictly above the label's), on f32/f16/bf16 logits with many ties, C < 5 and
// bad labels; and a run's val_top5 on the CUDA backend next to the CPU backend's.
#include <climits>
#include <cmath>
#include <cstdlib>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/ops/softmax_ce/softmax_ce.h"
#include "runtime/ops/softmax_ce/softmax_ce_cuda.h"
#include "runtime/train/trainer.h"
#include "tests/gpu/gpu_test_util.h"

using namespace trctl;
using namespace trctl::gputest;

namespace {

struct Top5Case {
  int64_t rows, classes;
  GpuDType type;
};

// Logits drawn from few distinct values (many ties around the label), some rows all equal, some bad labels.
void top5_inputs(const Top5Case& c, uint64_t seed, std::vector<float>& logits, std::vector<int32_t>& labels) {
  Rng rng(seed);
  const int64_t N = c.rows, C = c.classes;
  logits = rng.normal_vec(N * C, 0.0f, 1.0f);
  labels.resize(N);
  for (int64_t n = 0; n < N; ++n) {
    float* x = &logits[n * C];
    if (n % 3 == 0)
      for (int64_t k = 0; k < C; ++k) x[k] = std::round(x[k] * 2.0f) / 2.0f;  // ~7 distinct values: ties
    if (n % 11 == 4)
      for (int64_t k = 0; k < C; ++k) x[k] = 1.5f;  // all tied: always top-5
    labels[n] = static_cast<int32_t>(rng.below(C));
    if (n % 23 == 7) labels[n] = n % 2 ? -1 : static_cast<int32_t>(C);
  }
  for (auto& v : logits) v = round_to(c.type, v);
}

}  // namespace

TEST_CASE("softmax cross-entropy's top-5 count equals the CPU reference, ties included", "[kernel][softmax_ce][top5]") {
  CudaContext ctx = make_context();
  const Top5Case cases[] = {{200, 10, GpuDType::F32},  {200, 10, GpuDType::F16}, {513, 10, GpuDType::BF16},
                            {37, 1000, GpuDType::F32}, {64, 3, GpuDType::F32},   {9, 1, GpuDType::F32},
                            {5000, 100, GpuDType::F16}};
  for (const Top5Case& c : cases) {
    const std::string name = "N=" + std::to_string(c.rows) + " C=" + std::to_string(c.classes) + " " +
                             gpu_dtype_name(c.type);
    INFO(name);
    std::vector<float> logits;
    std::vector<int32_t> labels;
    top5_inputs(c, 7 + c.rows + c.classes, logits, labels);
    const int64_t ref5 = accuracy_topk_cpu(logits.data(), labels.data(), c.rows, c.classes, 5);
    const int64_t ref1 = accuracy_top1_cpu(logits.data(), labels.data(), c.rows, c.classes);
    DevBuf x = to_device_as(c.type, logits), y = to_device(labels);
    DevBuf ws(softmax_ce_workspace_bytes(c.rows)), loss(4);
    DevBuf correct = to_device(std::vector<int32_t>{0}), correct5 = to_device(std::vector<int32_t>{0});
    SoftmaxCeArgs a;
    a.logits = x.get();
    a.logits_type = c.type;
    a.labels = y.as<int32_t>();
    a.rows = c.rows;
    a.classes = c.classes;
    a.workspace = ws.get();
    a.workspace_bytes = ws.bytes();
    a.loss = loss.as<float>();
    a.correct = correct.as<int32_t>();
    a.correct5 = correct5.as<int32_t>();
    REQUIRE_OK(softmax_ce_cuda(ctx.stream, a));
    REQUIRE_OK(softmax_ce_cuda(ctx.stream, a));  // accumulates: twice the count
    sync_ok(ctx);
    const int32_t got5 = from_device<int32_t>(correct5.get(), 1)[0];
    const int32_t got1 = from_device<int32_t>(correct.get(), 1)[0];
    std::printf("  [%s] top-5 %s: %d (ref %lld), top-1 %d (ref %lld)\n",
                got5 == 2 * ref5 && got1 == 2 * ref1 ? "ok" : "FAIL", name.c_str(), got5 / 2,
                static_cast<long long>(ref5), got1 / 2, static_cast<long long>(ref1));
    CHECK(got5 == 2 * ref5);
    CHECK(got1 == 2 * ref1);
    if (c.classes < 5) {  // torch.topk(k = C): every valid label
      int64_t valid = 0;
      for (int32_t l : labels) valid += l >= 0 && l < c.classes;
      CHECK(ref5 == valid);
    }
  }
}

TEST_CASE("a CUDA run's val_top5 agrees with the CPU backend's", "[gpu][top5]") {
  auto run = [](const char* device) {
    std::vector<std::string> o = {std::string("train.device=") + device, "train.epochs=1", "train.precision=fp32",
                                  "data.train_subset=2000", "run.progress=off"};
    if (const char* root = std::getenv("TRCTL_FMNIST_ROOT")) o.push_back(std::string("data.root=") + root);
    Result<Spec> s = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/mlp_fmnist.yaml", o);
    REQUIRE(s.ok());
    spdlog::logger log("test", std::make_shared<spdlog::sinks::null_sink_mt>());
    TrainOptions opt;
    opt.write_run_dir = false;
    opt.gpu.device_count = cuda_device_count;
    opt.gpu.make = make_cuda_backend;
    Result<TrainResult> r = train_run(s.value(), opt, log);
    INFO((r.ok() ? std::string() : r.error_text()));
    REQUIRE(r.ok());
    return r->epochs.back();
  };
  const EpochRecord cpu = run("cpu"), gpu = run("cuda");
  INFO("val top5 cpu " << cpu.val_top5 << " cuda " << gpu.val_top5 << "; top1 " << cpu.val_top1 << " / "
                       << gpu.val_top1);
  CHECK(gpu.val_top5 >= gpu.val_top1);
  CHECK(gpu.val_top5 > 0.8);
  CHECK(std::abs(cpu.val_top5 - gpu.val_top5) < 0.01);
}
