// Softmax cross-entropy (fused forward + backward) vs a double host reference: loss, gradient, top-1 count with
// ties, out-of-range labels, accumulators, loss scale, forward-only mode, bitwise determinism.
#include <climits>
#include <cmath>

#include "runtime/ops/softmax_ce/softmax_ce_cuda.h"
#include "tests/gpu/gpu_test_util.h"

using namespace trctl;
using namespace trctl::gputest;

namespace {

struct CeCase {
  int64_t rows, classes;
  float eps, scale;
  GpuDType logits_type, grad_type;
};

struct CeInputs {
  std::vector<float> logits;  // already rounded to logits_type
  std::vector<int32_t> labels;
};

CeInputs ce_inputs(const CeCase& c, uint64_t seed) {
  Rng rng(seed);
  CeInputs in;
  const int64_t N = c.rows, C = c.classes;
  in.logits = rng.normal_vec(N * C, 0.0f, 2.0f);
  in.labels.resize(N);
  const int32_t bad_values[] = {-1, static_cast<int32_t>(C), INT32_MAX, INT32_MIN};
  for (int64_t n = 0; n < N; ++n) {
    float* x = &in.logits[n * C];
    if (n % 17 == 0) {
      for (int64_t k = 0; k < C; ++k) x[k] += 40.0f;  // large offsets: max subtraction matters
    }
    in.labels[n] = static_cast<int32_t>(rng.below(C));
    if (C >= 2 && n % 13 == 5) {  // a tie for the maximum: the first index wins
      const int64_t c1 = rng.below(C - 1), c2 = c1 + 1 + rng.below(C - 1 - c1);
      float mx = x[0];
      for (int64_t k = 1; k < C; ++k) mx = std::max(mx, x[k]);
      x[c1] = x[c2] = mx + 1.0f;
      in.labels[n] = static_cast<int32_t>((n / 13) % 2 ? c1 : c2);
    }
    if (n % 29 == 3) in.labels[n] = bad_values[(n / 29) % 4];
  }
  for (auto& v : in.logits) v = round_to(c.logits_type, v);
  return in;
}

struct CeRef {
  double loss = 0, loss_sum = 0;
  int32_t correct = 0, bad = 0;
  std::vector<double> grad;
};

CeRef ce_reference(const CeCase& c, const CeInputs& in) {
  CeRef r;
  const int64_t N = c.rows, C = c.classes;
  const double eps = c.eps, gscale = static_cast<double>(c.scale) / static_cast<double>(N);
  r.grad.assign(N * C, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const float* x = &in.logits[n * C];
    int64_t amax = 0;
    for (int64_t k = 1; k < C; ++k) {
      if (x[k] > x[amax]) amax = k;
    }
    const int32_t y = in.labels[n];
    if (y < 0 || y >= C) {
      ++r.bad;
      continue;
    }
    const double mx = x[amax];
    double s = 0, sum_neg_logp = 0;
    for (int64_t k = 0; k < C; ++k) s += std::exp(x[k] - mx);
    const double log_z = mx + std::log(s);
    for (int64_t k = 0; k < C; ++k) sum_neg_logp += log_z - x[k];
    const double loss = (1 - eps) * (log_z - x[y]) + eps * sum_neg_logp / static_cast<double>(C);
    r.loss_sum += loss;
    r.correct += amax == y;
    for (int64_t k = 0; k < C; ++k) {
      const double target = (k == y ? 1 - eps : 0.0) + eps / static_cast<double>(C);
      r.grad[n * C + k] = (std::exp(x[k] - mx) / s - target) * gscale;
    }
  }
  r.loss = r.loss_sum / static_cast<double>(N);
  return r;
}

struct CeDevice {
  DevBuf logits, labels, grad, ws, scale, loss, loss_sum, correct, bad;
};

CeDevice ce_device(const CeCase& c, const CeInputs& in) {
  CeDevice d;
  d.logits = to_device_as(c.logits_type, in.logits);
  d.labels = to_device(in.labels);
  d.grad = DevBuf(c.rows * c.classes * gpu_dtype_size(c.grad_type));
  d.ws = DevBuf(softmax_ce_workspace_bytes(c.rows));
  d.scale = to_device(std::vector<float>{c.scale});
  d.loss = DevBuf(4);
  d.loss_sum = to_device(std::vector<double>{0.0});
  d.correct = to_device(std::vector<int32_t>{0});
  d.bad = to_device(std::vector<int32_t>{0});
  poison(d.grad);
  poison(d.ws);
  poison(d.loss);
  return d;
}

SoftmaxCeArgs ce_args(const CeCase& c, const CeDevice& d) {
  SoftmaxCeArgs a;
  a.logits = d.logits.get();
  a.logits_type = c.logits_type;
  a.labels = d.labels.as<int32_t>();
  a.rows = c.rows;
  a.classes = c.classes;
  a.label_smoothing = c.eps;
  a.loss_scale = d.scale.as<float>();
  a.dlogits = d.grad.get();
  a.dlogits_type = c.grad_type;
  a.workspace = d.ws.get();
  a.workspace_bytes = d.ws.bytes();
  a.loss = d.loss.as<float>();
  a.loss_sum = d.loss_sum.as<double>();
  a.correct = d.correct.as<int32_t>();
  a.bad_labels = d.bad.as<int32_t>();
  return a;
}

std::string case_name(const CeCase& c) {
  return "N=" + std::to_string(c.rows) + " C=" + std::to_string(c.classes) + " eps=" + std::to_string(c.eps) +
         " scale=" + std::to_string(c.scale) + " " + gpu_dtype_name(c.logits_type) + "->" +
         gpu_dtype_name(c.grad_type);
}

const CeCase kCases[] = {
    {200, 10, 0.1f, 1.0f, GpuDType::F32, GpuDType::F32},
    {200, 10, 0.0f, 65536.0f, GpuDType::F32, GpuDType::F16},
    {200, 10, 0.1f, 1024.0f, GpuDType::F16, GpuDType::F16},
    {200, 10, 0.1f, 1.0f, GpuDType::BF16, GpuDType::BF16},
    {37, 1000, 0.2f, 1.0f, GpuDType::F32, GpuDType::F32},
    {64, 33, 0.1f, 1.0f, GpuDType::F32, GpuDType::F32},
    {5000, 10, 0.1f, 1.0f, GpuDType::F32, GpuDType::F32},
    {3, 1, 0.1f, 1.0f, GpuDType::F32, GpuDType::F32},
    {1, 5, 0.0f, 1.0f, GpuDType::F32, GpuDType::F32},
};

}  // namespace

// Tolerances: per-row values are computed in f32 from max-subtracted logits, with sums whose terms are all >= 0,
// so the loss has relative error ~ (C/32 + 5) ulp; bound 1e-5 relative + 2e-7 absolute (log S of S ~ 1 is only
// known to ~1 ulp of 1). Gradients: softmax = expf(..) / S has ~3 ulp relative error, i.e. <= 3.6e-7 absolute as
// a probability, so the bound is 1e-6 * (scale / N) absolute + 1e-5 relative, plus for f16/bf16 outputs the
// rounding of the output (unit roundoff * |ref| and half the f16 subnormal spacing 2^-25).
TEST_CASE("softmax cross-entropy matches the double reference in loss, gradient, accuracy and bad-label count",
          "[kernel][softmax_ce]") {
  CudaContext ctx = make_context();
  for (const CeCase& c : kCases) {
    const std::string name = case_name(c);
    INFO(name);
    const CeInputs in = ce_inputs(c, 41 + c.rows * 7 + c.classes);
    const CeRef ref = ce_reference(c, in);
    CeDevice d = ce_device(c, in);
    REQUIRE_OK(softmax_ce_cuda(ctx.stream, ce_args(c, d)));
    sync_ok(ctx);
    const float loss = from_device<float>(d.loss.get(), 1)[0];
    const double loss_sum = from_device<double>(d.loss_sum.get(), 1)[0];
    const int32_t correct = from_device<int32_t>(d.correct.get(), 1)[0];
    const int32_t bad = from_device<int32_t>(d.bad.get(), 1)[0];
    CHECK_RESULT(compare_close("ce loss " + name, {static_cast<double>(loss)}, {ref.loss},
                               {1e-5 * std::fabs(ref.loss) + 2e-7}));
    CHECK_RESULT(compare_close("ce loss_sum " + name, {loss_sum}, {ref.loss_sum},
                               {1e-5 * std::fabs(ref.loss_sum) + 2e-7 * c.rows}));
    CHECK(correct == ref.correct);
    CHECK(bad == ref.bad);
    std::printf("  [%s] ce counts %s: correct %d (ref %d), bad labels %d (ref %d)\n",
                correct == ref.correct && bad == ref.bad ? "ok" : "FAIL", name.c_str(), correct, ref.correct, bad,
                ref.bad);
    const auto g = from_device_as(c.grad_type, d.grad.get(), c.rows * c.classes);
    const double gs = static_cast<double>(c.scale) / static_cast<double>(c.rows);
    const double u_out = c.grad_type == GpuDType::F32 ? 0.0 : unit_roundoff(c.grad_type);
    const double sub = c.grad_type == GpuDType::F16 ? std::ldexp(1.0, -25) : 0.0;
    std::vector<double> bound(ref.grad.size());
    for (size_t i = 0; i < bound.size(); ++i) {
      bound[i] = 1e-6 * gs + (1e-5 + u_out) * std::fabs(ref.grad[i]) + sub;
    }
    CHECK_RESULT(compare_close("ce dlogits " + name, to_double(g), ref.grad, bound, c.classes));
  }
}

TEST_CASE("softmax cross-entropy is bitwise reproducible and its accumulators add up across launches",
          "[kernel][softmax_ce]") {
  CudaContext ctx = make_context();
  const CeCase c = kCases[0];
  const CeInputs in = ce_inputs(c, 42);
  CeDevice a = ce_device(c, in), b = ce_device(c, in);
  REQUIRE_OK(softmax_ce_cuda(ctx.stream, ce_args(c, a)));
  REQUIRE_OK(softmax_ce_cuda(ctx.stream, ce_args(c, b)));
  sync_ok(ctx);
  const size_t n = c.rows * c.classes;
  const auto ga = from_device<float>(a.grad.get(), n), gb = from_device<float>(b.grad.get(), n);
  CHECK_RESULT(compare_bitwise("ce dlogits run 1 vs run 2", ga.data(), gb.data(), n * 4, 4));
  const float la = from_device<float>(a.loss.get(), 1)[0], lb = from_device<float>(b.loss.get(), 1)[0];
  CHECK_RESULT(compare_bitwise("ce loss run 1 vs run 2", &la, &lb, 4, 4));
  const double sa = from_device<double>(a.loss_sum.get(), 1)[0];
  const int32_t ca = from_device<int32_t>(a.correct.get(), 1)[0], ba = from_device<int32_t>(a.bad.get(), 1)[0];
  // Second launch into the same accumulators: loss overwritten, the rest doubled.
  REQUIRE_OK(softmax_ce_cuda(ctx.stream, ce_args(c, a)));
  sync_ok(ctx);
  CHECK(from_device<float>(a.loss.get(), 1)[0] == la);
  CHECK(from_device<double>(a.loss_sum.get(), 1)[0] == sa + sa);
  CHECK(from_device<int32_t>(a.correct.get(), 1)[0] == 2 * ca);
  CHECK(from_device<int32_t>(a.bad.get(), 1)[0] == 2 * ba);
}

TEST_CASE("softmax cross-entropy forward-only writes no gradient and a null loss scale means 1",
          "[kernel][softmax_ce]") {
  CudaContext ctx = make_context();
  const CeCase c = kCases[0];
  const CeInputs in = ce_inputs(c, 43);
  const CeRef ref = ce_reference(c, in);
  CeDevice d = ce_device(c, in);
  SoftmaxCeArgs a = ce_args(c, d);
  a.dlogits = nullptr;
  a.loss_sum = nullptr;
  a.bad_labels = nullptr;
  REQUIRE_OK(softmax_ce_cuda(ctx.stream, a));
  sync_ok(ctx);
  const auto g = from_device<float>(d.grad.get(), c.rows * c.classes);
  int64_t written = 0;
  for (float v : g) written += !std::isnan(v);
  CHECK(written == 0);
  CHECK(from_device<int32_t>(d.correct.get(), 1)[0] == ref.correct);
  CHECK(std::fabs(from_device<float>(d.loss.get(), 1)[0] - ref.loss) <= 1e-5 * std::fabs(ref.loss) + 2e-7);
  // loss_scale = null: gradient scaled by 1 / N only.
  a = ce_args(c, d);
  a.loss_scale = nullptr;
  REQUIRE_OK(softmax_ce_cuda(ctx.stream, a));
  sync_ok(ctx);
  const auto g1 = from_device<float>(d.grad.get(), c.rows * c.classes);
  std::vector<double> bound(ref.grad.size());
  for (size_t i = 0; i < bound.size(); ++i) bound[i] = 1e-6 / c.rows + 1e-5 * std::fabs(ref.grad[i]);
  CHECK_RESULT(compare_close("ce dlogits with null loss_scale", to_double(g1), ref.grad, bound, c.classes));
  // Undersized workspace is an argument error, not an out-of-bounds write.
  a.workspace_bytes = 16;
  CHECK_FALSE(softmax_ce_cuda(ctx.stream, a).ok());
}
