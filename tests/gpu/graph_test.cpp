// Graph capturability: steps captured once (cudaStreamCaptureModeGlobal, which rejects synchronizing or otherwise
// unsafe calls inside the capture) and replayed give bitwise the same results as the same launches made eagerly,
// step after step, because every per-step value (step counter, Adam t, lr, loss scale, skip flag) lives on the device.
#include <cmath>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/lt_gemm.h"
#include "runtime/ops/amp/amp_cuda.h"
#include "runtime/ops/bias_grad/bias_grad_cuda.h"
#include "runtime/ops/dropout/dropout_cuda.h"
#include "runtime/ops/fill/fill_cuda.h"
#include "runtime/ops/optim/optim_cuda.h"
#include "runtime/ops/relu/relu_cuda.h"
#include "runtime/ops/softmax_ce/softmax_ce_cuda.h"
#include "tests/gpu/gpu_test_util.h"

using namespace trctl;
using namespace trctl::gputest;

namespace {

// Captures enqueue(stream) into an executable graph. The capture is always ended, also when a launch fails, so
// that a failure cannot leave the stream capturing.
template <class F>
cudaGraphExec_t capture(const CudaContext& ctx, F&& enqueue, size_t* node_count) {
  REQUIRE_CUDA(cudaStreamBeginCapture(ctx.stream, cudaStreamCaptureModeGlobal));
  const Status st = enqueue();
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(ctx.stream, &graph);
  REQUIRE_OK(st);
  REQUIRE_CUDA(end);
  REQUIRE(graph != nullptr);
  REQUIRE_CUDA(cudaGraphGetNodes(graph, nullptr, node_count));
  cudaGraphExec_t exec = nullptr;
  REQUIRE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  REQUIRE_CUDA(cudaGraphDestroy(graph));
  return exec;
}

// Collects the first failing Status of a sequence of launches.
struct FirstError {
  Status st = ok_status();
  void operator()(const Status& s) {
    if (st.ok() && !s.ok()) st = s;
  }
};

struct SmallStep {
  int64_t n;
  DevBuf x, xd, y, p, m, v, h, step;
  std::vector<float> x0, p0;
  OptHyper h0 = opt_hyper_adam(1e-2, 0.9, 0.999, 1e-8, 0.01);

  explicit SmallStep(int64_t count) : n(count) {
    Rng rng(91);
    x0 = rng.normal_vec(n, 0.0f, 1.0f);
    p0 = rng.normal_vec(n, 0.0f, 1.0f);
    x = to_device(x0);
    xd = DevBuf(n * 4);
    y = DevBuf(n * 4);
    p = DevBuf(n * 4);
    m = DevBuf(n * 4);
    v = DevBuf(n * 4);
    h = DevBuf(sizeof(OptHyper));
    step = DevBuf(4);
  }
  void reset() {
    upload(p.get(), p0);
    upload(m.get(), std::vector<float>(n, 0.0f));
    upload(v.get(), std::vector<float>(n, 0.0f));
    upload(step.get(), std::vector<uint32_t>{0});
    copy_sync(h.get(), &h0, sizeof h0, cudaMemcpyHostToDevice);
  }
  Status enqueue(cudaStream_t s) {
    FirstError e;
    e(counter_add_u32_cuda(s, step.as<uint32_t>(), 1));
    e(dropout_fwd_cuda(s, dropout_params(0.25f, 1234, 5, step.as<uint32_t>()), x.get(), xd.get(), n, GpuDType::F32));
    e(relu_fwd_cuda(s, xd.get(), y.get(), n, GpuDType::F32));
    e(opt_hyper_advance_cuda(s, h.as<OptHyper>(), nullptr, nullptr, nullptr, 0));
    e(adamw_step_cuda(s, h.as<OptHyper>(), p.as<float>(), y.as<float>(), m.as<float>(), v.as<float>(), n, true));
    return e.st;
  }
};

}  // namespace

TEST_CASE("a captured relu + dropout + AdamW step replays bitwise like eager launches, step after step",
          "[graph][kernel]") {
  CudaContext ctx = make_context();
  SmallStep st(100003);
  const int steps = 5;
  std::vector<std::vector<float>> eager;
  st.reset();
  for (int s = 0; s < steps; ++s) {
    REQUIRE_OK(st.enqueue(ctx.stream));
    sync_ok(ctx);
    eager.push_back(from_device<float>(st.p.get(), st.n));
  }
  OptHyper h_eager;
  copy_sync(&h_eager, st.h.get(), sizeof h_eager, cudaMemcpyDeviceToHost);

  st.reset();
  size_t nodes = 0;
  cudaGraphExec_t exec = capture(ctx, [&] { return st.enqueue(ctx.stream); }, &nodes);
  std::printf("  captured small step: %zu graph nodes\n", nodes);
  CHECK(nodes == 5);
  for (int s = 0; s < steps; ++s) {
    REQUIRE_CUDA(cudaGraphLaunch(exec, ctx.stream));
    sync_ok(ctx);
    const auto p = from_device<float>(st.p.get(), st.n);
    CHECK_RESULT(compare_bitwise("graph replay " + std::to_string(s + 1) + " vs eager step", p.data(),
                                 eager[s].data(), p.size() * 4, 4));
    if (s > 0) CHECK(eager[s] != eager[s - 1]);  // every replay did a different update
  }
  OptHyper h_graph;
  copy_sync(&h_graph, st.h.get(), sizeof h_graph, cudaMemcpyDeviceToHost);
  CHECK(h_graph.step == steps);
  CHECK(h_graph.step == h_eager.step);
  CHECK(h_graph.group[0].step_size == h_eager.group[0].step_size);
  CHECK(from_device<uint32_t>(st.step.get(), 1)[0] == static_cast<uint32_t>(steps));
  REQUIRE_CUDA(cudaGraphExecDestroy(exec));
}

namespace {

// A two-layer MLP training step with AMP loss scaling (f32 storage), 784 -> 256 (ReLU, dropout) -> 10, batch 200:
// GEMMs with fused bias/ReLU, softmax CE, backward GEMMs, deterministic bias gradients, non-finite check, step
// scalars, AdamW over the weight region (decay) and the bias region (no decay), loss scale update.
struct MlpStep {
  static constexpr int64_t N = 200, IN = 784, H = 256, OUT = 10;
  static constexpr int64_t kW1 = H * IN, kW2 = OUT * H, kB1 = H, kB2 = OUT;
  static constexpr int64_t kWeights = kW1 + kW2, kBiases = kB1 + kB2;
  DevBuf x, labels, hpre, hdrop, logits, dlogits, dh, ws_ce, loss, loss_sum, correct, bad;
  DevBuf weights, biases, gw, gb, mw, vw, mb, vb, hyper, scaler, step;
  std::vector<float> w0, b0;
  LtGemmPlan fwd1, fwd2, dx2, dw2, dw1;

  explicit MlpStep(CudaContext& ctx) {
    Rng rng(92);
    x = to_device(rng.uniform_vec(N * IN, 0.0f, 1.0f));
    std::vector<int32_t> lab(N);
    for (auto& l : lab) l = static_cast<int32_t>(rng.below(OUT));
    labels = to_device(lab);
    hpre = DevBuf(N * H * 4);
    hdrop = DevBuf(N * H * 4);
    logits = DevBuf(N * OUT * 4);
    dlogits = DevBuf(N * OUT * 4);
    dh = DevBuf(N * H * 4);
    ws_ce = DevBuf(softmax_ce_workspace_bytes(N));
    loss = DevBuf(4);
    loss_sum = DevBuf(8);
    correct = DevBuf(4);
    bad = DevBuf(4);
    w0 = rng.uniform_vec(kWeights, -0.05f, 0.05f);
    b0 = rng.uniform_vec(kBiases, -0.05f, 0.05f);
    weights = DevBuf(kWeights * 4);
    biases = DevBuf(kBiases * 4);
    gw = DevBuf(kWeights * 4);
    gb = DevBuf(kBiases * 4);
    mw = DevBuf(kWeights * 4);
    vw = DevBuf(kWeights * 4);
    mb = DevBuf(kBiases * 4);
    vb = DevBuf(kBiases * 4);
    hyper = DevBuf(sizeof(OptHyper));
    scaler = DevBuf(sizeof(GradScalerState));
    step = DevBuf(4);
    fwd1 = plan(ctx, N, H, IN, false, true, GemmEpilogue::ReluBias);
    fwd2 = plan(ctx, N, OUT, H, false, true, GemmEpilogue::Bias);
    dx2 = plan(ctx, N, H, OUT, false, false, GemmEpilogue::None);
    dw2 = plan(ctx, OUT, H, N, true, false, GemmEpilogue::None);
    dw1 = plan(ctx, H, IN, N, true, false, GemmEpilogue::None);
  }
  static LtGemmPlan plan(CudaContext& ctx, int64_t m, int64_t n, int64_t k, bool ta, bool tb, GemmEpilogue e) {
    GemmDesc d;
    d.m = m;
    d.n = n;
    d.k = k;
    d.trans_a = ta;
    d.trans_b = tb;
    d.epilogue = e;
    auto p = lt_gemm_plan(ctx, d);
    REQUIRE_OK(p);
    return std::move(p.value());
  }
  float* w1() const { return weights.as<float>(); }
  float* w2() const { return weights.as<float>() + kW1; }  // offset 802816 bytes: 256-byte aligned
  float* b1() const { return biases.as<float>(); }
  float* b2() const { return biases.as<float>() + kB1; }   // offset 1024 bytes

  void reset() {
    upload(weights.get(), w0);
    upload(biases.get(), b0);
    for (const DevBuf* b : {&mw, &vw, &mb, &vb}) memset_sync(b->get(), 0, b->bytes());
    memset_sync(loss_sum.get(), 0, 8);
    memset_sync(correct.get(), 0, 4);
    memset_sync(bad.get(), 0, 4);
    memset_sync(step.get(), 0, 4);
    const OptHyper h = opt_hyper_adam(1e-3, 0.9, 0.999, 1e-8, 0.01);
    const GradScalerState s;
    copy_sync(hyper.get(), &h, sizeof h, cudaMemcpyHostToDevice);
    copy_sync(scaler.get(), &s, sizeof s, cudaMemcpyHostToDevice);
  }

  Status enqueue(CudaContext& ctx) {
    cudaStream_t s = ctx.stream;
    auto* sc = scaler.as<GradScalerState>();
    auto* hp = hyper.as<OptHyper>();
    FirstError e;
    e(counter_add_u32_cuda(s, step.as<uint32_t>(), 1));
    e(fill_i32_cuda(s, &sc->found_inf, 1, 0));
    const DropoutParams drop = dropout_params(0.2f, 77, 1, step.as<uint32_t>());
    // forward
    e(lt_gemm_run(ctx, fwd1, {x.get(), w1(), nullptr, hpre.get(), b1(), nullptr}));
    e(dropout_fwd_cuda(s, drop, hpre.get(), hdrop.get(), N * H, GpuDType::F32));
    e(lt_gemm_run(ctx, fwd2, {hdrop.get(), w2(), nullptr, logits.get(), b2(), nullptr}));
    SoftmaxCeArgs ce;
    ce.logits = logits.get();
    ce.labels = labels.as<int32_t>();
    ce.rows = N;
    ce.classes = OUT;
    ce.label_smoothing = 0.1f;
    ce.loss_scale = &sc->scale;
    ce.dlogits = dlogits.get();
    ce.workspace = ws_ce.get();
    ce.workspace_bytes = ws_ce.bytes();
    ce.loss = loss.as<float>();
    ce.loss_sum = loss_sum.as<double>();
    ce.correct = correct.as<int32_t>();
    ce.bad_labels = bad.as<int32_t>();
    e(softmax_ce_cuda(s, ce));
    // backward
    e(lt_gemm_run(ctx, dw2, {dlogits.get(), hdrop.get(), nullptr, gw.as<float>() + kW1, nullptr, nullptr}));
    e(bias_grad_cuda(s, dlogits.get(), GpuDType::F32, N, OUT, 0, gb.as<float>() + kB1, false));
    e(lt_gemm_run(ctx, dx2, {dlogits.get(), w2(), nullptr, dh.get(), nullptr, nullptr}));
    e(dropout_bwd_cuda(s, drop, dh.get(), dh.get(), N * H, GpuDType::F32));
    e(relu_bwd_cuda(s, hpre.get(), dh.get(), dh.get(), N * H, GpuDType::F32));
    e(lt_gemm_run(ctx, dw1, {dh.get(), x.get(), nullptr, gw.get(), nullptr, nullptr}));
    e(bias_grad_cuda(s, dh.get(), GpuDType::F32, N, H, 0, gb.as<float>(), false));
    // update
    e(grad_check_nonfinite_cuda(s, gw.get(), GpuDType::F32, kWeights, &sc->found_inf));
    e(grad_check_nonfinite_cuda(s, gb.get(), GpuDType::F32, kBiases, &sc->found_inf));
    e(opt_hyper_advance_cuda(s, hp, &sc->found_inf, &sc->scale, nullptr, 0));
    e(adamw_step_cuda(s, hp, weights.as<float>(), gw.as<float>(), mw.as<float>(), vw.as<float>(), kWeights, true));
    e(adamw_step_cuda(s, hp, biases.as<float>(), gb.as<float>(), mb.as<float>(), vb.as<float>(), kBiases, false));
    e(grad_scaler_update_cuda(s, sc));
    return e.st;
  }
};

}  // namespace

TEST_CASE("a captured two-layer MLP training step (GEMMs, CE, AMP scaling, AdamW) replays bitwise like eager",
          "[graph][gemm]") {
  CudaContext ctx = make_context();
  MlpStep mlp(ctx);
  const int steps = 4;
  std::vector<float> loss_eager;
  mlp.reset();
  for (int s = 0; s < steps; ++s) {
    REQUIRE_OK(mlp.enqueue(ctx));
    sync_ok(ctx);
    loss_eager.push_back(from_device<float>(mlp.loss.get(), 1)[0]);
  }
  const auto w_eager = from_device<float>(mlp.weights.get(), MlpStep::kWeights);
  const auto b_eager = from_device<float>(mlp.biases.get(), MlpStep::kBiases);
  GradScalerState sc_eager;
  copy_sync(&sc_eager, mlp.scaler.get(), sizeof sc_eager, cudaMemcpyDeviceToHost);
  std::printf("  eager MLP losses:");
  for (float l : loss_eager) std::printf(" %.6f", static_cast<double>(l));
  std::printf("\n");
  for (float l : loss_eager) CHECK(std::isfinite(l));
  CHECK(loss_eager.back() < loss_eager.front());  // same batch, AdamW: the loss must go down
  CHECK(sc_eager.found_inf == 0);
  CHECK(sc_eager.growth_tracker == steps);

  mlp.reset();
  size_t nodes = 0;
  cudaGraphExec_t exec = capture(ctx, [&] { return mlp.enqueue(ctx); }, &nodes);
  std::printf("  captured MLP step: %zu graph nodes\n", nodes);
  for (int s = 0; s < steps; ++s) {
    REQUIRE_CUDA(cudaGraphLaunch(exec, ctx.stream));
    sync_ok(ctx);
    const float l = from_device<float>(mlp.loss.get(), 1)[0];
    CHECK_RESULT(compare_bitwise("MLP graph loss step " + std::to_string(s + 1), &l, &loss_eager[s], 4, 4));
  }
  const auto w = from_device<float>(mlp.weights.get(), MlpStep::kWeights);
  const auto b = from_device<float>(mlp.biases.get(), MlpStep::kBiases);
  CHECK_RESULT(compare_bitwise("MLP graph weights vs eager", w.data(), w_eager.data(), w.size() * 4, 4));
  CHECK_RESULT(compare_bitwise("MLP graph biases vs eager", b.data(), b_eager.data(), b.size() * 4, 4));
  GradScalerState sc;
  copy_sync(&sc, mlp.scaler.get(), sizeof sc, cudaMemcpyDeviceToHost);
  CHECK(sc.scale == sc_eager.scale);
  CHECK(sc.growth_tracker == sc_eager.growth_tracker);
  REQUIRE_CUDA(cudaGraphExecDestroy(exec));
}
