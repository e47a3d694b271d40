// Graph IR as plain data: values (shape, dtype, role), nodes (op kind, inputs, outputs, attributes) and programs
// (ordered node lists: train step, partial-batch train step, eval, ...). One Graph holds every program of a
// compiled spec so that the memory planner sees them all and lays out one arena.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/graph/act_loss.h"

namespace trctl {

enum class DType : uint8_t { F32, F64, F16, BF16, I32, U8 };
int64_t dtype_size(DType t);
const char* to_string(DType t);

// What a value is for; decides its memory region.
enum class Role : uint8_t {
  Input,       // images of a batch (N, H, W, C) f32: input slots A/B
  Label,       // labels of a batch (N,) i32: input slots A/B
  Param,       // trainable weight: region weights
  Grad,        // gradient of a Param: region grads (same offsets as the weight)
  OptState,    // optimizer moment of a Param: region opt_state
  Activation,  // transient: arena, reused by liveness
  Result,      // per-step loss / correct count and epoch accumulators: region results (never reused)
  Buffer,      // persistent non-trainable state (batch-norm running statistics): region buffers
  GradAccum,   // a Param's gradient summed over the micro-batches of one optimizer step (train.accumulate_steps
               //   > 1): region grads, after the gradient layout (MemoryPlan::grad_accum_offset + the grad's offset)
};
const char* to_string(Role r);

enum class OpKind : uint8_t {
  // forward
  Flatten,               // view: (N, ...) -> (N, prod); also the identity view of a gradient passed through
  Linear,                // X (N,K), W (M,K), b (M) -> Y (N,M); attrs.relu: Y = max(X W^T + b, 0)
  Relu,                  // elementwise
  Dropout,               // train only; attrs.p, attrs.op_id (RNG stream), step from the hyper-parameters
  Conv2d,                // X (N,H,W,C), W (K,R,S,C/groups), b (K) -> Y (N,P,Q,K); geometry in attrs
  BatchNorm,             // train: X (N,H,W,C), gamma (C), beta (C), running_mean (C), running_var (C) -> Y,
                         //   save_mean (C), save_invstd (C); updates the running statistics in place;
                         //   attrs.relu: Y = max(BN(X), 0); attrs.residual: a 6th input R (N,H,W,C) is added
                         //   before the ReLU, Y = relu?(BN(X) + R) (pass_fuse_bn_add: the residual add of a block);
                         //   attrs.prebias: a last input b (C), the producing conv's bias, X standing for X + b
                         //   (pass_fold_conv_bias): statistics, Y and save_mean are those of X (BN(X + b) = BN(X)),
                         //   running_mean is updated with mean(X) + b
  BatchNormEval,         // X, gamma, beta, running_mean, running_var [, R] [, b] -> Y (running statistics); attrs.relu,
                         //   attrs.residual as BatchNorm; attrs.prebias: running_mean - b in place of running_mean
                         // attrs.pool (BatchNorm, BatchNormEval; with attrs.relu, without attrs.residual;
                         //   pass_fuse_bn_pool, after autodiff): the max pool that was the only reader of Y is
                         //   fused: Y is the POOLED output (N,P,Q,C) of k x k windows (k = attrs.kernel, k*k <=
                         //   256) with attrs.stride <= k and attrs.pad <= k/2 (tiling 2x2/2 or overlapping 3x3/2
                         //   pad 1); the full-resolution Y is never stored. BatchNorm then has a 4th output, the
                         //   argmax (N,P,Q,C) u8 (MaxPool's, offset in the window)
  MaxPool,               // X (N,H,W,C) -> Y (N,P,Q,C) [, argmax (N,P,Q,C) u8: offset in the window, train
                         //   programs]; attrs.kernel/stride/pad
  AvgPool,               // X (N,H,W,C) -> Y (N,P,Q,C); count_include_pad (PyTorch's default)
  GlobalAvgPool,         // X (N,H,W,C) -> Y (N,C)
  SoftmaxCrossEntropy,   // logits (N,C), labels (N,) -> loss () f32 mean over N; attrs.label_smoothing
  Accuracy,              // logits (N,C), labels (N,) -> correct () i32 (top-1), correct5 () i32 (top-5)
  MetricAccumulate,      // loss (), correct (), correct5 () -> accumulators: loss_sum () f64, correct_sum () f64,
                         //   count () f64, correct5_sum () f64
  Activation,            // elementwise attrs.act (ReLU6, LeakyReLU, ELU, SiLU, Hardswish, Sigmoid, Tanh)
  Loss,                  // logits (N,W), labels (N,) -> loss () mean; attrs.loss (BCE with logits, MSE, weighted CE)
  BinaryAccuracy,        // logits (N,1), labels (N,) -> correct () i32: predicted 1 iff the logit > 0 (as Accuracy
                         //   with a second output: top-5, every usable row)
  // backward
  SoftmaxCrossEntropyGrad,  // logits, labels -> dlogits (N,C) (mean over N, times the loss scale)
  LinearGradInput,          // dY (N,M), W (M,K) [, C (N,K)] -> dX (N,K) [+ C when attrs.accumulate]
  LinearGradWeight,         // dY (N,M), X (N,K) -> dW (M,K)
  LinearGradBias,           // dY (..., M) -> db (M): sums over every dim but the last (Linear and Conv2d biases)
  ZeroFill,                 // (no inputs) -> Y: every element 0. A gradient known to be exactly zero: a conv bias
                            //   folded into a train-mode batch norm (pass_fold_conv_bias; BN(y + b) = BN(y), so
                            //   dLoss/db = 0), in place of LinearGradBias over the batch norm's dX
  ReluGrad,                 // dY, Y -> dX
  ActivationGrad,           // dY, X or Y (act_grad_uses_output) -> dX; attrs.act
  LossGrad,                 // logits, labels -> dlogits (N,W) (the mean's gradient, times the loss scale)
  DropoutGrad,              // dY -> dX (regenerates the mask: attrs.p, attrs.op_id)
  Add,                      // a, b -> a + b (residual sums; gradients of values used twice); attrs.relu
  Conv2dGradInput,          // dY (N,P,Q,K), W [, C (N,H,W,C)] -> dX (N,H,W,C) [+ C when attrs.accumulate]
  Conv2dGradWeight,         // dY (N,P,Q,K), X -> dW (K,R,S,C/groups)
  BatchNormGrad,            // dY, X, gamma, save_mean, save_invstd [, Y when attrs.relu] -> dX, dgamma, dbeta
                            // [, G = dY * (Y > 0) when attrs.residual: pass_fuse_bn_relu_grad]
                            //   attrs.pool (with attrs.relu; pass_fuse_bn_pool): dY, X, gamma, save_mean,
                            //   save_invstd, beta, argmax -> dX, dgamma, dbeta: dY and argmax are the POOLED
                            //   (N,P,Q,C) ones (MaxPoolGrad folded in: an element's gradient is the sum of dY over
                            //   the windows whose argmax it is, as MaxPoolGrad sums it), the ReLU mask recomputed
                            //   from X with beta
  MaxPoolGrad,              // dY, X [, argmax] -> dX (each window's gradient to its first maximum)
  AvgPoolGrad,              // dY -> dX
  GlobalAvgPoolGrad,        // dY (N,C) -> dX (N,H,W,C)
  // update
  GradAccumulate,           // grads..., accumulators... (Role::GradAccum, same order) -> accumulators (micro
                            //   programs: acc += grad) or grads..., accumulators... (attrs.flush: grad += acc,
                            //   acc = 0, before the OptimizerStep); one pass over the Grads region's two layouts
  OptimizerStep,            // all grads -> all params, in place (optimizer kind/hyper-parameters from the plan)
};
const char* to_string(OpKind k);

using ValueId = int32_t;
constexpr ValueId kNoValue = -1;

struct Shape {
  std::vector<int64_t> dims;
  int64_t numel() const;
  std::string str() const;  // "(200, 784)"; "()" for a scalar
  bool operator==(const Shape& o) const { return dims == o.dims; }
};

struct Value {
  std::string name;
  Shape shape;
  DType dtype = DType::F32;
  Role role = Role::Activation;
  ValueId alias_of = kNoValue;  // a view (Flatten) shares the storage of this value
  int32_t param = -1;           // Param / Grad / OptState: index into Graph::params
  bool full_precision = false;  // stored in dtype even when Graph::storage is narrower (batch-norm statistics)
  int64_t bytes() const { return shape.numel() * dtype_size(dtype); }
};

struct Attrs {
  bool relu = false;             // Linear, BatchNorm(Eval|Grad), Add: fused ReLU
  bool residual = false;         // BatchNorm(Eval): a residual input added before the ReLU (in[5]); BatchNormGrad
                                 // (with relu): dY is the unmasked gradient of Y = relu(BN(X) + R), the fourth
                                 // output the masked one, also R's gradient (pass_fuse_bn_relu_grad)
  bool prebias = false;          // BatchNorm(Eval): a folded conv bias, the last input (pass_fold_conv_bias)
  bool pool = false;             // BatchNorm(Eval|Grad): a fused max pool, kernel/stride/pad (pass_fuse_bn_pool)
  bool accumulate = false;       // LinearGradInput, pointwise Conv2dGradInput: in[2] added to the result
  float p = 0;                   // Dropout
  uint32_t op_id = 0;            // Dropout RNG stream id (stable layer index)
  float label_smoothing = 0;     // SoftmaxCrossEntropy(Grad), Loss(Grad) weighted_cross_entropy
  float grad_scale = 1;          // SoftmaxCrossEntropy(Grad), Loss(Grad): the logits' gradient times this (1/k with
                                 //   train.accumulate_steps k: (loss / k).backward())
  bool flush = false;            // GradAccumulate: add the accumulators into the gradients and clear them
  ActKind act = ActKind::Silu;   // Activation(Grad)
  float act_param = 0;           // Activation(Grad): LeakyReLU's negative_slope, ELU's alpha
  LossFn loss = LossFn::Mse;     // Loss(Grad)
  std::vector<float> class_weights;  // Loss(Grad) weighted_cross_entropy: one per class
  // Conv2d and pools (square windows): kernel (R = S), stride, zero padding; Conv2d: dilation, groups.
  int32_t kernel = 1, stride = 1, pad = 0, dilation = 1, groups = 1;
  float eps = 1e-5f, momentum = 0.1f;  // BatchNorm
  // Conv2dGradWeight (pass_overlap_wgrad, train.conv_wgrad_overlap): the next `overlap` nodes of the program may
  // run beside this one (a backend may start it on a second stream and wait for it before node i + overlap + 1);
  // none of them reads its outputs, each is an overlap_window_op, and the memory plan keeps its inputs live
  // through them. 0: runs in program order.
  int32_t overlap = 0;
};

// The ops a weight gradient may overlap (Attrs::overlap): backward nodes that read and write only their explicit
// operands (not the optimizer, the gradient accumulation or any forward node).
bool overlap_window_op(OpKind k);

// The max-pool windows a batch norm can take in (pass_fuse_bn_pool, graph_verify, the fused kernels): kernel k
// with k*k <= 256 (the u8 argmax holds the offset in the window), stride 1 <= s <= k (each element in at most
// ceil(k/s)^2 windows) and padding 0 <= p <= k/2 (PyTorch's rule: no window of padding only).
bool fused_pool_window_ok(const Attrs& a);

struct Node {
  OpKind op = OpKind::Relu;
  std::vector<ValueId> in;
  std::vector<ValueId> out;
  Attrs attrs;
  std::string name;  // layer name, or "<layer>.grad_w" for backward nodes
};

// Whether node n reads any of vs (one of its inputs is among them).
bool reads_any(const Node& n, const std::vector<ValueId>& vs);

// A trainable parameter and everything the optimizer keeps for it.
struct ParamInfo {
  std::string name;               // "fc1.weight"
  ValueId value = kNoValue;       // Role::Param
  ValueId grad = kNoValue;        // Role::Grad
  std::vector<ValueId> state;     // Role::OptState (adam: m, v; sgd with momentum: buf)
  ValueId accum = kNoValue;       // Role::GradAccum (train.accumulate_steps > 1)
  bool decay = true;              // weight decay applies (false for biases and norm parameters)
  bool frozen = false;            // model.freeze: no gradient, no update (the parameters after the trainable ones)
  int32_t group = 0;              // index into Graph::param_groups (trainable parameters)
  int32_t init_index = 0;         // RNG stream of its initialisation: its index in the order without groups and
                                  // freezing (decayed first), so that neither changes the initial weights
  int64_t fan_in = 0;             // for initialisation
  enum class Init : uint8_t { Kaiming, Zeros, Ones } init = Init::Kaiming;
};

// An optimizer parameter group as the optimizer runs it: the trainable parameters of one (spec group, decay)
// pair, contiguous in Graph::params order (core/graph/param_groups.h).
struct ParamGroupInfo {
  std::string name;          // "default", "default.no_decay", "param_groups[1]", "param_groups[1].no_decay"
  double lr = 0;             // base learning rate (the scheduler's base for this group)
  double weight_decay = 0;   // 0 for the no-decay half
};

// A persistent non-trainable tensor (batch-norm running mean / variance), saved in checkpoints.
struct BufferInfo {
  std::string name;               // "bn1.running_mean"
  ValueId value = kNoValue;       // Role::Buffer
  float init = 0;                 // every element starts at this value (running_var: 1)
};

enum class ProgramKind : uint8_t { Train, Eval };

struct Program {
  std::string name;               // "train", "train_last", "eval", "eval_last"; "train_micro" (micro)
  ProgramKind kind = ProgramKind::Train;
  // train.accumulate_steps k > 1: "train_micro" runs a micro-batch (forward, backward, gradients added into the
  // accumulators, no optimizer); "train" and "train_last" are then the flush steps (the accumulators added into
  // their gradients, the optimizer step). The trainer runs k - 1 micro programs before each flush.
  bool micro = false;
  int64_t batch = 0;
  std::vector<Node> nodes;        // topological order
  ValueId input = kNoValue, label = kNoValue, logits = kNoValue;
  ValueId loss = kNoValue, correct = kNoValue;
  ValueId loss_sum = kNoValue, correct_sum = kNoValue, count = kNoValue;  // epoch accumulators
  ValueId correct5 = kNoValue, correct5_sum = kNoValue;                   // top-5: per batch, per epoch
};

struct Graph {
  std::vector<Value> values;
  std::vector<ParamInfo> params;  // trainable parameters by group (contiguous update ranges), then the frozen ones
  std::vector<ParamGroupInfo> param_groups;
  std::vector<BufferInfo> buffers;
  std::vector<Program> programs;
  int64_t in_h = 0, in_w = 0, in_c = 0;  // training sample shape (H, W, C): the train programs' input
  int64_t val_h = 0, val_w = 0;          // validation sample (H, W): the eval programs' input (often in_h, in_w)
  int num_classes = 0;
  DType compute = DType::F32;  // dtype of the floating-point values (F32; F64 for gradient checks)
  // What inputs and activations of the compute dtype are stored as: the compute dtype, or F16/BF16 when a backend
  // runs them in AMP (the CUDA backend); parameters, gradients and optimizer state stay in the compute dtype.
  DType storage = DType::F32;
  int accumulate_steps = 1;  // train.accumulate_steps: micro-batches per optimizer step

  ValueId add_value(Value v);
  const Program* find_program(const std::string& name) const;
};

// Bytes of v as stored: an input or activation of the compute dtype takes Graph::storage's size.
int64_t stored_bytes(const Graph& g, ValueId v);

// Prints the graph (values, params, every program's nodes) in a stable, diffable text form.
std::string graph_dump(const Graph& g);

}  // namespace trctl
