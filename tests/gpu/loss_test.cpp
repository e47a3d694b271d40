// The fused loss kernel (bce_with_logits with 1 and C logits, mse, weighted cross-entropy with and without label
// smoothing) against the float64 CPU reference (loss.h) on the same dtype-rounded logits: loss, gradient (with a
// loss scale), top-1/top-5 counts (computed here independently), bad labels, accumulators, forward-only mode and
// bitwise run-to-run identity. Tolerances: loss 1e-5 relative (f32 per-row sums, double over rows); gradient
// u_G |ref| + 2e-6 max|ref| (f32 exp/log per element; u_G the gradient dtype's rounding) + 2^-24 for f16 (its
// subnormal spacing: unscaled gradients of a mean over many rows fall below f16's smallest normal, 6.1e-5).
#include <climits>
#include <cmath>

#include "runtime/ops/loss/loss.h"
#include "runtime/ops/loss/loss_cuda.h"
#include "tests/gpu/gpu_test_util.h"

using namespace trctl;
using namespace trctl::gputest;

namespace {

struct LossCase {
  LossFn fn;
  int64_t rows, width;
  float eps, scale;
  GpuDType type;
};

std::vector<float> class_weights(int64_t w) {
  std::vector<float> cw(w);
  for (int64_t c = 0; c < w; ++c) cw[c] = c % 5 == 3 ? 0.0f : 0.5f + 0.25f * static_cast<float>(c % 7);
  return cw;
}

// Host top-1 (first maximum) and top-5 (fewer than min(W, 5) strictly greater) of usable rows.
void host_accuracy(const LossCase& c, const std::vector<float>& x, const std::vector<int32_t>& y, int32_t& top1,
                   int32_t& top5, int32_t& bad) {
  top1 = top5 = bad = 0;
  for (int64_t r = 0; r < c.rows; ++r) {
    const float* row = &x[r * c.width];
    const int32_t lab = y[r];
    const int64_t hi = c.fn == LossFn::BceWithLogits && c.width == 1 ? 2 : c.width;
    if (lab < 0 || lab >= hi) {
      ++bad;
      continue;
    }
    if (c.width == 1) {
      top1 += (row[0] > 0.0f) == (lab == 1);
      ++top5;
      continue;
    }
    int64_t best = 0, greater = 0;
    for (int64_t k = 1; k < c.width; ++k)
      if (row[k] > row[best]) best = k;
    for (int64_t k = 0; k < c.width; ++k) greater += row[k] > row[lab];
    top1 += best == lab;
    top5 += greater < std::min<int64_t>(c.width, 5);
  }
}

void run_case(const CudaContext& ctx, const LossCase& c, uint64_t seed) {
  const std::string tag = std::string(to_string(c.fn)) + " " + gpu_dtype_name(c.type) + " N=" +
                          std::to_string(c.rows) + " W=" + std::to_string(c.width) + " eps=" + std::to_string(c.eps);
  INFO(tag);
  Rng rng(seed);
  std::vector<float> x = rng.normal_vec(c.rows * c.width, 0.0f, 2.5f);
  for (int64_t r = 0; r < c.rows; r += 17)
    for (int64_t k = 0; k < c.width; ++k) x[r * c.width + k] += 30.0f;  // large offsets
  for (auto& v : x) v = round_to(c.type, v);
  std::vector<int32_t> y(c.rows);
  const int32_t hi = c.width == 1 && c.fn == LossFn::BceWithLogits ? 2 : static_cast<int32_t>(c.width);
  const int32_t bad_values[] = {-1, hi, INT32_MAX, INT32_MIN};
  for (int64_t r = 0; r < c.rows; ++r) {
    y[r] = static_cast<int32_t>(rng.below(hi));
    if (r % 29 == 3) y[r] = bad_values[(r / 29) % 4];
    if (c.width > 2 && r % 13 == 5 && y[r] > 0 && y[r] < hi)  // a tie before the label: first maximum wins
      x[r * c.width + y[r] - 1] = x[r * c.width + y[r]];
  }
  const std::vector<float> cw = class_weights(c.width);
  LossDesc desc{c.fn, c.rows, c.width, c.eps, cw.data()};
  std::vector<double> xd(x.begin(), x.end()), ref_g(x.size());
  int64_t ref_bad = 0;
  const double ref_loss = loss_fwd_cpu(desc, xd.data(), y.data(), &ref_bad);
  loss_grad_cpu(desc, xd.data(), y.data(), ref_g.data(), c.scale);
  int32_t top1 = 0, top5 = 0, bad = 0;
  host_accuracy(c, x, y, top1, top5, bad);
  REQUIRE(bad == ref_bad);

  DevBuf dx = to_device_as(c.type, x), dy = to_device(y), dw = to_device(cw), dscale = to_device(std::vector<float>{c.scale});
  DevBuf dg(x.size() * gpu_dtype_size(c.type)), ws(loss_cuda_workspace_bytes(c.rows));
  DevBuf dloss(4), dsum(8), dcorrect(4), dcorrect5(4), dbad(4);
  poison(dg);
  for (const DevBuf* b : {&dsum, &dcorrect, &dcorrect5, &dbad}) memset_sync(b->get(), 0, b->bytes());
  LossCudaArgs a;
  a.fn = c.fn;
  a.logits = dx.get();
  a.logits_type = c.type;
  a.labels = dy.as<int32_t>();
  a.rows = c.rows;
  a.width = c.width;
  a.label_smoothing = c.eps;
  a.class_weights = dw.as<float>();
  a.loss_scale = dscale.as<float>();
  a.dlogits = dg.get();
  a.dlogits_type = c.type;
  a.workspace = ws.get();
  a.workspace_bytes = ws.bytes();
  a.loss = dloss.as<float>();
  a.loss_sum = dsum.as<double>();
  a.correct = dcorrect.as<int32_t>();
  a.correct5 = dcorrect5.as<int32_t>();
  a.bad_labels = dbad.as<int32_t>();
  REQUIRE_OK(loss_cuda(ctx.stream, a));
  sync_ok(ctx);
  const float loss = from_device<float>(dloss.get(), 1)[0];
  CHECK(loss == Approx(ref_loss).epsilon(1e-5).margin(1e-7));
  CHECK(from_device<double>(dsum.get(), 1)[0] == Approx(ref_loss * c.rows).epsilon(1e-5).margin(1e-6));
  CHECK(from_device<int32_t>(dcorrect.get(), 1)[0] == top1);
  CHECK(from_device<int32_t>(dcorrect5.get(), 1)[0] == top5);
  CHECK(from_device<int32_t>(dbad.get(), 1)[0] == bad);
  const std::vector<float> g = from_device_as(c.type, dg.get(), x.size());
  double gmax = 0;
  for (double v : ref_g) gmax = std::max(gmax, std::abs(v));
  std::vector<double> bound(x.size());
  // f16 gradients of 1e-5 and less are subnormal: their spacing is 2^-24 whatever the value.
  const double sub = c.type == GpuDType::F16 ? std::ldexp(1.0, -24) : 0.0;
  for (size_t i = 0; i < x.size(); ++i) bound[i] = unit_roundoff(c.type) * std::abs(ref_g[i]) + 2e-6 * gmax + sub;
  CHECK_RESULT(compare_close("loss grad " + tag, to_double(g), ref_g, bound, c.width));
  // Again: accumulators add up, outputs bitwise identical; then forward only (evaluation).
  poison(dg);
  REQUIRE_OK(loss_cuda(ctx.stream, a));
  sync_ok(ctx);
  const std::vector<float> g2 = from_device_as(c.type, dg.get(), x.size());
  CHECK_RESULT(compare_bitwise("loss grad rerun " + tag, g.data(), g2.data(), g.size() * 4, 4));
  CHECK(from_device<float>(dloss.get(), 1)[0] == loss);
  CHECK(from_device<int32_t>(dcorrect.get(), 1)[0] == 2 * top1);
  a.dlogits = nullptr;
  a.loss_sum = nullptr;
  REQUIRE_OK(loss_cuda(ctx.stream, a));
  sync_ok(ctx);
  CHECK(from_device<float>(dloss.get(), 1)[0] == loss);
  CHECK(from_device<int32_t>(dcorrect5.get(), 1)[0] == 3 * top5);
}

}  // namespace

TEST_CASE("the loss kernel equals the float64 reference for every loss and dtype", "[kernel][loss]") {
  CudaContext ctx = make_context();
  uint64_t seed = 100;
  for (GpuDType t : {GpuDType::F32, GpuDType::F16, GpuDType::BF16}) {
    for (const LossCase& c : {LossCase{LossFn::BceWithLogits, 1000, 1, 0, 1, t},
                              LossCase{LossFn::BceWithLogits, 300, 10, 0, 1, t},
                              LossCase{LossFn::Mse, 300, 10, 0, 1, t},
                              LossCase{LossFn::Mse, 67, 1000, 0, 1024, t},
                              LossCase{LossFn::WeightedCrossEntropy, 300, 10, 0, 1, t},
                              LossCase{LossFn::WeightedCrossEntropy, 300, 10, 0.1f, 1024, t},
                              LossCase{LossFn::WeightedCrossEntropy, 67, 1000, 0.2f, 1, t},
                              LossCase{LossFn::WeightedCrossEntropy, 5, 3, 0.1f, 1, t}})
      run_case(ctx, c, seed++);
  }
}

TEST_CASE("a weighted batch without usable target weight gives loss 0 and gradient 0 on the GPU", "[kernel][loss]") {
  CudaContext ctx = make_context();
  const std::vector<float> x = {1, 2, 3, 4, 5, 6}, cw = {0, 1, 1};
  const std::vector<int32_t> y = {0, -1};
  DevBuf dx = to_device(x), dy = to_device(y), dw = to_device(cw), dg(24), ws(loss_cuda_workspace_bytes(2)), dl(4);
  poison(dg);
  LossCudaArgs a;
  a.fn = LossFn::WeightedCrossEntropy;
  a.logits = dx.get();
  a.labels = dy.as<int32_t>();
  a.rows = 2;
  a.width = 3;
  a.class_weights = dw.as<float>();
  a.dlogits = dg.get();
  a.workspace = ws.get();
  a.workspace_bytes = ws.bytes();
  a.loss = dl.as<float>();
  REQUIRE_OK(loss_cuda(ctx.stream, a));
  sync_ok(ctx);
  CHECK(from_device<float>(dl.get(), 1)[0] == 0.0f);
  for (float v : from_device<float>(dg.get(), 6)) CHECK(v == 0.0f);
  a.class_weights = nullptr;
  CHECK_FALSE(loss_cuda(ctx.stream, a).ok());  // weighted cross-entropy needs its weights
  a.workspace_bytes = 8;
  a.fn = LossFn::Mse;
  CHECK_FALSE(loss_cuda(ctx.stream, a).ok());
  sync_ok(ctx);
}
