// The CPU reference backend: one aligned allocation per region of the MemoryPlan, programs executed node by
// node with the CPU op references (runtime/ops/*). Computes in fp32 whatever precision the spec asks for.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "core/util/thread_pool.h"
#include "runtime/backend.h"
#include "runtime/ops/activation/activation.h"
#include "runtime/ops/add/add.h"
#include "runtime/ops/batchnorm/batchnorm.h"
#include "runtime/ops/dropout/dropout.h"
#include "runtime/ops/grad_accum/grad_accum.h"
#include "runtime/ops/linear/linear.h"
#include "runtime/ops/loss/loss.h"
#include "runtime/ops/optim/optim.h"
#include "runtime/ops/relu/relu.h"
#include "runtime/ops/softmax_ce/softmax_ce.h"

namespace trctl {
namespace {

struct AlignedBuffer {
  void* p = nullptr;
  explicit AlignedBuffer(int64_t bytes) {
    size_t n = static_cast<size_t>(align_up(bytes > 0 ? bytes : kAlign));
    p = std::aligned_alloc(kAlign, n);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, n);
  }
  ~AlignedBuffer() { std::free(p); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(const Compiled& c, uint64_t seed, int threads) : c_(c), seed_(seed), pool_(threads) {
    if (c.graph.storage != c.graph.compute)  // the CPU backend computes and stores in the compute dtype
      throw std::logic_error("cpu backend: a plan with activations stored narrower than the compute dtype");
    for (int r = 0; r < kRegionCount; ++r) regions_.emplace_back(std::make_unique<AlignedBuffer>(c.plan.region_bytes[r]));
    last_loss_.assign(c.graph.programs.size(), 0.0);
  }

  std::string name() const override { return "cpu"; }

  Status write_region(Region r, const std::vector<std::byte>& bytes) override {
    if (static_cast<int64_t>(bytes.size()) != c_.plan.region_bytes[static_cast<int>(r)])
      return Error{ErrCode::Invalid, "cpu backend", std::string("region ") + to_string(r) + " has " +
                                                        std::to_string(c_.plan.region_bytes[static_cast<int>(r)]) +
                                                        " bytes, got " + std::to_string(bytes.size())};
    std::memcpy(region(r), bytes.data(), bytes.size());
    return ok_status();
  }

  std::vector<std::byte> read_region(Region r) override {
    std::vector<std::byte> b(static_cast<size_t>(c_.plan.region_bytes[static_cast<int>(r)]));
    std::memcpy(b.data(), region(r), b.size());
    return b;
  }

  Status load_batch(int program, int slot, const void* xv, const int32_t* y, int64_t n) override {
    const float* x = static_cast<const float*>(xv);  // host_input_dtype() is F32
    const Program& p = c_.graph.programs[program];
    if (n != p.batch)
      return Error{ErrCode::Internal, "cpu backend", "batch of " + std::to_string(n) + " for program " + p.name};
    const int64_t count = c_.graph.values[p.input].shape.numel();
    if (c_.graph.compute == DType::F64) std::copy(x, x + count, ptr<double>(p.input, slot));
    else std::memcpy(ptr<float>(p.input, slot), x, static_cast<size_t>(count) * 4);
    std::memcpy(ptr<int32_t>(p.label, slot), y, static_cast<size_t>(n) * 4);
    return ok_status();
  }

  void set_lrs(const std::vector<double>& lrs) override {
    if (lrs.size() != c_.graph.param_groups.size())
      throw std::logic_error("set_lrs: one learning rate per parameter group expected");
    lrs_ = lrs;
  }
  void set_lr(double lr) override { lrs_.assign(c_.graph.param_groups.size(), lr); }
  int64_t step() const override { return step_; }
  void set_step(int64_t step) override {
    step_ = updates_ = step;
    micro_ = 0;
  }

  Status run(int program, int slot) override {
    const Program& p = c_.graph.programs[program];
    if (p.kind == ProgramKind::Train) {  // step_ counts optimizer steps: a micro-batch program does not advance it
      // Dropout's key: micro-batch j (0-based) of optimizer step s (1-based) draws with (s - 1) * k + j + 1, so each
      // micro-batch has its own masks and a run resumed at an optimizer step draws the same ones (k = 1: s).
      dropout_key_ = static_cast<uint32_t>(step_ * c_.graph.accumulate_steps + micro_ + 1);
      if (p.micro) {
        ++micro_;
      } else {
        ++step_;
        micro_ = 0;
      }
    }
    if (c_.graph.compute == DType::F64) {
      for (const Node& n : p.nodes) execute<double>(p, n, slot);
      last_loss_[program] = *ptr<double>(p.loss, slot);
    } else {
      for (const Node& n : p.nodes) execute<float>(p, n, slot);
      last_loss_[program] = *ptr<float>(p.loss, slot);
    }
    return ok_status();
  }

  double last_loss(int program) override { return last_loss_[program]; }
  void request_loss(int program) override { requested_loss_ = last_loss_[program]; }
  double take_loss() override { return requested_loss_; }

  ProgramMetrics metrics(int program) override {
    const Program& p = c_.graph.programs[program];
    return {*ptr<double>(p.loss_sum, 0), *ptr<double>(p.correct_sum, 0), *ptr<double>(p.count, 0),
            *ptr<double>(p.correct5_sum, 0)};
  }

  void reset_metrics() override {
    for (const Program& p : c_.graph.programs)
      for (ValueId v : {p.loss_sum, p.correct_sum, p.count, p.correct5_sum}) *ptr<double>(v, 0) = 0.0;
  }

 private:
  std::byte* region(Region r) { return static_cast<std::byte*>(regions_[static_cast<int>(r)]->p); }

  template <class T>
  T* ptr(ValueId v, int slot) {
    const Placement& pl = c_.plan.values[v];
    if (pl.offset < 0) throw std::logic_error("value not placed: " + c_.graph.values[v].name);
    int64_t off = pl.offset + (pl.region == Region::Inputs ? slot * c_.plan.input_slot_bytes : 0);
    return reinterpret_cast<T*>(region(pl.region) + off);
  }

  const Shape& shape(ValueId v) const { return c_.graph.values[v].shape; }

  // T: the plan's compute dtype (float, or double for gradient checks).
  template <class T>
  void execute(const Program& p, const Node& n, int slot) {
    auto f = [&](ValueId v) { return ptr<T>(v, slot); };
    switch (n.op) {
      case OpKind::Flatten:
        return;  // a view: same storage
      case OpKind::Linear: {
        const Shape& ws = shape(n.in[1]);
        linear_fwd_cpu<T>(f(n.in[0]), f(n.in[1]), n.in.size() == 3 ? f(n.in[2]) : nullptr, f(n.out[0]),
                              shape(n.in[0]).dims[0], ws.dims[1], ws.dims[0], n.attrs.relu, &pool_);
        return;
      }
      case OpKind::Relu:
        return relu_fwd_cpu<T>(f(n.in[0]), f(n.out[0]), shape(n.in[0]).numel());
      case OpKind::Dropout:
      case OpKind::DropoutGrad:
        return dropout_fwd_cpu<T>(f(n.in[0]), f(n.out[0]), shape(n.in[0]).numel(), n.attrs.p, seed_,
                                      n.attrs.op_id, dropout_key_);
      case OpKind::SoftmaxCrossEntropy: {
        const Shape& ls = shape(n.in[0]);
        *f(n.out[0]) = static_cast<T>(softmax_ce_fwd_cpu<T>(
            f(n.in[0]), ptr<int32_t>(n.in[1], slot), ls.dims[0], ls.dims[1], n.attrs.label_smoothing));
        return;
      }
      case OpKind::Accuracy: {
        const Shape& ls = shape(n.in[0]);
        *ptr<int32_t>(n.out[0], slot) = static_cast<int32_t>(
            accuracy_top1_cpu<T>(f(n.in[0]), ptr<int32_t>(n.in[1], slot), ls.dims[0], ls.dims[1]));
        *ptr<int32_t>(n.out[1], slot) = static_cast<int32_t>(
            accuracy_topk_cpu<T>(f(n.in[0]), ptr<int32_t>(n.in[1], slot), ls.dims[0], ls.dims[1], 5));
        return;
      }
      case OpKind::Activation:
        return activation_fwd_cpu<T>(n.attrs.act, n.attrs.act_param, f(n.in[0]), f(n.out[0]), shape(n.in[0]).numel());
      case OpKind::ActivationGrad:  // dY, X or Y -> dX
        return activation_grad_cpu<T>(n.attrs.act, n.attrs.act_param, f(n.in[0]), f(n.in[1]), f(n.out[0]),
                                      shape(n.in[0]).numel());
      case OpKind::Loss:
        *f(n.out[0]) = static_cast<T>(loss_fwd_cpu<T>(loss_desc(n), f(n.in[0]), ptr<int32_t>(n.in[1], slot)));
        return;
      case OpKind::LossGrad:
        return loss_grad_cpu<T>(loss_desc(n), f(n.in[0]), ptr<int32_t>(n.in[1], slot), f(n.out[0]),
                                n.attrs.grad_scale);
      case OpKind::BinaryAccuracy: {  // [, top-5: every usable row, a 2-class head's top-5 holds both classes]
        const int32_t* y = ptr<int32_t>(n.in[1], slot);
        const int64_t rows = shape(n.in[0]).dims[0];
        *ptr<int32_t>(n.out[0], slot) = static_cast<int32_t>(binary_accuracy_cpu<T>(f(n.in[0]), y, rows));
        int32_t usable = 0;
        for (int64_t r = 0; r < rows; ++r) usable += y[r] == 0 || y[r] == 1;
        if (n.out.size() == 2) *ptr<int32_t>(n.out[1], slot) = usable;
        return;
      }
      case OpKind::MetricAccumulate: {
        const double b = static_cast<double>(p.batch);
        *ptr<double>(n.out[0], slot) += static_cast<double>(*f(n.in[0])) * b;
        *ptr<double>(n.out[1], slot) += static_cast<double>(*ptr<int32_t>(n.in[1], slot));
        *ptr<double>(n.out[2], slot) += b;
        *ptr<double>(n.out[3], slot) += static_cast<double>(*ptr<int32_t>(n.in[2], slot));
        return;
      }
      case OpKind::SoftmaxCrossEntropyGrad: {
        const Shape& ls = shape(n.in[0]);
        return softmax_ce_grad_cpu<T>(f(n.in[0]), ptr<int32_t>(n.in[1], slot), f(n.out[0]), ls.dims[0],
                                          ls.dims[1], n.attrs.label_smoothing, n.attrs.grad_scale);
      }
      case OpKind::LinearGradInput: {  // [+ C: a fused gradient sum, pass_fuse_grad_accumulate]
        const Shape& ws = shape(n.in[1]);
        linear_grad_input_cpu<T>(f(n.in[0]), f(n.in[1]), f(n.out[0]), shape(n.in[0]).dims[0], ws.dims[1],
                                 ws.dims[0], &pool_);
        if (n.attrs.accumulate) add_cpu<T>(f(n.out[0]), f(n.in[2]), f(n.out[0]), shape(n.out[0]).numel());
        return;
      }
      case OpKind::LinearGradWeight: {
        const Shape& dws = shape(n.out[0]);
        return linear_grad_weight_cpu<T>(f(n.in[0]), f(n.in[1]), f(n.out[0]), shape(n.in[0]).dims[0],
                                             dws.dims[1], dws.dims[0], &pool_);
      }
      case OpKind::LinearGradBias: {  // sums over every dim but the last
        const int64_t cols = shape(n.out[0]).numel();
        return linear_grad_bias_cpu<T>(f(n.in[0]), f(n.out[0]), shape(n.in[0]).numel() / cols, cols, &pool_);
      }
      case OpKind::ZeroFill:  // a gradient known to be 0 (a folded conv bias): written every step, reads nothing
        std::memset(ptr<std::byte>(n.out[0], slot), 0, static_cast<size_t>(stored_bytes(c_.graph, n.out[0])));
        return;
      case OpKind::Conv2d:
        return conv2d_fwd_cpu<T>(conv_geom(n, n.in[0], n.in[1]), f(n.in[0]), f(n.in[1]),
                                 n.in.size() == 3 ? f(n.in[2]) : nullptr, f(n.out[0]), &pool_);
      case OpKind::Conv2dGradInput:
        conv2d_grad_input_cpu<T>(conv_geom(n, n.out[0], n.in[1]), f(n.in[0]), f(n.in[1]), f(n.out[0]), &pool_);
        if (n.attrs.accumulate) add_cpu<T>(f(n.out[0]), f(n.in[2]), f(n.out[0]), shape(n.out[0]).numel());
        return;
      case OpKind::Conv2dGradWeight:
        return conv2d_grad_weight_cpu<T>(conv_geom(n, n.in[1], n.out[0]), f(n.in[0]), f(n.in[1]), f(n.out[0]),
                                         &pool_);
      case OpKind::BatchNorm:
      case OpKind::BatchNormEval:
      case OpKind::BatchNormGrad:
        return batch_norm<T>(n, slot);
      case OpKind::MaxPool:
        maxpool2d_fwd_cpu<T>(pool_geom(n, n.in[0]), f(n.in[0]), f(n.out[0]));
        if (n.out.size() == 2) maxpool2d_argmax_cpu<T>(pool_geom(n, n.in[0]), f(n.in[0]), ptr<uint8_t>(n.out[1], slot));
        return;
      case OpKind::MaxPoolGrad:
        return maxpool2d_grad_cpu<T>(pool_geom(n, n.in[1]), f(n.in[0]), f(n.in[1]), f(n.out[0]));
      case OpKind::AvgPool:
        return avgpool2d_fwd_cpu<T>(pool_geom(n, n.in[0]), f(n.in[0]), f(n.out[0]));
      case OpKind::AvgPoolGrad:
        return avgpool2d_grad_cpu<T>(pool_geom(n, n.out[0]), f(n.in[0]), f(n.out[0]));
      case OpKind::GlobalAvgPool: {
        const Shape& xs = shape(n.in[0]);
        return global_avgpool_fwd_cpu<T>(f(n.in[0]), f(n.out[0]), xs.dims[0], xs.dims[1] * xs.dims[2], xs.dims[3]);
      }
      case OpKind::GlobalAvgPoolGrad: {
        const Shape& xs = shape(n.out[0]);
        return global_avgpool_grad_cpu<T>(f(n.in[0]), f(n.out[0]), xs.dims[0], xs.dims[1] * xs.dims[2], xs.dims[3]);
      }
      case OpKind::ReluGrad:
        return relu_grad_cpu<T>(f(n.in[0]), f(n.in[1]), f(n.out[0]), shape(n.in[0]).numel());
      case OpKind::Add:
        add_cpu<T>(f(n.in[0]), f(n.in[1]), f(n.out[0]), shape(n.in[0]).numel());
        if (n.attrs.relu) relu_fwd_cpu<T>(f(n.out[0]), f(n.out[0]), shape(n.out[0]).numel());
        return;
      case OpKind::GradAccumulate: {  // one pass over the gradient layout and its accumulator copy after it
        const int64_t off = c_.plan.grad_accum_offset, cnt = off / static_cast<int64_t>(sizeof(T));
        T* g = reinterpret_cast<T*>(region(Region::Grads));
        T* acc = reinterpret_cast<T*>(region(Region::Grads) + off);
        if (n.attrs.flush) grad_accum_flush_cpu<T>(g, acc, cnt);
        else grad_accum_add_cpu<T>(g, acc, cnt);
        return;
      }
      case OpKind::OptimizerStep:
        if (c_.graph.compute != DType::F32) throw std::logic_error("the optimizer runs on F32 plans only");
        return optimizer_step();
    }
  }

  LossDesc loss_desc(const Node& n) const {
    const Shape& ls = shape(n.in[0]);
    return {n.attrs.loss, ls.dims[0], ls.dims[1], n.attrs.label_smoothing,
            n.attrs.class_weights.empty() ? nullptr : n.attrs.class_weights.data()};
  }
  Conv2dGeom conv_geom(const Node& n, ValueId x, ValueId w) const { return conv2d_geom_of(c_.graph, n, x, w); }
  Pool2dGeom pool_geom(const Node& n, ValueId x) const { return pool2d_geom_of(c_.graph, n, x); }

  // Scratch buffer i (0 or 1) of at least n elements, kept across steps: a fresh multi-megabyte vector per node
  // and step costs its page faults and zero fill (run time of the fused BN + pool nodes, CI's CPU step job).
  template <class T>
  T* scratch(int i, size_t n) {
    std::vector<T>& v = scratch_store<T>()[i];
    if (v.size() < n) v.resize(n);
    return v.data();
  }
  template <class T>
  std::vector<T>* scratch_store() {
    if constexpr (std::is_same_v<T, float>) return scratch_f32_;
    else return scratch_f64_;
  }

  // Batch norm over (rows, C) = the value flattened to its last dim; a fused residual added and the fused ReLU applied
  // after the forward (in that order), the ReLU to the incoming gradient (masked by the fused output) before the
  // backward. A folded conv bias (attrs.prebias, the last input) goes to the forward kernels. A fused max pool
  // (attrs.pool) runs the unfused chain on a full-resolution scratch copy of Y (the CPU is the oracle: bitwise
  // the unfused values); its backward recomputes that Y from X (the same statistics pass, so the same bits).
  template <class T>
  void batch_norm(const Node& n, int slot) {
    auto f = [&](ValueId v) { return ptr<T>(v, slot); };
    const bool grad = n.op == OpKind::BatchNormGrad;
    const ValueId xv = n.in[grad ? 1 : 0];
    const int64_t c = shape(n.in[grad ? 2 : 1]).numel();
    const int64_t rows = shape(xv).numel() / c;
    const double eps = n.attrs.eps, momentum = n.attrs.momentum;
    const T* prebias = !grad && n.attrs.prebias ? f(n.in.back()) : nullptr;  // a conv bias
    const size_t elems = static_cast<size_t>(rows * c);
    T* full = n.attrs.pool ? scratch<T>(0, elems) : nullptr;  // attrs.pool: the full-resolution Y (rows, c)
    T* y = n.attrs.pool ? full : f(n.out[0]);
    if (n.op == OpKind::BatchNorm) {
      batchnorm_fwd_train_cpu<T>(f(n.in[0]), f(n.in[1]), f(n.in[2]), y, f(n.out[1]), f(n.out[2]), f(n.in[3]),
                                 f(n.in[4]), rows, c, eps, momentum, &pool_, prebias);
    } else if (n.op == OpKind::BatchNormEval) {
      batchnorm_fwd_eval_cpu<T>(f(n.in[0]), f(n.in[1]), f(n.in[2]), f(n.in[3]), f(n.in[4]), y, rows, c, eps, &pool_,
                                prebias);
    } else if (n.attrs.pool) {  // pooled dY, X, gamma, save_mean, save_invstd, beta, argmax
      // Y as the forward stored it (its statistics recomputed from X: a prebias changes neither), then
      // MaxPoolGrad, the ReLU mask and the backward, as in the unfused program.
      std::vector<T> mean(static_cast<size_t>(c)), invstd(static_cast<size_t>(c));
      batchnorm_fwd_train_cpu<T>(f(n.in[1]), f(n.in[2]), f(n.in[5]), y, mean.data(), invstd.data(), nullptr,
                                 nullptr, rows, c, eps, momentum, &pool_);
      relu_fwd_cpu<T>(y, y, rows * c);
      T* dy = scratch<T>(1, elems);
      maxpool2d_grad_cpu<T>(pool_geom(n, xv), f(n.in[0]), y, dy);
      relu_grad_cpu<T>(dy, y, dy, rows * c);
      batchnorm_grad_cpu<T>(dy, f(n.in[1]), f(n.in[2]), f(n.in[3]), f(n.in[4]), f(n.out[0]), f(n.out[1]),
                            f(n.out[2]), rows, c, &pool_);
      return;
    } else {
      const T* dy = f(n.in[0]);
      if (n.attrs.relu) {  // with attrs.residual the masked dY is the node's fourth output (pass_fuse_bn_relu_grad)
        T* g = n.attrs.residual ? f(n.out[3]) : scratch<T>(0, elems);
        relu_grad_cpu<T>(dy, f(n.in[5]), g, rows * c);
        dy = g;
      }
      batchnorm_grad_cpu<T>(dy, f(n.in[1]), f(n.in[2]), f(n.in[3]), f(n.in[4]), f(n.out[0]), f(n.out[1]),
                            f(n.out[2]), rows, c, &pool_);
      return;
    }
    if (n.attrs.residual) add_cpu<T>(y, f(n.in[5]), y, rows * c);
    if (n.attrs.relu) relu_fwd_cpu<T>(y, y, rows * c);
    if (!n.attrs.pool) return;
    const Pool2dGeom pg = pool_geom(n, xv);  // then the max pool over the scratch Y, as MaxPool does
    maxpool2d_fwd_cpu<T>(pg, y, f(n.out[0]));
    if (n.op == OpKind::BatchNorm) maxpool2d_argmax_cpu<T>(pg, y, ptr<uint8_t>(n.out[3], slot));
  }

  // The non-finite check (a step with inf/NaN gradients is skipped: weights, optimizer state, EMA and the update
  // count unchanged, as GradScaler skips optimizer.step(); the CPU computes in fp32, so there is no loss scale to
  // back off), gradient clipping (over the trainable gradients: their padding is zero), then the update, group by
  // group over the plan's update ranges (each with its lr and weight decay), or LARS tensor by tensor. Frozen
  // parameters (after the trainable range) are left alone; the EMA covers the whole layout.
  void optimizer_step() {
    const MemoryPlan& m = c_.plan;
    const int states = optimizer_state_count(c_.spec.optimizer);
    float* w = reinterpret_cast<float*>(region(Region::Weights));
    float* g = reinterpret_cast<float*>(region(Region::Grads));
    float* st = reinterpret_cast<float*>(region(Region::OptState));
    const int64_t total = m.weights_bytes / 4, trainable = m.trainable_bytes / 4;
    const auto& inject = c_.spec.debug.inject_nonfinite_grad_steps;  // testing aid: one NaN, as the CUDA kernel
    if (std::binary_search(inject.begin(), inject.end(), step_)) g[0] = std::numeric_limits<float>::quiet_NaN();
    bool finite = true;
    for (int64_t i = 0; i < trainable; ++i) finite &= std::isfinite(g[i]);
    if (!finite) {
      ++skipped_;
      return;
    }
    ++updates_;
    if (c_.spec.optimizer.clip_grad_norm > 0) {
      const float f = grad_clip_factor(grad_global_norm_cpu(g, trainable), c_.spec.optimizer.clip_grad_norm);
      for (int64_t i = 0; i < trainable; ++i) g[i] *= f;  // as clip_grad_norm_, which always multiplies
    }
    auto scalars = [&](int32_t group) {
      OptimScalars s = optim_scalars(c_.spec.optimizer, lrs_.at(static_cast<size_t>(group)), updates_);
      s.weight_decay = c_.graph.param_groups[static_cast<size_t>(group)].weight_decay;
      return s;
    };
    if (c_.spec.optimizer.kind == OptimizerKind::Lars) {
      for (const ParamInfo& prm : c_.graph.params) {
        if (prm.frozen) continue;
        const OptimScalars s = scalars(prm.group);
        const int64_t off = m.values[prm.value].offset / 4, n = c_.graph.values[prm.value].shape.numel();
        lars_step_cpu(s, s.weight_decay != 0, w + off, g + off, states > 0 ? st + off : nullptr, n);
      }
    } else {
      for (const UpdateRange& r : m.update_ranges) {
        const OptimScalars s = scalars(r.group);
        const int64_t off = r.begin / 4, n = (r.end - r.begin) / 4;
        optim_step_cpu(s, s.weight_decay != 0, w + off, g + off, states > 0 ? st + off : nullptr,
                       states > 1 ? st + total + off : nullptr, n, &pool_);
      }
    }
    if (c_.spec.train.ema_decay > 0) ema_update(w, st + states * total, total);
  }

  // AveragedModel with get_ema_multi_avg_fn: the first update copies the parameters, later ones
  // ema.lerp_(param, 1 - decay). The EMA is the optimizer-state copy after the moments.
  void ema_update(const float* w, float* ema, int64_t n) {
    ema_update_cpu(c_.spec.train.ema_decay, updates_ == 1, w, ema, n);
  }

 public:
  int64_t skipped_steps() override { return skipped_; }
  TrainState save_state() override {
    TrainState s;
    s.step = step_;
    s.opt_updates = updates_;
    return s;
  }
  Status restore_state(const TrainState& s) override {
    step_ = s.step;
    updates_ = s.updates();
    micro_ = 0;  // checkpoints are taken between optimizer steps: the accumulators are empty
    return ok_status();
  }

  // Exchanges the parameters with their moving average (validation with the EMA weights; called again after).
  Status swap_ema() override {
    if (!(c_.spec.train.ema_decay > 0)) return Error{ErrCode::Internal, "cpu backend", "no EMA in this plan"};
    const int64_t total = c_.plan.weights_bytes / 4;
    float* w = reinterpret_cast<float*>(region(Region::Weights));
    float* ema = reinterpret_cast<float*>(region(Region::OptState)) + optimizer_state_count(c_.spec.optimizer) * total;
    std::swap_ranges(w, w + total, ema);
    return ok_status();
  }

 private:
  const Compiled& c_;
  uint64_t seed_;
  ThreadPool pool_;
  std::vector<std::unique_ptr<AlignedBuffer>> regions_;
  std::vector<double> last_loss_;
  double requested_loss_ = 0;  // request_loss's value (this backend runs synchronously)
  std::vector<double> lrs_;  // per parameter group
  std::vector<float> scratch_f32_[2];   // scratch<float>(i, n): full-resolution Y and dY of the fused BN + pool nodes
  std::vector<double> scratch_f64_[2];  // the same for the float64 gradient-check programs
  int64_t step_ = 0;
  int64_t micro_ = 0;    // micro-batches run since the last optimizer step (train.accumulate_steps)
  uint32_t dropout_key_ = 0;  // the running train step's dropout key (see run())
  int64_t updates_ = 0;  // optimizer updates applied (step_ minus the skipped steps; Adam's t, the EMA's count)
  int64_t skipped_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const Compiled& c, uint64_t seed, int threads) {
  return std::make_unique<CpuBackend>(c, seed, threads);
}

}  // namespace trctl
