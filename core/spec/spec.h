// The experiment spec: a typed, validated form of the YAML recipe (configs/*.yaml), and the functions that
// parse it (with command-line overrides), validate it, and write it back as YAML (round-trips).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/util/error.h"

namespace trctl {

// ---- data ----
// Idx: any MNIST-format pair of files (names in data.*_images/labels). Synthetic: random uint8 images and labels
// drawn from the seed (data.synthetic), for throughput measurements only: never report accuracy from it.
// Dts: packed files (data.train_path / val_path, `trctl pack-dts`); ImageFolder: folders of class sub-folders of
// JPEGs (train_path / val_path), read raw; Cifar10 / Cifar100: the binary batches under root. Dts and ImageFolder
// hold images of any size: their transforms must end at a fixed size (random_resized_crop, center_crop).
enum class DatasetKind { FashionMnist, Idx, Synthetic, Dts, ImageFolder, Cifar10, Cifar100 };

// One transform of data.train_transforms / data.val_transforms. YAML form: a one-key map, e.g.
//   - pad: {padding: 2}            - random_crop: {size: 28}         - random_rotation: {degrees: 20}
//   - random_scale: {min: 0.8, max: 1.2}   - normalize: {}           - random_erasing: {p: 0.5}
// The last five kinds are torchvision's transforms for variable-size (decoded JPEG) images
// (dataio/image_ops.h); the fixed-size pipeline (dataio/transforms.h) rejects them:
//   - random_resized_crop: {size: 224, scale: [0.08, 1], ratio: [0.75, 1.3333333333333333]}
//   - random_horizontal_flip: {p: 0.5}   - resize: {size: 256}       - center_crop: {size: 224}
//   - color_jitter: {brightness: 0.4, contrast: 0.4, saturation: 0.4, hue: 0.1}
enum class TransformKind {
  Pad, RandomCrop, RandomRotation, RandomScale, Normalize, RandomErasing,
  RandomResizedCrop, RandomHorizontalFlip, ColorJitter, Resize, CenterCrop
};
struct TransformSpec {
  TransformKind kind = TransformKind::Normalize;
  int padding = 0;                      // pad: pixels on every side (fill 0)
  int size = 0;                         // random_crop, random_resized_crop, center_crop: output side (square);
                                        // resize: the shorter side
  double degrees = 0;                   // random_rotation: angle uniform in [-degrees, degrees]
  double scale_min = 1, scale_max = 1;  // random_scale: isotropic scale uniform in [min, max] about the centre
  double p = 0.5;                       // random_erasing, random_horizontal_flip: probability
  double erase_scale_min = 0.02, erase_scale_max = 0.33;  // random_erasing: area fraction range
  double ratio_min = 0.3, ratio_max = 3.3;                // random_erasing: aspect ratio range
  double value = 0;                     // random_erasing: fill value (in normalized units)
  double crop_scale_min = 0.08, crop_scale_max = 1.0;              // random_resized_crop: area fraction range
  double crop_ratio_min = 3.0 / 4.0, crop_ratio_max = 4.0 / 3.0;   // random_resized_crop: aspect (w/h) range
  // color_jitter: factors uniform in [max(0, 1 - x), 1 + x] (hue: shift in [-hue, hue]); 0 = that part is off.
  double brightness = 0, contrast = 0, saturation = 0, hue = 0;
};

// data.synthetic: sizes of the generated dataset.
struct SyntheticSpec {
  int64_t train_size = 2560, val_size = 512;  // >= 1
  int height = 224, width = 224, channels = 3;  // >= 1; channels <= 4
  int classes = 1000;                           // >= 2
};

struct DataSpec {
  DatasetKind dataset = DatasetKind::FashionMnist;
  SyntheticSpec synthetic;
  std::string root = "/usr/share/datasets/fashion-mnist";
  // For dataset idx (and to override fashion_mnist's defaults): file names inside root; ".gz" optional.
  std::string train_images = "train-images-idx3-ubyte.gz";
  std::string train_labels = "train-labels-idx1-ubyte.gz";
  std::string val_images = "t10k-images-idx3-ubyte.gz";
  std::string val_labels = "t10k-labels-idx1-ubyte.gz";
  // For dataset dts (files) and image_folder (folders): the splits, joined to root unless absolute.
  std::string train_path, val_path;
  int dts_level = 0;        // dts: the level by its short side (0 = full size)
  bool in_memory = false;   // dts: hold the level in RAM (else streamed block by block every epoch)
  int io_threads = 2;       // dts: block reader threads, >= 1
  // dts / image_folder: keep the transformed validation batches (the val transforms must draw nothing random)
  // from the first validation on, so later validations skip decoding. Memory: val samples x H x W x C x 2-4 bytes.
  bool cache_val = false;
  int batch_size = 200;      // >= 1
  int val_batch_size = 0;    // 0 = batch_size
  int workers = 4;           // loader threads, >= 1; results never depend on it
  int64_t train_subset = 0;  // 0 = all; else the first N training samples
  bool drop_last = false;    // false: the last partial batch is trained on (as PyTorch)
  std::vector<double> mean = {0.2860};  // normalization, one per channel
  std::vector<double> std = {0.3530};
  std::vector<TransformSpec> train_transforms;
  std::vector<TransformSpec> val_transforms;
};

// ---- model ----
// Images flow as (N, H, W, C) (NHWC); global_avg_pool and flatten make (N, features) for linear layers.
// Activations with PyTorch's semantics and defaults (runtime/ops/activation/activation.h): relu6, leaky_relu
// (negative_slope), elu (alpha), silu, hardswish, sigmoid, tanh.
enum class LayerKind {
  Flatten, Linear, Relu, Dropout, Conv2d, BatchNorm, MaxPool, AvgPool, GlobalAvgPool, Add,
  Relu6, LeakyRelu, Elu, Silu, Hardswish, Sigmoid, Tanh
};
struct LayerSpec {
  LayerKind kind = LayerKind::Relu;
  std::string name;                 // unique; auto "<kind><index>" (e.g. "linear3") when absent
  std::vector<std::string> inputs;  // names of earlier layers or "input"; empty = the previous layer; add: two
  int out_features = 0;             // linear, >= 1
  bool bias = true;                 // linear, conv2d
  double p = 0.5;                   // dropout, in [0, 1)
  int out_channels = 0;             // conv2d, >= 1
  int kernel_size = 1;              // conv2d, max_pool, avg_pool (square), >= 1
  int stride = 0;                   // conv2d (0 = 1), pools (0 = kernel_size)
  int padding = 0;                  // conv2d, pools (zero padding; pools: <= kernel_size / 2)
  int dilation = 1;                 // conv2d
  int groups = 1;                   // conv2d: in and out channels divisible by it
  double eps = 1e-5;                // batch_norm, > 0
  double momentum = 0.1;            // batch_norm running statistics, [0, 1]
  double negative_slope = 0.01;     // leaky_relu (nn.LeakyReLU's default)
  double alpha = 1.0;               // elu (nn.ELU's default)
  int line = 0, col = 0;            // where it stood in the YAML (1-based), for compiler errors
};
enum class InitKind { KaimingUniformFanIn };  // PyTorch's default for Linear: U(-1/sqrt(fan_in), 1/sqrt(fan_in))

// A glob (fnmatch(3): *, ?, [...]) naming parameters: it matches a parameter whose full name it matches
// ("fc1.weight", "layer*.bias") and every parameter of a layer whose name it matches ("fc1", "conv*").
// The compiler rejects a pattern that matches no parameter, at `where`.
struct NamePattern {
  std::string glob;
  std::string where;  // "file:line:col" of the pattern in the YAML (messages only; not compared, not written)
  bool operator==(const NamePattern& o) const { return glob == o.glob; }
};

struct ModelSpec {
  std::vector<LayerSpec> layers;
  InitKind init = InitKind::KaimingUniformFanIn;
  // model.freeze: parameters that are not trained (PyTorch's requires_grad_(False)): no gradient is computed for
  // them, the optimizer, weight decay and gradient clipping leave them out; batch-norm running statistics of a
  // frozen layer still update in training (as PyTorch in train mode). A string or a list of patterns.
  std::vector<NamePattern> freeze;
};

// ---- loss ----
// CrossEntropy: nn.CrossEntropyLoss (label_smoothing, class_weights = its `weight`, mean reduction).
// BceWithLogits: nn.BCEWithLogitsLoss (mean) of a 1-logit head against labels 0/1 (2-class data), or of one logit
//   per class against one-hot targets. Mse: nn.MSELoss (mean) of the logits against one-hot targets.
// Formulas: runtime/ops/loss/loss.h.
enum class LossKind { CrossEntropy, BceWithLogits, Mse };
struct LossSpec {
  LossKind kind = LossKind::CrossEntropy;
  double label_smoothing = 0.0;       // cross_entropy, [0, 1)
  std::vector<double> class_weights;  // cross_entropy: one per class, each >= 0, not all 0; empty = unweighted
};

// ---- optimizer ----
// Lars: SGD with a per-tensor trust ratio (timm's Lars, after NVIDIA apex's LARC) on the parameters that get
// weight decay; biases and norm parameters take plain SGD steps (decay_bias_and_norm false).
enum class OptimizerKind { Sgd, Adam, AdamW, Lars };

// optimizer.param_groups item: PyTorch's parameter groups chosen by name. The parameters matched by `params` (the
// first group that matches a parameter takes it) use the group's lr and/or weight_decay instead of the optimizer's;
// the scheduler moves each group's lr as it moves optimizer.lr (scheduler_lr with the group's lr as the base).
// Biases and norm parameters keep no weight decay in every group unless optimizer.decay_bias_and_norm.
struct ParamGroupSpec {
  std::vector<NamePattern> params;  // >= 1 pattern
  bool has_lr = false;
  double lr = 0;                    // > 0, when has_lr
  bool has_weight_decay = false;
  double weight_decay = 0;          // >= 0, when has_weight_decay
  bool operator==(const ParamGroupSpec& o) const {
    return params == o.params && has_lr == o.has_lr && lr == o.lr && has_weight_decay == o.has_weight_decay &&
           weight_decay == o.weight_decay;
  }
};
constexpr int kMaxParamGroups = 7;  // spec groups; with the default group and the no-decay halves: <= 16 ranges

struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::AdamW;
  double lr = 1e-3;             // > 0
  double momentum = 0.0;        // sgd/lars, [0, 1)
  double dampening = 0.0;       // sgd/lars, [0, 1]
  bool nesterov = false;        // sgd/lars; needs momentum > 0 and dampening 0 (PyTorch's rule)
  double beta1 = 0.9, beta2 = 0.999;  // adam/adamw, YAML `betas: [b1, b2]`, each in [0, 1)
  double eps = 1e-8;            // adam/adamw/lars, > 0
  double trust_coefficient = 0.001;  // lars: trust ratio = coef * |w| / (|g| + wd |w| + eps), > 0
  bool trust_clip = false;      // lars: ratio = min(ratio / lr, 1) (LARC clipping)
  double clip_grad_norm = 0.0;  // >= 0; > 0: gradients scaled to this global 2-norm at most (clip_grad_norm_)
  double weight_decay = 0.0;    // >= 0; sgd/adam: L2 added to the gradient; adamw: decoupled
  bool decay_bias_and_norm = false;  // false: biases and norm parameters get no weight decay
  std::vector<ParamGroupSpec> param_groups;  // at most kMaxParamGroups
};

// ---- scheduler (per epoch) ----
enum class SchedulerKind { Constant, Cosine, Step, MultiStep };
struct SchedulerSpec {
  SchedulerKind kind = SchedulerKind::Constant;
  int warmup_epochs = 0;        // linear warm-up: lr = base*e/warmup for e <= warmup (e 1-based)
  double eta_min = 0.0;         // cosine: reached at the last epoch
  int step_size = 1;            // step: multiply by gamma every step_size epochs
  double gamma = 0.1;           // step/multistep
  std::vector<int> milestones;  // multistep: epochs (strictly increasing, >= 1)
};

// ---- train / run ----
enum class Precision { Fp32, Tf32, Fp16, Bf16 };
enum class DeviceKind { Auto, Cpu, Cuda };
// Few-input-channel convolutions (an RGB stem) under AMP on the CUDA backend: on = forward and weight gradient as
// im2col + cuBLASLt GEMM (docs/cnn.md), forward = the forward only (the weight gradient on cuDNN; the default: on
// the H200 im2col won the forward and lost the weight gradient, RESULTS.md run 29), off = cuDNN for both. The
// results are the same convolution up to summation order; a performance switch, no effect on the CPU backend.
enum class ConvIm2col { On, Forward, Off };
// Stride-2 few-channel convolutions (the ResNet stem, 7x7/2 over RGB: s2d_conv_eligible) under AMP on the CUDA
// backend: on = forward and weight gradient as space-to-depth + a stride-1 cuDNN conv over 16 channels (docs/cnn.md;
// takes precedence over conv_im2col for those convs), forward = the forward only (the default: on the H200 the s2d
// weight gradient measured slower than cuDNN's on the real 3 channels), off = the conv_im2col / cuDNN paths. The
// same convolution up to summation order; a performance switch, no effect on the CPU backend.
enum class ConvS2d { On, Forward, Off };
// Few-channel convolutions (C <= 4: RGB stems; fewc_conv_eligible, runtime/ops/conv2d/fewc.h) under AMP on the CUDA
// backend: forward = the forward as trctl's tensor-core implicit GEMM (takes precedence over conv_s2d and
// conv_im2col), on (the default) = also the weight gradient where K = 64 (fewc_wgrad_eligible, stride 1 or 2), and
// a stem batch norm's backward dx computed inside that weight gradient when only it reads dx (fewc_bn_grad_choose:
// bitwise the batch norm's own dx), off = the conv_s2d / conv_im2col / cuDNN paths. The same convolution up to
// summation order; a performance switch, no effect on the CPU backend.
enum class ConvFewc { On, Unfolded, Forward, Off };
// trctl's Hopper wgmma convolution (runtime/ops/conv2d/wgconv.h, compiled for sm_90a) under AMP on the CUDA backend:
// dgrad = the data gradient of every 3x3/1 convolution with 64 output channels whose ring px kernel fits
// (wgconv_dgrad_ring_eligible, runtime/ops/conv2d/wgconv_rule.h: VGG16-BN's conv1_2, ResNet's layer1 3x3s) runs
// on it instead of cuDNN (on the H200 at VGG's conv1_2, 224² x 64, batch 256: 2,242 µs against cuDNN's 2,586,
// RESULTS.md run 61); under train.conv_bn_backward fused its epilogue computes the next batch norm's backward
// reductions (its own variant of cuDNN's graph (d)). off (the default) = cuDNN.
// Deterministic (one fixed summation order); the same gradient up to summation order. A GPU other than compute
// capability 9.0 refuses the plan ("not supported"); no effect under fp32/tf32 or on the CPU backend.
// fwd = the forward of every 3x3/1 convolution with 64 input and 64 output channels whose ring px kernel fits
// (wgconv_fwd_ring_eligible: VGG16-BN's conv1_2, ResNet's layer1 3x3s) runs on it, with its output's batch
// statistics from its epilogue where train.conv_bn_stats fuses (a pair), and a training batch norm + ReLU whose only
// consumer before its backward is that conv folded into the conv's prologue: the batch norm runs its statistics
// alone, the conv normalises each input row as it lands and writes the normalised rows out too (bitwise the apply
// pass's output, which the weight gradient reads). both = fwd and dgrad. wgrad = the weight gradient of every 3x3/1
// convolution with 64 input and 64 or 128 output channels whose ring fits (wgconv_wgrad_route_eligible: VGG16-BN's
// conv1_2 and conv2_1, ResNet's layer1 3x3s; with 128 input channels cuDNN's is faster) on the ring weight-gradient
// kernel, dW straight in f32 (not rounded to the io type first, as cuDNN's is); such a weight gradient is then no
// train.conv_bn_apply prologue fold. bwd = dgrad and wgrad (not the forward). all = fwd, dgrad and wgrad.
enum class ConvWgconv { Off, Dgrad, Fwd, Both, Wgrad, Bwd, All };
inline bool wgconv_routes_dgrad(ConvWgconv c) {
  return c == ConvWgconv::Dgrad || c == ConvWgconv::Both || c == ConvWgconv::Bwd || c == ConvWgconv::All;
}
inline bool wgconv_routes_fwd(ConvWgconv c) {
  return c == ConvWgconv::Fwd || c == ConvWgconv::Both || c == ConvWgconv::All;
}
inline bool wgconv_routes_wgrad(ConvWgconv c) {
  return c == ConvWgconv::Wgrad || c == ConvWgconv::Bwd || c == ConvWgconv::All;
}
// Where a training batch norm that reads a convolution's output gets its batch statistics on the CUDA backend under
// AMP: separate = trctl's statistics pass over the conv output (bitwise reproducible); fused = every eligible conv ->
// batch norm pair (a cuDNN-routed conv, groups 1, no bias, unpadded channels) runs cuDNN's runtime-fusion conv +
// genstats graph, whose epilogue writes the per-channel sum and sum of squares that the batch norm then finalizes
// (one pass over the conv output fewer; an RGB stem on the few-channel kernel, conv_fewc, sums in its own epilogue
// instead, deterministically); auto (the default) = fused only where the conv's output has at least 28x28 pixels per
// image (RESULTS.md run 56, batch 256: the fused graph was faster at 224² to 28²; 14² unmeasured).
// cuDNN's genstats sums are not bitwise repeatable run to run, and the graphs take f16/bf16 activations: fusing is
// allowed only with train.deterministic: false and precision fp16 or bf16. An explicit fused without both is a spec
// error; auto without both is separate, silently (effective_conv_bn_stats, the one place that decides). Since auto
// became the default (RESULTS.md run 58), a resolved spec without the key means auto (before: separate) and
// spec_to_yaml writes `conv_bn_stats: separate` when set. A pair cuDNN has no engine for runs separately (run.json
// and the log count both). The same batch norm up to the statistics' rounding; no effect on the CPU backend.
enum class ConvBnStats { Separate, Fused, Auto };
// With conv_bn_stats fused or auto in effect (effective_conv_bn_stats not separate), where a training batch norm +
// ReLU applies its normalisation when its output feeds only the next convolution (and that convolution's weight
// gradient): separate = the apply pass writes the output (the default); prologue = the output is never written: the
// batch norm writes its per-channel scale and shift (f16), the next convolution (a fused pair itself) applies
// relu(x * scale + shift) while loading its input (cuDNN's scale + bias + ReLU + conv + genstats graph) and its
// weight gradient likewise (scale + bias + ReLU + wgrad). A pass over the output written and one read fewer per such
// layer. fp16 only (cuDNN's prologue wgrad takes f16); a spec error with conv_bn_stats separate, or auto that
// resolves to separate (train.deterministic: true). The scale and shift are rounded to f16 (what cuDNN's engines
// take): the normalised values move by up to 2^-11 relative from the scale and 2^-11 |mean * gamma * invstd|
// absolute from the shift (docs/cnn.md has the limits); the batch norm's backward is unchanged. A batch norm cuDNN
// has no engine for keeps its apply pass.
enum class ConvBnApply { Separate, Prologue };
// Where a training batch norm + ReLU's backward takes its reductions (dgamma = sum g xhat, dbeta = sum g of the
// masked incoming gradient g) when the data gradient of the convolution that read its output produced that
// gradient: separate = the batch norm's first pass (read g and x); fused = cuDNN's dgrad + ReLU backward +
// BN-backward-weights graph (its "DgradDreluBNBwdWeight" pattern): the convolution's data gradient writes the masked
// g and the reductions in its epilogue (the mask recomputed from x and the forward's statistics in fp32, so it may
// differ from the stored ReLU output's at values that round to 0), and the batch norm runs its dx pass only. One pass
// over (g, x) fewer per such layer. fused needs train.deterministic: false and precision fp16 (cuDNN's fused engines;
// spec errors otherwise); auto (the default) = fused where both hold, else separate, never an error
// (effective_conv_bn_backward). As with conv_bn_stats, a resolved spec without the key now means auto (before:
// separate). A pair cuDNN has no engine for keeps the first pass (counted). A data gradient on trctl's ring px kernel
// (train.conv_wgconv) pairs under auto also with train.deterministic: true and bf16 (wgconv_bn_backward_pairs: its
// epilogue is deterministic).
enum class ConvBnBackward { Separate, Fused, Auto };
// The non-finite gradient check before the optimizer (fp16 AMP's loss scaler, and every precision's skip of a step
// with inf/NaN gradients). auto: a linear weight gradient that fp16 AMP computes from fp16 operands with fp32
// accumulation is checked through those operands (dY and X, far smaller) instead of itself -- it is non-finite
// exactly when one of them is (core/memplan/grad_check.h), so the step's skip decision is the same; every other
// gradient is read as before. full: every gradient itself. Neither changes what a step computes (not part of a
// checkpoint's spec hash).
enum class GradCheck { Auto, Full };
// How the CUDA backend runs a plain cuDNN data gradient of a stride-1 convolution (one the other conv_* keys leave to
// cuDNN's data-gradient algorithms: not a fused batch-norm backward pair, not on trctl's kernels, C unpadded): as
// cuDNN's forward convolution of dY over the flipped, transposed filters (runtime/ops/conv2d/dgrad_fwd.h: the same
// products, summed in another order; the filters flipped by a small kernel before each such conv). auto = where the
// autotune cache (`trctl bench CFG --autotune`) measured that forward at least 3 % faster than the data gradient's
// best algorithm, else the data gradient (without a cache: never); on = every eligible one (tests, A/B runs); off =
// never, the default: in VGG16-BN's step (RESULTS.md run 81, H100, cuDNN 9.14) auto took 3 data gradients and ran
// 0.15 % slower than off, cuDNN's own data gradients being about as fast as its forwards there. Like the autotune's
// algorithm choice it changes the rounding of dX, not what is computed (not part of a checkpoint's spec hash). No
// effect on the CPU backend.
enum class ConvDgradFwd { Auto, On, Off };
struct TrainSpec {
  int epochs = 1;               // >= 1
  Precision precision = Precision::Fp32;
  DeviceKind device = DeviceKind::Auto;
  int threads = 0;              // CPU backend compute threads; 0 = hardware concurrency
  // Gradient accumulation: micro-batches (data.batch_size samples each) per optimizer step, as PyTorch's
  // (loss / k).backward() loop: gradients are summed over k micro-batches, the optimizer steps after every k-th
  // and after the epoch's last (with the micro-batches it has, still / k). Steps (Backend::step(), metrics.jsonl,
  // checkpoints, debug.inject_nonfinite_grad_steps) count optimizer steps. 1..65536; 1 = off.
  int accumulate_steps = 1;
  bool deterministic = true;
  ConvIm2col conv_im2col = ConvIm2col::Forward;  // YAML conv_im2col: on | forward | off
  ConvS2d conv_s2d = ConvS2d::Forward;           // YAML conv_s2d: on | forward | off
  ConvFewc conv_fewc = ConvFewc::On;             // YAML conv_fewc: on | unfolded | forward | off
  ConvWgconv conv_wgconv = ConvWgconv::Off;      // YAML conv_wgconv: off | dgrad | fwd | both | wgrad | bwd | all
  ConvBnStats conv_bn_stats = ConvBnStats::Auto;      // YAML conv_bn_stats: separate | fused | auto
  ConvBnApply conv_bn_apply = ConvBnApply::Separate;  // YAML conv_bn_apply: separate | prologue
  ConvBnBackward conv_bn_backward = ConvBnBackward::Auto;  // YAML conv_bn_backward: separate | fused | auto
  GradCheck grad_check = GradCheck::Auto;                  // YAML grad_check: auto | full
  ConvDgradFwd conv_dgrad_fwd = ConvDgradFwd::Off;         // YAML conv_dgrad_fwd: auto | on | off
  // Weight gradients beside the data gradients (0..4, 0 = off, the default): a convolution's weight gradient may
  // run beside the nodes that follow it up to and including the N-th data gradient after it (pass_overlap_wgrad
  // marks it, the memory plan keeps its inputs for those nodes). The CUDA backend runs each such plain cuDNN weight
  // gradient on a second stream of the captured step, forked after the node before it and joined before the first
  // node past its window, so that it overlaps the memory-bound batch-norm backward passes; the CPU backend and data
  // parallelism run in order. The same kernels and sums: not part of a checkpoint's spec hash.
  int conv_wgrad_overlap = 0;
  // Whose kernels the GPU schedules first where both streams have work (YAML conv_wgrad_priority: low | same):
  // low (the default) gives the side stream's weight gradients the lower stream priority, so the step stream's
  // data gradients and batch-norm passes (the step's critical path) are not delayed by them; same, one priority.
  bool conv_wgrad_low_priority = true;
  int checkpoint_every = 0;     // epochs between checkpoints in the run dir (checkpoints/epoch-NNNN); 0 = none
  // Optimizer steps between mid-epoch checkpoints (checkpoints/epoch-NNNN-step-SSSSSSSS, with the data position);
  // 0 = none. Independent of checkpoint_every (both may be set); not part of the checkpoint's spec hash.
  int checkpoint_every_steps = 0;
  int validate_every = 1;       // validation after every N-th epoch and after the last; >= 1
  // Early stopping on a validated metric: stop when it has not improved by more than min_delta for `patience`
  // validations in a row. 0 = off.
  int early_stopping_patience = 0;
  bool early_stopping_on_loss = false;  // YAML early_stopping_metric: val_top1 (default, higher is better) | val_loss
  double early_stopping_min_delta = 0.0;
  int keep_last = 0;            // only the newest N checkpoints (epoch and step ones together) are kept; 0 = all
  bool keep_best = false;       // also checkpoints/best: the epoch with the best validation top-1 so far
  // Exponential moving average of the parameters (torch.optim.swa_utils.AveragedModel with
  // get_ema_multi_avg_fn(decay), use_buffers=False): after the first step the average is the parameters, after
  // each later one ema = decay * ema + (1 - decay) * param. 0 = off; else in (0, 1).
  double ema_decay = 0.0;
  bool eval_ema = true;         // with ema_decay > 0: validation runs with the averaged parameters
};
enum class ProgressKind { Auto, On, Off };
struct RunSpec {
  std::string out_dir = "runs";  // the run directory is out_dir/name (suffixed -2, -3, ... if it exists)
  std::string name;              // "" = the config file's stem
  int log_interval = 50;         // steps between metrics.jsonl step records; >= 1
  ProgressKind progress = ProgressKind::Auto;
};

// Testing aids (docs/checkpoint.md, "Fault hooks"): explicit fault injection, visible in config.resolved.yaml.
// spec_to_yaml writes the section only when a hook is set, so specs without it keep their checkpoint hash.
struct DebugSpec {
  // Training steps (1-based, Backend::step() during the step) whose gradients get one NaN written into them just
  // before the non-finite check: the step is skipped as a real overflow would be. Strictly increasing, >= 1.
  std::vector<int64_t> inject_nonfinite_grad_steps;
  // N >= 1: the N-th checkpoint write of this process fails with ENOSPC (a full disk); 0 = off. Not hashed into
  // checkpoints (a resumed run may switch it off).
  int fail_checkpoint_write = 0;
  bool any() const { return !inject_nonfinite_grad_steps.empty() || fail_checkpoint_write != 0; }
};

struct Spec {
  uint64_t seed = 0;
  DataSpec data;
  ModelSpec model;
  LossSpec loss;
  OptimizerSpec optimizer;
  SchedulerSpec scheduler;
  TrainSpec train;
  RunSpec run;
  DebugSpec debug;
  std::string source;  // the file it came from (for messages), not written back
};

// Parse YAML text (file name for messages) with overrides "a.b=value" (value parsed as YAML, so lists work),
// then validate. All errors at once, each "file:line:col: message (did you mean 'x'?)"; overrides are located as
// "<override N>:1:col". An empty file, a YAML syntax error, unknown keys, wrong types, values out of range,
// unknown enum names and invalid combinations are errors.
Result<Spec> spec_parse(const std::string& yaml_text, const std::string& file_name,
                        const std::vector<std::string>& overrides = {});
Result<Spec> spec_load(const std::string& path, const std::vector<std::string>& overrides = {});

// Every field written out, so the output is a complete spec that spec_parse accepts and that parses back equal.
std::string spec_to_yaml(const Spec& spec);

// Names used in YAML for enums (also used in messages and run outputs).
const char* to_string(Precision p);
const char* to_string(DeviceKind d);
const char* to_string(ConvIm2col c);
const char* to_string(ConvS2d c);
const char* to_string(ConvFewc c);
const char* to_string(ConvWgconv c);
const char* to_string(ConvBnStats c);
const char* to_string(ConvBnApply c);
const char* to_string(ConvBnBackward c);
const char* to_string(GradCheck c);
const char* to_string(ConvDgradFwd c);
const char* to_string(OptimizerKind o);
const char* to_string(SchedulerKind s);
const char* to_string(LayerKind l);
const char* to_string(TransformKind t);
// Added with the loader (same role as the six above): the YAML names of the remaining enums.
const char* to_string(DatasetKind d);
const char* to_string(InitKind i);
const char* to_string(LossKind l);
const char* to_string(ProgressKind p);

// What train.conv_bn_stats and train.conv_bn_backward run as: the one place that resolves auto and the
// preconditions (the CUDA backend, its rules in runtime/ops/conv2d/conv_bn_stats.h, logs and run.json read these).
// Stats: the mode as set (Fused or Auto: Auto keeps its pixel rule) when train.deterministic is false and precision
// fp16 or bf16, else Separate. Backward: Fused when the mode is fused or auto, train.deterministic is false and
// precision fp16, else Separate (never Auto). An explicit fused without its preconditions is a spec error, so it
// resolves to Separate only in a TrainSpec built in code.
ConvBnStats effective_conv_bn_stats(const TrainSpec& t);
ConvBnBackward effective_conv_bn_backward(const TrainSpec& t);
// Whether a data gradient on trctl's ring px kernel (train.conv_wgconv dgrad, both, bwd or all) takes its batch
// norm's backward reductions in its own epilogue: wherever conv_bn_backward is not separate and the precision fp16 or
// bf16 -- under train.deterministic: true too, and with bf16, unlike cuDNN's graph (d) (effective_conv_bn_backward):
// the epilogue is deterministic (its partials added in a fixed order) and takes either type.
bool wgconv_bn_backward_pairs(const TrainSpec& t);
// The pairs conv_bn_backward makes in this run, the one place both the rule (conv_bn_bwd_choose) and the mode's name
// (logs, run.json) derive them from: GraphD where effective_conv_bn_backward is fused (cuDNN's graph (d); a data
// gradient on the ring px kernel through its epilogue), WgconvOnly where only wgconv_bn_backward_pairs holds, None
// otherwise. Named "fused", "wgconv", "separate".
enum class ConvBnBackwardPairs { None, GraphD, WgconvOnly };
ConvBnBackwardPairs conv_bn_backward_pairs(const TrainSpec& t);
const char* conv_bn_backward_pairs_name(ConvBnBackwardPairs p);

// Learning rate for 1-based epoch e under the scheduler (PyTorch-equivalent per-epoch schedules).
double scheduler_lr(const SchedulerSpec& s, double base_lr, int epoch, int total_epochs);

}  // namespace trctl
