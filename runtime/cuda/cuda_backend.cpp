// CudaBackend: the compiled plan on one GPU (see cuda_backend.h). Construction allocates everything (arena,
// weight copy for AMP, per-program scratch, GEMM plans); each program is lowered to a list of launches, captured
// into a CUDA graph on its first run and replayed afterwards. The optimizer's lowering: cuda_lower_optim.cpp.
#include "runtime/cuda/cuda_backend.h"

#include "runtime/cuda/cuda_backend_impl.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <map>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/cudnn_conv.h"
#include "runtime/cuda/lt_gemm.h"
#include "runtime/ops/add/add_cuda.h"
#include "runtime/ops/amp/amp_cuda.h"
#include "runtime/ops/augment/augment_cuda.h"
#include "runtime/ops/bias_grad/bias_grad_cuda.h"
#include "runtime/ops/cast/cast_cuda.h"
#include "runtime/ops/dropout/dropout_cuda.h"
#include "runtime/ops/fill/fill_cuda.h"
#include "runtime/ops/grad_accum/grad_accum_cuda.h"
#include "runtime/ops/batchnorm/batchnorm_cuda.h"
#include "runtime/ops/optim/optim_cuda.h"
#include "runtime/ops/pool/pool_cuda.h"
#include "runtime/ops/relu/relu_cuda.h"
#include "runtime/ops/loss/loss_cuda.h"
#include "runtime/ops/softmax_ce/softmax_ce_cuda.h"

namespace trctl {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

void cuda_warm_up() {
  if (cudaFree(nullptr) != cudaSuccess) cudaGetLastError();
}

namespace cuda_detail {

// The Linear-family op whose GEMM a node runs (Linear, LinearGradInput, LinearGradWeight), or the node's own op.
OpKind gemm_role(const Node& n) {
  if (!pointwise_conv(n)) return n.op;
  return n.op == OpKind::Conv2d ? OpKind::Linear
         : n.op == OpKind::Conv2dGradInput ? OpKind::LinearGradInput
                                           : OpKind::LinearGradWeight;
}


CudaBackend::~CudaBackend() {
  for (cudaGraphExec_t e : exec_)
    if (e) TRCTL_CUDA_WARN(cudaGraphExecDestroy(e));
  for (auto& pair : fed_exec_)
    for (cudaGraphExec_t e : pair)
      if (e) TRCTL_CUDA_WARN(cudaGraphExecDestroy(e));
  if (copy_stream_) {
    TRCTL_CUDA_WARN(cudaStreamSynchronize(copy_stream_));
    for (int k = 0; k < 2; ++k) {
      TRCTL_CUDA_WARN(cudaEventDestroy(copy_done_[k]));
      TRCTL_CUDA_WARN(cudaEventDestroy(step_done_[k]));
    }
    TRCTL_CUDA_WARN(cudaStreamDestroy(copy_stream_));
  }
  if (comm_) TRCTL_CUDA_WARN(cudaStreamSynchronize(ctx_.stream));  // steps holding collectives
  comm_.reset();  // waits for its stream, then finalizes the communicator
  for (cudaEvent_t e : step_events_) TRCTL_CUDA_WARN(cudaEventDestroy(e));
  TRCTL_CUDA_WARN(cudaFree(side_ws_));
  TRCTL_CUDA_WARN(cudaFree(side_dw_));
  gemm_.clear();
  for (void* p : scratch_) TRCTL_CUDA_WARN(cudaFree(p));
  TRCTL_CUDA_WARN(cudaFree(class_weights_));
  if (nvml_.lib) nvml_meter_close(&nvml_);
  for (const ReluFusion& rf : relu_fusions_) TRCTL_CUDA_WARN(cudaFree(rf.mask));
  for (auto& s : split_) {
    TRCTL_CUDA_WARN(cudaFree(s.pixels));
    TRCTL_CUDA_WARN(cudaFree(s.labels));
    TRCTL_CUDA_WARN(cudaFree(s.order));
  }
  conv_.clear();
  TRCTL_CUDA_WARN(cudaFree(conv_ws_));
  TRCTL_CUDA_WARN(cudaFree(bn_ws_));
  TRCTL_CUDA_WARN(cudaFree(conv_bn_sums_mem_));
  TRCTL_CUDA_WARN(cudaFree(pool_xa_mem_));
  TRCTL_CUDA_WARN(cudaFree(bn_bwd_eq_));
  TRCTL_CUDA_WARN(cudaFree(lowp_dw_));
  TRCTL_CUDA_WARN(cudaFree(bias_ws_));
  for (void* b : {pad_x_, pad_dx_, pad_w_, s2d_z_, s2d_w_}) TRCTL_CUDA_WARN(cudaFree(b));
  TRCTL_CUDA_WARN(cudaFree(lowp_weights_));
  TRCTL_CUDA_WARN(cudaFree(inject_steps_));
  TRCTL_CUDA_WARN(cudaFree(clip_ws_));
  TRCTL_CUDA_WARN(cudaFree(lars_mem_));
  TRCTL_CUDA_WARN(cudaFree(arena_));
  if (loss_host_) {
    TRCTL_CUDA_WARN(cudaEventDestroy(loss_event_));
    TRCTL_CUDA_WARN(cudaFreeHost(loss_host_));
  }
}

Status CudaBackend::init() {
  amp_ = c_.spec.train.precision;
  const int device = dist_.enabled ? dist_.local_rank : 0;  // one process per GPU: LOCAL_RANK picks it
  if (dist_.enabled && device >= cuda_device_count())
    return Error{ErrCode::NotSupported, "LOCAL_RANK",
                 "LOCAL_RANK=" + std::to_string(device) + " but this host has " + std::to_string(cuda_device_count()) +
                     " CUDA device(s) visible"};
  Result<CudaContext> ctx = cuda_context_create(device);
  if (!ctx.ok()) return ctx.errors();
  ctx_ = std::move(ctx.value());
  int64_t total = 0;
  std::array<int64_t, kRegionCount> off{};
  for (int r = 0; r < kRegionCount; ++r) {
    off[r] = total;
    total += align_up(c_.plan.region_bytes[r]);
  }
  size_t free_b = 0, total_b = 0;
  TRCTL_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
  if (static_cast<size_t>(total) > free_b) {
    std::string regions;
    for (int r = 0; r < kRegionCount; ++r)
      regions += std::string(r ? ", " : "") + to_string(static_cast<Region>(r)) + " " +
                 std::to_string(c_.plan.region_bytes[r]);
    return Error{ErrCode::Invalid, "cuda backend",
                 "the memory plan needs " + std::to_string(total) + " bytes but the device has " +
                     std::to_string(free_b) + " free (regions: " + regions + ")"};
  }
  TRCTL_CUDA_TRY(cudaMalloc(&arena_, static_cast<size_t>(total)));
  TRCTL_CUDA_TRY(cudaMemsetAsync(arena_, 0, static_cast<size_t>(total), ctx_.stream));  // ordered with the step
  for (int r = 0; r < kRegionCount; ++r) region_[r] = arena_ + off[r];
  if (lowp()) {
    TRCTL_CUDA_TRY(cudaMalloc(&lowp_weights_, static_cast<size_t>(c_.plan.weights_bytes / 2 + kAlign)));
  }
  if (const auto& inj = c_.spec.debug.inject_nonfinite_grad_steps; !inj.empty()) {
    TRCTL_CUDA_TRY(cudaMalloc(&inject_steps_, inj.size() * sizeof(int64_t)));
    if (Status st = copy_to_device(inject_steps_, inj.data(), inj.size() * sizeof(int64_t)); !st.ok()) return st;
    inject_count_ = static_cast<int32_t>(inj.size());
  }
  DeviceState s{};
  const OptimizerSpec& o = c_.spec.optimizer;
  const bool sgd_like = o.kind == OptimizerKind::Sgd || o.kind == OptimizerKind::Lars;
  s.opt = sgd_like ? opt_hyper_sgd(o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov)
                   : opt_hyper_adam(o.lr, o.beta1, o.beta2, o.eps, o.weight_decay);
  if (o.kind == OptimizerKind::Lars) s.opt.eps = o.eps;  // the trust ratio's eps
  if (Status st = plan_optimizer_extras(); !st.ok()) return st;
  // The plan's parameter groups, one per update range (memplan: ranges in group order).
  const std::vector<UpdateRange>& ranges = c_.plan.update_ranges;
  if (ranges.empty() || ranges.size() > static_cast<size_t>(kMaxOptGroups))
    return Error{ErrCode::Internal, "cuda backend",
                 std::to_string(ranges.size()) + " optimizer groups (1 to " + std::to_string(kMaxOptGroups) + " supported)"};
  s.opt.groups = static_cast<int32_t>(ranges.size());
  for (size_t k = 0; k < ranges.size(); ++k) {
    const ParamGroupInfo& pg = c_.graph.param_groups[static_cast<size_t>(ranges[k].group)];
    if (ranges[k].group != static_cast<int32_t>(k))
      return Error{ErrCode::Internal, "cuda backend", "optimizer update ranges out of group order"};
    s.opt.group[k].end = ranges[k].end / 4;
    s.opt.group[k].lr = pg.lr;
    s.opt.group[k].weight_decay = pg.weight_decay;
  }
  s.scaler = GradScalerState{};
  if (Status st = copy_to_device(state(), &s, sizeof s); !st.ok()) return st;
  for (const Program& p : c_.graph.programs) {
    const size_t ce = std::max(softmax_ce_workspace_bytes(p.batch), loss_cuda_workspace_bytes(p.batch));
    void* buf = nullptr;
    TRCTL_CUDA_TRY(cudaMalloc(&buf, static_cast<size_t>(align_up(static_cast<int64_t>(ce)))));
    scratch_.push_back(buf);
    ce_ws_bytes_.push_back(static_cast<size_t>(align_up(static_cast<int64_t>(ce))));
  }
  exec_.assign(c_.graph.programs.size(), nullptr);
  runs_.assign(c_.graph.programs.size(), 0);
  Status st = plan_gemms();
  if (st.ok()) st = plan_losses();
  if (st.ok()) st = plan_cnn();
  for (const Program& p : c_.graph.programs)
    for (const Node& n : p.nodes)
      if (n.op == OpKind::LinearGradBias) {
        const int64_t cols = c_.graph.values[n.out[0]].shape.numel();
        bias_ws_bytes_ = std::max(bias_ws_bytes_,
                                  bias_grad_workspace_bytes(c_.graph.values[n.in[0]].shape.numel() / cols, cols));
      }
  if (st.ok() && bias_ws_bytes_ > 0) TRCTL_CUDA_TRY(cudaMalloc(&bias_ws_, bias_ws_bytes_));
  if (st.ok() && dist_.enabled) st = dist_init();
  return st;
}

// One cuBLASLt plan per GEMM node, chosen now so nothing is planned while the step runs.
// ReLU backward into the dX GEMM: Linear+ReLU forward with RELU_AUX_BIAS (a bit mask of x >= 0), the next layer's
// dX GEMM with DRELU reading it, straight into the ReluGrad node's output. Only where the dX GEMM's result has no
// other use, and only where the plan did not place the ReluGrad's output over the GEMM's input: the planner
// defines that value at the ReluGrad node, one position after the GEMM, so it may reuse the GEMM's input storage,
// and writing it from the GEMM would then be an in-place GEMM (a race). (cuBLASLt passes the gradient at a
// pre-activation of exactly 0, torch does not: measure zero.)
bool CudaBackend::early_write_safe(int program, ValueId v, size_t at) const {
  return memplan_early_write_safe(c_.graph, c_.plan, program, v, static_cast<int64_t>(at));
}

void CudaBackend::find_relu_fusions() {
  for (size_t pi = 0; pi < c_.graph.programs.size(); ++pi) {
    const Program& p = c_.graph.programs[pi];
    if (p.kind != ProgramKind::Train) continue;
    std::map<ValueId, size_t> producer;
    std::map<ValueId, int> uses;
    for (size_t i = 0; i < p.nodes.size(); ++i) {
      for (ValueId v : p.nodes[i].out) producer[v] = i;
      for (ValueId v : p.nodes[i].in) ++uses[v];
    }
    for (size_t r = 0; r < p.nodes.size(); ++r) {
      const Node& rg = p.nodes[r];
      if (rg.op != OpKind::ReluGrad || !producer.count(rg.in[0]) || !producer.count(rg.in[1])) continue;
      const size_t gi = producer[rg.in[0]], f = producer[rg.in[1]];
      const Node &dgrad = p.nodes[gi], &fwd = p.nodes[f];
      if (dgrad.op != OpKind::LinearGradInput || dgrad.attrs.accumulate || uses[rg.in[0]] != 1) continue;
      if (fwd.op != OpKind::Linear || !fwd.attrs.relu || fwd.in.size() != 3) continue;
      if (!early_write_safe(static_cast<int>(pi), rg.out[0], gi)) continue;  // would write over a live value
      relu_fusions_.push_back({static_cast<int>(pi), f, gi, r, nullptr});
    }
  }
}

Status CudaBackend::plan_gemms() {
  find_relu_fusions();
  for (ReluFusion& rf : relu_fusions_) {
    const Shape& y = c_.graph.values[c_.graph.programs[rf.program].nodes[rf.forward].out[0]].shape;
    TRCTL_CUDA_TRY(cudaMalloc(&rf.mask, lt_gemm_relu_mask_bytes(y.dims[0], y.dims[1])));
  }
  const GpuDType act = act_type();
  const GemmMath math = amp_ == Precision::Tf32 ? GemmMath::FastTf32 : GemmMath::Default;
  for (size_t pi = 0; pi < c_.graph.programs.size(); ++pi) {
    const Program& p = c_.graph.programs[pi];
    for (size_t i = 0; i < p.nodes.size(); ++i) {
      const Node& n = p.nodes[i];
      // Shapes as matrices: rows = every dim but the last (a pointwise convolution's N*H*W), cols = the last.
      auto cols = [&](ValueId v) { return c_.graph.values[v].shape.dims.back(); };
      auto rows = [&](ValueId v) { return c_.graph.values[v].shape.numel() / cols(v); };
      GemmDesc d;
      d.ab_type = act;
      d.d_type = act;
      d.math = math;
      d.min_alignment = 16;
      const OpKind role = gemm_role(n);
      if (role == OpKind::Linear) {  // Y (R,M) = X (R,K) W (M,K)^T [+ b] [ReLU]
        d.m = rows(n.in[0]);
        d.k = cols(n.in[0]);
        d.n = c_.graph.values[n.in[1]].shape.dims[0];
        d.trans_b = true;
        const bool bias = n.in.size() == 3;
        // The bias is read from the same copy as the weight (fp16/bf16 under AMP, as autocast casts it).
        d.epilogue = bias ? (n.attrs.relu ? GemmEpilogue::ReluBias : GemmEpilogue::Bias) : GemmEpilogue::None;
      } else if (role == OpKind::LinearGradInput) {  // dX (R,K) = dY (R,M) W (M,K) [+ C, a gradient sum]
        d.m = rows(n.in[0]);
        d.k = cols(n.in[0]);
        d.n = cols(n.in[1]);
        if (n.attrs.accumulate) d.beta = 1.0f;  // a gradient sum (pass_fuse_grad_accumulate): C = in[2]
      } else if (role == OpKind::LinearGradWeight) {  // dW (M,K) = dY^T (M,R) X (R,K)
        d.m = cols(n.in[0]);
        d.k = rows(n.in[0]);
        d.n = cols(n.in[1]);
        d.trans_a = true;
        d.d_type = GpuDType::F32;
        // db (M) = row sums of dY^T, fused into this GEMM (BGRADB) when the program asks for it.
        for (size_t j = 0; j < p.nodes.size(); ++j)
          if (p.nodes[j].op == OpKind::LinearGradBias && p.nodes[j].in[0] == n.in[0]) {
            GemmDesc fused = d;
            fused.epilogue = GemmEpilogue::BiasGradA;
            Result<LtGemmPlan> fp = lt_gemm_plan(ctx_, fused);
            if (!fp.ok()) break;  // no engine for the epilogue: the separate deterministic kernel runs instead
            gemm_.emplace(std::make_pair(static_cast<int>(pi), i), std::move(fp.value()));
            bias_into_gemm_[{static_cast<int>(pi), j}] = i;
            break;
          }
        if (gemm_.count({static_cast<int>(pi), i})) continue;
      } else {
        continue;
      }
      if (const ReluFusion* rf = relu_fusion(static_cast<int>(pi), i)) {
        GemmDesc fused = d;
        fused.epilogue = rf->forward == i ? GemmEpilogue::ReluAuxBias : GemmEpilogue::DRelu;
        Result<LtGemmPlan> fp = lt_gemm_plan(ctx_, fused);
        if (!fp.ok()) return fp.errors();  // both epilogues were checked on sm_90 (tests/gpu/gemm_test.cpp)
        gemm_.emplace(std::make_pair(static_cast<int>(pi), i), std::move(fp.value()));
        continue;
      }
      Result<LtGemmPlan> plan = lt_gemm_plan(ctx_, d);
      if (!plan.ok()) return plan.errors();
      gemm_.emplace(std::make_pair(static_cast<int>(pi), i), std::move(plan.value()));
    }
  }
  return ok_status();
}

// The GEMM nodes: forward Linear (bias/ReLU epilogues, ReLU mask when fused), dX (DRELU when fused, then writing
// the ReluGrad's output), dW (bias gradient when fused).
Status CudaBackend::lower_gemm_node(int program, size_t i, std::vector<Launch>& out) {
  const Program& p = c_.graph.programs[program];
  const Node& n = p.nodes[i];
  const cudaStream_t s = ctx_.stream;
  const GpuDType act = act_type();
  auto numel = [&](ValueId v) { return c_.graph.values[v].shape.numel(); };
  auto gemm = [&](GemmArgs args) {
    LtGemmPlan* plan = &gemm_.at({program, i});
    out.push_back([this, plan, args] { return lt_gemm_run(ctx_, *plan, args); });
  };
  switch (gemm_role(n)) {
    case OpKind::Linear: {
      GemmArgs a;
      a.a = at(n.in[0]);
      a.b = weight_ptr(n.in[1]);
      a.d = at(n.out[0]);
      if (n.in.size() == 3) a.bias = const_cast<void*>(weight_ptr(n.in[2]));
      if (const ReluFusion* rf = relu_fusion(program, i)) a.aux = rf->mask;
      gemm(a);
      if (n.attrs.relu && n.in.size() == 2) {
        void* y = at(n.out[0]);
        const int64_t cnt = numel(n.out[0]);
        out.push_back([s, y, cnt, act] { return relu_fwd_cuda(s, y, y, cnt, act); });
      }
      return ok_status();
    }
    case OpKind::LinearGradInput: {
      GemmArgs a;
      a.a = at(n.in[0]);
      a.b = weight_ptr(n.in[1]);
      a.d = at(n.out[0]);
      if (const ReluFusion* rf = relu_fusion(program, i)) {  // DRELU: write the ReluGrad's output directly
        a.aux = rf->mask;
        a.d = at(p.nodes[rf->relu_grad].out[0]);
      }
      if (n.attrs.accumulate) a.c = at(n.in[2]);  // D = dY W + C (beta = 1): the gradient sum
      gemm(a);
      return ok_status();
    }
    case OpKind::LinearGradWeight: {
      GemmArgs a;
      a.a = at(n.in[0]);
      a.b = at(n.in[1]);
      a.d = at(n.out[0]);
      for (const auto& [key, gemm_node] : bias_into_gemm_)
        if (key.first == program && gemm_node == i) a.bias = at(p.nodes[key.second].out[0]);
      gemm(a);
      // train.grad_check auto: this gradient's non-finite check reads its fp16 operands, while they are live.
      for (const GradCheckOperands& o : grad_check_of(program).operands) {
        if (o.node != i) continue;
        int32_t* flag = &state()->scaler.found_inf;
        const void *dy = at(o.dy), *x = at(o.x);
        const int64_t ndy = numel(o.dy), nx = numel(o.x);
        out.push_back([s, dy, x, ndy, nx, flag] {
          Status st = grad_check_nonfinite_cuda(s, dy, GpuDType::F16, ndy, flag);
          return st.ok() ? grad_check_nonfinite_cuda(s, x, GpuDType::F16, nx, flag) : st;
        });
      }
      return ok_status();
    }
    default:
      return Error{ErrCode::Internal, "cuda backend", std::string("not a GEMM node: ") + to_string(n.op)};
  }
}

Status CudaBackend::lower_node(int program, size_t i, std::vector<Launch>& out) {
  const Program& p = c_.graph.programs[program];
  const Node& n = p.nodes[i];
  const cudaStream_t s = ctx_.stream;
  const GpuDType act = act_type();
  auto numel = [&](ValueId v) { return c_.graph.values[v].shape.numel(); };
  switch (n.op) {
    case OpKind::Flatten:
    case OpKind::Accuracy:
    case OpKind::MetricAccumulate:
    case OpKind::SoftmaxCrossEntropyGrad:  // folded into the fused loss kernel
      return ok_status();
    case OpKind::Linear:
    case OpKind::LinearGradInput:
    case OpKind::LinearGradWeight:
      return lower_gemm_node(program, i, out);
    case OpKind::Conv2d:
    case OpKind::Conv2dGradInput:
    case OpKind::Conv2dGradWeight:  // pointwise convolutions are GEMMs (plan_gemms planned them)
      if (gemm_.count({program, i})) return lower_gemm_node(program, i, out);
      return lower_cnn_node(program, i, out);
    case OpKind::LinearGradBias: {
      if (bias_into_gemm_.count({program, i})) return ok_status();  // computed by the dW GEMM's epilogue
      const void* dy = at(n.in[0]);
      float* db = reinterpret_cast<float*>(at(n.out[0]));
      const int64_t cols = numel(n.out[0]), rows = numel(n.in[0]) / cols;  // conv biases: rows = N*P*Q
      void* ws = bias_ws_;
      const size_t wsb = bias_ws_bytes_;
      out.push_back([=] { return bias_grad_large_cuda(s, dy, act, rows, cols, db, ws, wsb); });
      return ok_status();
    }
    case OpKind::ZeroFill: {  // a gradient known to be 0 (a folded conv bias): a memset node in the captured step
      void* y = at(n.out[0]);
      const size_t bytes = static_cast<size_t>(stored_bytes(c_.graph, n.out[0]));
      out.push_back([s, y, bytes] { return zero_cuda(s, y, bytes); });
      return ok_status();
    }
    case OpKind::Relu: {
      const void* x = at(n.in[0]);
      void* y = at(n.out[0]);
      const int64_t cnt = numel(n.in[0]);
      out.push_back([s, x, y, cnt, act] { return relu_fwd_cuda(s, x, y, cnt, act); });
      return ok_status();
    }
    case OpKind::ReluGrad: {
      if (relu_fusion(program, i)) return ok_status();  // done by the dX GEMM's DRELU epilogue
      const void *dy = at(n.in[0]), *y = at(n.in[1]);
      void* dx = at(n.out[0]);
      const int64_t cnt = numel(n.in[0]);
      out.push_back([s, y, dy, dx, cnt, act] { return relu_bwd_cuda(s, y, dy, dx, cnt, act); });
      return ok_status();
    }
    case OpKind::Dropout:
    case OpKind::DropoutGrad: {
      const uint32_t* key = c_.graph.accumulate_steps > 1 ? &state()->key : &state()->step;  // see step_book
      const DropoutParams prm = dropout_params(n.attrs.p, seed_, n.attrs.op_id, key);
      const void* x = at(n.in[0]);
      void* y = at(n.out[0]);
      const int64_t cnt = numel(n.in[0]);
      const bool fwd = n.op == OpKind::Dropout;
      out.push_back([s, prm, x, y, cnt, act, fwd] {
        return fwd ? dropout_fwd_cuda(s, prm, x, y, cnt, act) : dropout_bwd_cuda(s, prm, x, y, cnt, act);
      });
      return ok_status();
    }
    case OpKind::SoftmaxCrossEntropy: {
      SoftmaxCeArgs a;
      a.logits = at(n.in[0]);
      a.logits_type = act;
      a.labels = reinterpret_cast<const int32_t*>(at(n.in[1]));
      a.rows = c_.graph.values[n.in[0]].shape.dims[0];
      a.classes = c_.graph.values[n.in[0]].shape.dims[1];
      a.label_smoothing = n.attrs.label_smoothing;
      a.loss_scale = scaled() ? &state()->scaler.scale : nullptr;
      for (const Node& g : p.nodes)
        if (g.op == OpKind::SoftmaxCrossEntropyGrad && g.in[0] == n.in[0]) {
          if (!early_write_safe(program, g.out[0], i))
            return Error{ErrCode::Internal, "cuda backend", "the plan shares the gradient of the logits with a live value"};
          a.dlogits = at(g.out[0]);
          a.grad_scale = g.attrs.grad_scale;  // 1 / train.accumulate_steps
        }
      a.dlogits_type = act;
      a.workspace = scratch_[program];
      a.workspace_bytes = ce_ws_bytes_[program];
      a.loss = reinterpret_cast<float*>(at(p.loss));
      a.loss_sum = reinterpret_cast<double*>(at(p.loss_sum));
      a.correct = reinterpret_cast<int32_t*>(at(p.correct));
      a.correct5 = reinterpret_cast<int32_t*>(at(p.correct5));
      a.bad_labels = &state()->bad_labels;
      out.push_back([s, a] { return softmax_ce_cuda(s, a); });
      return ok_status();
    }
    case OpKind::Add:
      return lower_cnn_node(program, i, out);
    case OpKind::BatchNorm:
    case OpKind::BatchNormEval:
    case OpKind::BatchNormGrad:
    case OpKind::MaxPool:
    case OpKind::MaxPoolGrad:
    case OpKind::AvgPool:
    case OpKind::AvgPoolGrad:
    case OpKind::GlobalAvgPool:
    case OpKind::GlobalAvgPoolGrad:
      return lower_cnn_node(program, i, out);
    case OpKind::Activation:
    case OpKind::ActivationGrad:
    case OpKind::Loss:
    case OpKind::LossGrad:
    case OpKind::BinaryAccuracy:
      return lower_act_loss_node(program, i, out);
    case OpKind::GradAccumulate: {  // one launch over the gradient layout and the accumulators' copy after it
      char* grads = region_[static_cast<int>(Region::Grads)];
      float* g = reinterpret_cast<float*>(grads);
      float* acc = reinterpret_cast<float*>(grads + c_.plan.grad_accum_offset);
      const int64_t cnt = c_.plan.grad_accum_offset / 4;
      const bool flush = n.attrs.flush;
      out.push_back([s, g, acc, cnt, flush] { return grad_accumulate_cuda(s, g, acc, cnt, flush); });
      return ok_status();
    }
    case OpKind::OptimizerStep:
      return lower_optimizer(program, out);
  }
  return Error{ErrCode::Internal, "cuda backend", std::string("no lowering for ") + to_string(n.op)};
}

// A train step counts itself (an optimizer step: not a micro-batch; dropout's key without accumulation) and clears
// found_inf; with train.accumulate_steps k > 1 it also computes its micro-batch's dropout key (as the CPU backend's
// run(): (optimizer steps done) * k + (micro-batches of this step before it) + 1) and counts the micro-batches.
StepBookkeeping CudaBackend::step_book(const Program& p) const {
  StepBookkeeping book;
  if (p.kind != ProgramKind::Train) return book;
  DeviceState* st = state();
  if (!p.micro) book.step = &st->step;
  book.clear = &st->scaler.found_inf;
  if (c_.graph.accumulate_steps > 1) {
    book.key = &st->key;
    book.micro = &st->micro;
    book.steps = &st->step;
    book.accumulate = static_cast<uint32_t>(c_.graph.accumulate_steps);
    book.flush = !p.micro;
  }
  return book;
}

// The step's first launch: gather the program's batch from the resident split and transform it.
Result<Launch> CudaBackend::batch_fetch(int program) {
  const Program& p = c_.graph.programs[program];
  if (fed_) {  // the batch is already in the input slot (load_batch): only the step's bookkeeping
    const StepBookkeeping book = step_book(p);
    const cudaStream_t s = ctx_.stream;
    return Launch([s, book] { return step_bookkeeping_cuda(s, book); });
  }
  const DataSplit split = p.kind == ProgramKind::Train ? DataSplit::Train : DataSplit::Val;
  const SplitData& sd = split_[static_cast<int>(split)];
  if (!sd.uploaded) return Error{ErrCode::Internal, "cuda backend", "program " + p.name + " run before its data"};
  // The split's own transform size: eval programs are compiled at the val_transforms' size, train ones at theirs.
  const Shape& in = c_.graph.values[p.input].shape;
  if (in.dims[1] != sd.pipeline.out_h || in.dims[2] != sd.pipeline.out_w)
    return Error{ErrCode::Internal, "cuda backend",
                 "program " + p.name + " takes " + in.str() + " but its split's transforms give " +
                     std::to_string(sd.pipeline.out_h) + "x" + std::to_string(sd.pipeline.out_w) + " samples"};
  const cudaStream_t s = ctx_.stream;
  DeviceState* st = state();
  ResidentSplit rs{sd.pixels, sd.labels, sd.order, sd.n, &st->cursor[static_cast<int>(split)],
                   &st->epoch[static_cast<int>(split)]};
  const GpuPipeline pipe = sd.pipeline;
  void* x = at(p.input);
  int32_t* y = reinterpret_cast<int32_t*>(at(p.label));
  const GpuDType act = act_type();
  const uint64_t seed = seed_;
  const int64_t batch = p.batch;
  const StepBookkeeping book = step_book(p);
  return Launch([s, pipe, rs, seed, batch, x, act, y, book] {
    return augment_batch_cuda(s, pipe, rs, seed, batch, x, act, y, book);
  });
}

Result<std::vector<Launch>> CudaBackend::lower(int program) {
  const Program& p = c_.graph.programs[program];
  Result<Launch> fetch = batch_fetch(program);
  if (!fetch.ok()) return fetch.errors();
  std::vector<Launch> out = {fetch.value()};
  std::multimap<size_t, cudaEvent_t> joins;  // train.conv_wgrad_overlap: node index -> a forked node's done event
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    for (auto [it, end] = joins.equal_range(i); it != end; ++it) out.push_back(join_launch(it->second));
    Status ok = comm_ ? dist_before_node(program, i, out) : ok_status();
    if (ok.ok() && wgrad_side_.count({program, i})) {  // runs beside nodes i + 1 .. i + overlap
      cudaEvent_t done = nullptr;
      ok = lower_forked_wgrad(program, i, out, &done);
      joins.emplace(i + 1 + static_cast<size_t>(p.nodes[i].attrs.overlap), done);
    } else if (ok.ok()) {
      ok = lower_node(program, i, out);
    }
    if (ok.ok() && comm_) ok = dist_after_node(program, i, out);
    if (!ok.ok()) return ok.errors();
  }
  for (auto it = joins.lower_bound(p.nodes.size()); it != joins.end(); ++it) out.push_back(join_launch(it->second));
  return out;
}

Result<cudaEvent_t> CudaBackend::step_event() {
  cudaEvent_t e = nullptr;
  TRCTL_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  step_events_.push_back(e);
  return e;
}

Status CudaBackend::capture(int program) { return capture_into(program, 0, &exec_[program]); }

Status CudaBackend::capture_into(int program, int slot, cudaGraphExec_t* exec) {
  input_slot_ = slot;  // at() of Inputs values resolves to this slot while the step is lowered
  Result<std::vector<Launch>> ops = lower(program);
  input_slot_ = 0;
  if (!ops.ok()) return ops.errors();
  // cuDNN loads its kernels on first use, which must not happen inside a capture: run those calls once first
  // (they write only activations and gradients, which every step overwrites).
  for (const Launch& l : warm_) {
    Status st = l();
    if (!st.ok()) return st;
  }
  warm_.clear();
  TRCTL_CUDA_TRY(cudaStreamSynchronize(ctx_.stream));
  cudaGraph_t graph = nullptr;
  TRCTL_CUDA_TRY(cudaStreamBeginCapture(ctx_.stream, cudaStreamCaptureModeThreadLocal));
  Status st = ok_status();
  for (const Launch& l : ops.value()) {
    st = l();
    if (!st.ok()) break;
  }
  const cudaError_t end = cudaStreamEndCapture(ctx_.stream, &graph);
  if (!st.ok()) {
    if (graph) cudaGraphDestroy(graph);
    return st;
  }
  TRCTL_CUDA_TRY(end);
  // train.conv_wgrad_priority low: the kernels keep the priority of the stream they were captured on (the side
  // stream's forked weight gradients the least); otherwise every node runs at the launch stream's.
  const bool node_priority = c_.spec.train.conv_wgrad_low_priority && !wgrad_side_.empty();
  const cudaError_t inst =
      cudaGraphInstantiate(exec, graph, node_priority ? cudaGraphInstantiateFlagUseNodePriority : 0);
  TRCTL_CUDA_WARN(cudaGraphDestroy(graph));
  TRCTL_CUDA_TRY(inst);
  return ok_status();
}

OutDType CudaBackend::host_input_dtype() const {
  return amp_ == Precision::Fp16 ? OutDType::F16 : amp_ == Precision::Bf16 ? OutDType::BF16 : OutDType::F32;
}

void* CudaBackend::host_alloc(size_t bytes) {
  void* p = nullptr;
  return cudaHostAlloc(&p, bytes, cudaHostAllocDefault) == cudaSuccess ? p : nullptr;
}

void CudaBackend::host_free(void* p) { TRCTL_CUDA_WARN(cudaFreeHost(p)); }

Status CudaBackend::load_batch(int program, int slot, const void* x, const int32_t* y, int64_t n) {
  const Program& p = c_.graph.programs[program];
  if (n != p.batch || slot < 0 || slot > 1)
    return Error{ErrCode::Internal, "cuda backend", "batch of " + std::to_string(n) + " in slot " + std::to_string(slot) +
                                                        " for program " + p.name};
  if (!copy_stream_) {
    TRCTL_CUDA_TRY(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    for (int k = 0; k < 2; ++k) {
      TRCTL_CUDA_TRY(cudaEventCreateWithFlags(&copy_done_[k], cudaEventDisableTiming));
      TRCTL_CUDA_TRY(cudaEventCreateWithFlags(&step_done_[k], cudaEventDisableTiming));
    }
    fed_exec_.assign(c_.graph.programs.size(), {nullptr, nullptr});
  }
  fed_ = true;
  const size_t elem = act_type() == GpuDType::F32 ? 4 : 2;
  const size_t bytes = static_cast<size_t>(c_.graph.values[p.input].shape.numel()) * elem;
  input_slot_ = slot;
  char* dx = at(p.input);
  char* dy = at(p.label);
  input_slot_ = 0;
  // The slot's previous step must have read it; the step before this one may still run meanwhile.
  TRCTL_CUDA_TRY(cudaStreamWaitEvent(copy_stream_, step_done_[slot], 0));
  TRCTL_CUDA_TRY(cudaMemcpyAsync(dx, x, bytes, cudaMemcpyHostToDevice, copy_stream_));
  TRCTL_CUDA_TRY(cudaMemcpyAsync(dy, y, static_cast<size_t>(n) * 4, cudaMemcpyHostToDevice, copy_stream_));
  TRCTL_CUDA_TRY(cudaEventRecord(copy_done_[slot], copy_stream_));
  // The caller reuses its (pinned) buffer after this returns: wait for the copy only, not for the GPU's step.
  TRCTL_CUDA_TRY(cudaEventSynchronize(copy_done_[slot]));
  return ok_status();
}

Status CudaBackend::run(int program, int slot) {
  if (!fed_ || slot < 0 || slot > 1)
    return Error{ErrCode::Internal, "cuda backend", "run() of a host-fed step before its load_batch"};
  cudaGraphExec_t& e = fed_exec_[program][slot];
  if (!e) {
    Status st = capture_into(program, slot, &e);
    if (!st.ok()) return st;
  }
  TRCTL_CUDA_TRY(cudaStreamWaitEvent(ctx_.stream, copy_done_[slot], 0));
  TRCTL_CUDA_TRY(cudaGraphLaunch(e, ctx_.stream));
  TRCTL_CUDA_TRY(cudaEventRecord(step_done_[slot], ctx_.stream));
  ++runs_[program];
  if (c_.graph.programs[program].kind == ProgramKind::Train && !c_.graph.programs[program].micro) ++step_;
  if (comm_) dist_note_launch(program);
  return ok_status();
}

Status CudaBackend::run_resident(int program, DataSplit) {
  if (fed_) return Error{ErrCode::Internal, "cuda backend", "a resident step after host-fed ones"};
  if (!exec_[program]) {
    Status st = capture(program);
    if (!st.ok()) return st;
  }
  TRCTL_CUDA_TRY(cudaGraphLaunch(exec_[program], ctx_.stream));
  ++runs_[program];
  if (c_.graph.programs[program].kind == ProgramKind::Train && !c_.graph.programs[program].micro) ++step_;
  if (comm_) dist_note_launch(program);
  return ok_status();
}

Status CudaBackend::upload_split(DataSplit split, const ImageDataset& data, const TransformPipeline& tf) {
  SplitData& sd = split_[static_cast<int>(split)];
  Result<GpuPipeline> pipe = gpu_pipeline_make(tf);
  if (!pipe.ok()) return pipe.errors();
  sd.pipeline = pipe.value();
  sd.n = data.n;
  sd.bytes = data.pixels.size();
  TRCTL_CUDA_TRY(cudaMalloc(&sd.pixels, data.pixels.size()));
  TRCTL_CUDA_TRY(cudaMalloc(&sd.labels, data.labels.size() * 4));
  TRCTL_CUDA_TRY(cudaMalloc(&sd.order, data.labels.size() * 4));
  Status st = copy_to_device(sd.pixels, data.pixels.data(), data.pixels.size());
  if (st.ok()) st = copy_to_device(sd.labels, data.labels.data(), data.labels.size() * 4);
  if (!st.ok()) return st;
  sd.uploaded = true;
  return ok_status();
}

Status CudaBackend::begin_epoch(DataSplit split, uint32_t epoch, const std::vector<int64_t>& order) {
  SplitData& sd = split_[static_cast<int>(split)];
  // The whole split, or (data parallelism) this rank's shard of it: runtime/dist/shard.h.
  if (order.empty() || static_cast<int64_t>(order.size()) > sd.n)
    return Error{ErrCode::Internal, "cuda backend", "epoch order longer than the split, or empty"};
  sd.host_order.assign(order.begin(), order.end());
  const int k = static_cast<int>(split);
  host_u32_[0] = 0;
  host_u32_[1] = epoch;
  TRCTL_CUDA_TRY(cudaMemcpyAsync(sd.order, sd.host_order.data(), sd.host_order.size() * 4, cudaMemcpyHostToDevice,
                                 ctx_.stream));
  TRCTL_CUDA_TRY(cudaMemcpyAsync(&state()->cursor[k], &host_u32_[0], 4, cudaMemcpyHostToDevice, ctx_.stream));
  TRCTL_CUDA_TRY(cudaMemcpyAsync(&state()->epoch[k], &host_u32_[1], 4, cudaMemcpyHostToDevice, ctx_.stream));
  TRCTL_CUDA_TRY(cudaStreamSynchronize(ctx_.stream));  // the host buffers are reused by the next call
  return ok_status();
}

void CudaBackend::set_lrs(const std::vector<double>& lrs) {
  if (lrs.size() != c_.graph.param_groups.size())
    throw std::logic_error("set_lrs: one learning rate per parameter group expected");
  host_lrs_ = lrs;
  for (size_t k = 0; k < lrs.size(); ++k)
    TRCTL_CUDA_WARN(cudaMemcpyAsync(&state()->opt.group[k].lr, &host_lrs_[k], sizeof(double), cudaMemcpyHostToDevice,
                                    ctx_.stream));
  TRCTL_CUDA_WARN(cudaStreamSynchronize(ctx_.stream));
}

void CudaBackend::set_lr(double lr) { set_lrs(std::vector<double>(c_.graph.param_groups.size(), lr)); }

int64_t CudaBackend::skipped_steps() {
  int32_t n = 0;
  TRCTL_CUDA_WARN(cudaStreamSynchronize(ctx_.stream));
  TRCTL_CUDA_WARN(cudaMemcpy(&n, &state()->opt.skipped, sizeof n, cudaMemcpyDeviceToHost));
  return n;
}

TrainState CudaBackend::save_state() {
  TrainState t;
  t.step = step_;
  DeviceState h{};
  TRCTL_CUDA_WARN(cudaStreamSynchronize(ctx_.stream));
  TRCTL_CUDA_WARN(cudaMemcpy(&h, state(), sizeof h, cudaMemcpyDeviceToHost));
  t.opt_updates = h.opt.step;
  if (scaled()) {
    t.loss_scale = h.scaler.scale;
    t.loss_scale_growth = h.scaler.growth_tracker;
  }
  return t;
}

Status CudaBackend::restore_state(const TrainState& t) {
  DeviceState h{};
  TRCTL_CUDA_TRY(cudaStreamSynchronize(ctx_.stream));
  TRCTL_CUDA_TRY(cudaMemcpy(&h, state(), sizeof h, cudaMemcpyDeviceToHost));
  step_ = t.step;
  h.step = static_cast<uint32_t>(t.step);
  h.micro = 0;  // checkpoints are taken between optimizer steps: no micro-batch of the next one has run
  h.opt.iter = static_cast<uint32_t>(t.step);
  h.opt.step = static_cast<int32_t>(t.updates());
  if (scaled() && t.step > 0) {  // an fp32 checkpoint (scale 1) resumed under fp16 keeps the fresh scaler
    if (t.loss_scale != 1.0f || t.loss_scale_growth != 0) {
      h.scaler.scale = t.loss_scale;
      h.scaler.growth_tracker = t.loss_scale_growth;
    }
  }
  return copy_to_device(state(), &h, sizeof h);
}

Status CudaBackend::seek_resident(DataSplit split, int64_t position) {
  const int k = static_cast<int>(split);
  if (position < 0 || position > split_[k].n)
    return Error{ErrCode::Internal, "cuda backend", "seek to " + std::to_string(position) + " outside the split"};
  host_u32_[3] = static_cast<uint32_t>(position);
  TRCTL_CUDA_TRY(cudaMemcpyAsync(&state()->cursor[k], &host_u32_[3], 4, cudaMemcpyHostToDevice, ctx_.stream));
  TRCTL_CUDA_TRY(cudaStreamSynchronize(ctx_.stream));
  return ok_status();
}

void CudaBackend::set_step(int64_t s) {
  step_ = s;
  host_u32_[2] = static_cast<uint32_t>(s);
  // As copy_to_device (ordered with the step stream), with warnings: set_step cannot fail.
  TRCTL_CUDA_WARN(cudaStreamSynchronize(ctx_.stream));
  TRCTL_CUDA_WARN(cudaMemcpyAsync(&state()->step, &host_u32_[2], 4, cudaMemcpyHostToDevice, ctx_.stream));
  TRCTL_CUDA_WARN(cudaStreamSynchronize(ctx_.stream));
}

Status CudaBackend::refresh_lowp_weights() {
  if (!lowp()) return ok_status();
  Status st = cast_cuda(ctx_.stream, region_[static_cast<int>(Region::Weights)], GpuDType::F32, lowp_weights_,
                        act_type(), c_.plan.weights_bytes / 4);
  if (!st.ok()) return st;
  TRCTL_CUDA_TRY(cudaStreamSynchronize(ctx_.stream));
  return ok_status();
}

// Host-to-device copy ordered with the step stream: ctx_.stream is non-blocking, so a plain cudaMemcpy (legacy
// stream) neither waits for kernels still queued on it nor is waited for by kernels launched after it (a pageable
// cudaMemcpy may even return before its DMA has landed). The GPU tests were bitten by exactly this (optimizer test,
// H200 run 2). Synchronous: the host buffer may be reused as soon as this returns.
Status CudaBackend::copy_to_device(void* dst, const void* src, size_t bytes) {
  TRCTL_CUDA_TRY(cudaStreamSynchronize(ctx_.stream));
  TRCTL_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx_.stream));
  TRCTL_CUDA_TRY(cudaStreamSynchronize(ctx_.stream));
  return ok_status();
}

Status CudaBackend::write_region(Region r, const std::vector<std::byte>& bytes) {
  if (static_cast<int64_t>(bytes.size()) != c_.plan.region_bytes[static_cast<int>(r)])
    return Error{ErrCode::Invalid, "cuda backend", std::string("region ") + to_string(r) + " size mismatch"};
  Status st = copy_to_device(region_[static_cast<int>(r)], bytes.data(), bytes.size());
  if (!st.ok()) return st;
  if (r == Region::Weights) return refresh_lowp_weights();
  return ok_status();
}

std::vector<std::byte> CudaBackend::read_region(Region r) {
  std::vector<std::byte> b(static_cast<size_t>(c_.plan.region_bytes[static_cast<int>(r)]));
  TRCTL_CUDA_WARN(cudaStreamSynchronize(ctx_.stream));
  TRCTL_CUDA_WARN(cudaMemcpy(b.data(), region_[static_cast<int>(r)], b.size(), cudaMemcpyDeviceToHost));
  return b;
}

// The loss copied behind the run into pinned memory, an event after it: take_loss waits for that event only.
void CudaBackend::request_loss(int program) {
  loss_requested_ = false;
  if (!loss_host_) {  // once (cudaHostAlloc may synchronize: not in a log window's steady state after the first)
    float* host = nullptr;
    if (cudaHostAlloc(reinterpret_cast<void**>(&host), sizeof(float), cudaHostAllocDefault) == cudaSuccess) {
      if (cudaEventCreateWithFlags(&loss_event_, cudaEventDisableTiming) == cudaSuccess)
        loss_host_ = host;
      else
        TRCTL_CUDA_WARN(cudaFreeHost(host));
    }
  }
  loss_requested_ = loss_host_ &&
                    cudaMemcpyAsync(loss_host_, at(c_.graph.programs[program].loss), sizeof(float),
                                    cudaMemcpyDeviceToHost, ctx_.stream) == cudaSuccess &&
                    cudaEventRecord(loss_event_, ctx_.stream) == cudaSuccess;
  if (!loss_requested_) loss_fallback_ = last_loss(program);  // synchronous, but this run's loss
}

double CudaBackend::take_loss() {
  if (!loss_requested_) return loss_fallback_;
  loss_requested_ = false;
  TRCTL_CUDA_WARN(cudaEventSynchronize(loss_event_));
  loss_fallback_ = *loss_host_;  // a second take_loss returns it again
  return loss_fallback_;
}

double CudaBackend::last_loss(int program) {
  float loss = 0;
  TRCTL_CUDA_WARN(cudaStreamSynchronize(ctx_.stream));
  TRCTL_CUDA_WARN(cudaMemcpy(&loss, at(c_.graph.programs[program].loss), 4, cudaMemcpyDeviceToHost));
  return loss;
}

ProgramMetrics CudaBackend::metrics(int program) {
  const Program& p = c_.graph.programs[program];
  double loss_sum = 0;
  int32_t correct = 0, correct5 = 0;
  TRCTL_CUDA_WARN(cudaStreamSynchronize(ctx_.stream));
  TRCTL_CUDA_WARN(cudaMemcpy(&loss_sum, at(p.loss_sum), 8, cudaMemcpyDeviceToHost));
  TRCTL_CUDA_WARN(cudaMemcpy(&correct, at(p.correct), 4, cudaMemcpyDeviceToHost));
  TRCTL_CUDA_WARN(cudaMemcpy(&correct5, at(p.correct5), 4, cudaMemcpyDeviceToHost));
  return {loss_sum, static_cast<double>(correct), static_cast<double>(runs_[program] * p.batch),
          static_cast<double>(correct5)};
}

void CudaBackend::reset_metrics() {
  for (size_t i = 0; i < c_.graph.programs.size(); ++i) {
    const Program& p = c_.graph.programs[i];
    TRCTL_CUDA_WARN(cudaMemsetAsync(at(p.loss_sum), 0, 8, ctx_.stream));
    TRCTL_CUDA_WARN(cudaMemsetAsync(at(p.correct), 0, 4, ctx_.stream));
    TRCTL_CUDA_WARN(cudaMemsetAsync(at(p.correct5), 0, 4, ctx_.stream));
    runs_[i] = 0;
  }
}

// What trctl allocated (the arena at the plan's size, the AMP weight copy, cuDNN / batch-norm / loss workspaces and
// the fused pools' x at the argmax (pool_xa_), the resident datasets), and the device's used memory including the
// CUDA context and library handles.
bool CudaBackend::device_memory(RunMemory* out) const {
  RunMemory m;
  for (const SplitData& sd : split_)
    m.resident_data += static_cast<int64_t>(sd.n) * 4 * 2 + (sd.uploaded ? static_cast<int64_t>(sd.bytes) : 0);
  size_t ws = conv_ws_bytes_ + bn_ws_bytes_ + bias_ws_bytes_ + ctx_.workspace_bytes +
              static_cast<size_t>(2 * pad_x_elems_ + pad_w_elems_) * 2 + s2d_z_bytes_ + s2d_w_bytes_ + pool_xa_bytes_ +
              side_ws_bytes_ + side_dw_bytes_;
  for (size_t b : ce_ws_bytes_) ws += b;
  for (const auto& [v, sums] : conv_bn_sums_) ws += static_cast<size_t>(c_.graph.values[v].shape.dims.back()) * 8;
  for (const auto& [v, fold] : bn_fold_) ws += static_cast<size_t>(fold.c) * 4;  // (2, C) f16 scale and shift
  m.workspaces = static_cast<int64_t>(ws);
  m.amp_weight_copy = lowp() ? c_.plan.weights_bytes / 2 : 0;
  m.plan = c_.plan.total_bytes();
  *out = m;
  return true;
}

std::string CudaBackend::memory_report() {
  auto mib = [](double b) { return std::to_string(static_cast<int64_t>(b / 1048576.0 + 0.5)) + " MiB"; };
  RunMemory m;
  device_memory(&m);
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) cudaGetLastError();
  return "device memory: plan " + mib(static_cast<double>(m.plan)) + " (activations " +
         mib(static_cast<double>(c_.plan.region_bytes[static_cast<int>(Region::Activations)])) + "), AMP weight copy " +
         mib(static_cast<double>(m.amp_weight_copy)) + ", workspaces " + mib(static_cast<double>(m.workspaces)) +
         ", resident data " + mib(static_cast<double>(m.resident_data)) +
         "; device used in all (CUDA context included) " + mib(static_cast<double>(total_b - free_b));
}

Status CudaBackend::synchronize() {
  TRCTL_CUDA_TRY(cudaStreamSynchronize(ctx_.stream));
  return ok_status();
}

}  // namespace cuda_detail

Result<std::unique_ptr<Backend>> make_cuda_backend(const Compiled& c, uint64_t seed) {
  return make_cuda_backend_dist(c, seed, DistEnv{});
}

Result<std::unique_ptr<Backend>> make_cuda_backend_dist(const Compiled& c, uint64_t seed, const DistEnv& dist) {
  auto be = std::make_unique<cuda_detail::CudaBackend>(c, seed, dist);
  Status st = be->init();
  if (!st.ok()) return st.errors();
  return std::unique_ptr<Backend>(std::move(be));
}

}  // namespace trctl
