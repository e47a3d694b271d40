// Helpers for the spec tests: parse a YAML string under a fixed file name, look for an error, and compare two
// Specs field by field (naming the first field that differs).
#pragma once
#include <sstream>
#include <string>
#include <vector>

#include "core/spec/spec.h"

namespace trctl::spec_test {

inline const char* kFile = "test.yaml";

// The smallest valid spec.
inline const char* kMinimal = "model:\n  layers:\n    - {type: flatten}\n    - {type: linear, out_features: 10}\n";

inline Result<Spec> parse(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return spec_parse(yaml, kFile, overrides);
}

// Number of errors whose str() contains `needle`.
inline size_t count_errors(const Result<Spec>& r, const std::string& needle) {
  if (r.ok()) return 0;
  size_t n = 0;
  for (const Error& e : r.errors()) n += e.str().find(needle) != std::string::npos ? 1 : 0;
  return n;
}
inline bool has_error(const Result<Spec>& r, const std::string& needle) { return count_errors(r, needle) > 0; }

template <class T>
void diff_field(std::ostringstream& out, const char* name, const T& a, const T& b) {
  if (!(a == b) && out.tellp() == 0) out << name;
}

// "" when equal (source aside), else the name of the first differing field.
inline std::string first_difference(const Spec& a, const Spec& b) {
  std::ostringstream o;
  diff_field(o, "seed", a.seed, b.seed);
  const DataSpec &da = a.data, &db = b.data;
  diff_field(o, "data.dataset", da.dataset, db.dataset);
  diff_field(o, "data.root", da.root, db.root);
  diff_field(o, "data.train_images", da.train_images, db.train_images);
  diff_field(o, "data.train_labels", da.train_labels, db.train_labels);
  diff_field(o, "data.val_images", da.val_images, db.val_images);
  diff_field(o, "data.val_labels", da.val_labels, db.val_labels);
  diff_field(o, "data.batch_size", da.batch_size, db.batch_size);
  diff_field(o, "data.val_batch_size", da.val_batch_size, db.val_batch_size);
  diff_field(o, "data.workers", da.workers, db.workers);
  diff_field(o, "data.train_subset", da.train_subset, db.train_subset);
  diff_field(o, "data.drop_last", da.drop_last, db.drop_last);
  diff_field(o, "data.mean", da.mean, db.mean);
  diff_field(o, "data.std", da.std, db.std);
  for (int list = 0; list < 2; ++list) {
    const auto& ta = list == 0 ? da.train_transforms : da.val_transforms;
    const auto& tb = list == 0 ? db.train_transforms : db.val_transforms;
    diff_field(o, "data.*_transforms size", ta.size(), tb.size());
    for (size_t i = 0; i < ta.size() && i < tb.size(); ++i) {
      const TransformSpec &x = ta[i], &y = tb[i];
      diff_field(o, "transform.kind", x.kind, y.kind);
      diff_field(o, "transform.padding", x.padding, y.padding);
      diff_field(o, "transform.size", x.size, y.size);
      diff_field(o, "transform.degrees", x.degrees, y.degrees);
      diff_field(o, "transform.scale_min", x.scale_min, y.scale_min);
      diff_field(o, "transform.scale_max", x.scale_max, y.scale_max);
      diff_field(o, "transform.p", x.p, y.p);
      diff_field(o, "transform.erase_scale_min", x.erase_scale_min, y.erase_scale_min);
      diff_field(o, "transform.erase_scale_max", x.erase_scale_max, y.erase_scale_max);
      diff_field(o, "transform.ratio_min", x.ratio_min, y.ratio_min);
      diff_field(o, "transform.ratio_max", x.ratio_max, y.ratio_max);
      diff_field(o, "transform.value", x.value, y.value);
    }
  }
  diff_field(o, "model.init", a.model.init, b.model.init);
  diff_field(o, "model.freeze", a.model.freeze, b.model.freeze);
  diff_field(o, "model.layers size", a.model.layers.size(), b.model.layers.size());
  for (size_t i = 0; i < a.model.layers.size() && i < b.model.layers.size(); ++i) {
    const LayerSpec &x = a.model.layers[i], &y = b.model.layers[i];
    diff_field(o, "layer.kind", x.kind, y.kind);
    diff_field(o, "layer.name", x.name, y.name);
    diff_field(o, "layer.inputs", x.inputs, y.inputs);
    diff_field(o, "layer.out_features", x.out_features, y.out_features);
    diff_field(o, "layer.bias", x.bias, y.bias);
    diff_field(o, "layer.p", x.p, y.p);
    diff_field(o, "layer.negative_slope", x.negative_slope, y.negative_slope);
    diff_field(o, "layer.alpha", x.alpha, y.alpha);
  }
  diff_field(o, "loss.kind", a.loss.kind, b.loss.kind);
  diff_field(o, "loss.label_smoothing", a.loss.label_smoothing, b.loss.label_smoothing);
  diff_field(o, "loss.class_weights", a.loss.class_weights, b.loss.class_weights);
  const OptimizerSpec &oa = a.optimizer, &ob = b.optimizer;
  diff_field(o, "optimizer.kind", oa.kind, ob.kind);
  diff_field(o, "optimizer.lr", oa.lr, ob.lr);
  diff_field(o, "optimizer.param_groups", oa.param_groups, ob.param_groups);
  diff_field(o, "optimizer.momentum", oa.momentum, ob.momentum);
  diff_field(o, "optimizer.dampening", oa.dampening, ob.dampening);
  diff_field(o, "optimizer.nesterov", oa.nesterov, ob.nesterov);
  diff_field(o, "optimizer.beta1", oa.beta1, ob.beta1);
  diff_field(o, "optimizer.beta2", oa.beta2, ob.beta2);
  diff_field(o, "optimizer.eps", oa.eps, ob.eps);
  diff_field(o, "optimizer.weight_decay", oa.weight_decay, ob.weight_decay);
  diff_field(o, "optimizer.decay_bias_and_norm", oa.decay_bias_and_norm, ob.decay_bias_and_norm);
  const SchedulerSpec &sa = a.scheduler, &sb = b.scheduler;
  diff_field(o, "scheduler.kind", sa.kind, sb.kind);
  diff_field(o, "scheduler.warmup_epochs", sa.warmup_epochs, sb.warmup_epochs);
  diff_field(o, "scheduler.eta_min", sa.eta_min, sb.eta_min);
  diff_field(o, "scheduler.step_size", sa.step_size, sb.step_size);
  diff_field(o, "scheduler.gamma", sa.gamma, sb.gamma);
  diff_field(o, "scheduler.milestones", sa.milestones, sb.milestones);
  diff_field(o, "train.epochs", a.train.epochs, b.train.epochs);
  diff_field(o, "train.precision", a.train.precision, b.train.precision);
  diff_field(o, "train.device", a.train.device, b.train.device);
  diff_field(o, "train.threads", a.train.threads, b.train.threads);
  diff_field(o, "train.checkpoint_every", a.train.checkpoint_every, b.train.checkpoint_every);
  diff_field(o, "train.checkpoint_every_steps", a.train.checkpoint_every_steps, b.train.checkpoint_every_steps);
  diff_field(o, "train.accumulate_steps", a.train.accumulate_steps, b.train.accumulate_steps);
  diff_field(o, "train.deterministic", a.train.deterministic, b.train.deterministic);
  diff_field(o, "train.conv_im2col", static_cast<int>(a.train.conv_im2col), static_cast<int>(b.train.conv_im2col));
  diff_field(o, "train.conv_s2d", static_cast<int>(a.train.conv_s2d), static_cast<int>(b.train.conv_s2d));
  diff_field(o, "train.conv_fewc", static_cast<int>(a.train.conv_fewc), static_cast<int>(b.train.conv_fewc));
  diff_field(o, "train.conv_bn_stats", static_cast<int>(a.train.conv_bn_stats),
             static_cast<int>(b.train.conv_bn_stats));
  diff_field(o, "train.conv_bn_apply", static_cast<int>(a.train.conv_bn_apply),
             static_cast<int>(b.train.conv_bn_apply));
  diff_field(o, "train.conv_bn_backward", static_cast<int>(a.train.conv_bn_backward),
             static_cast<int>(b.train.conv_bn_backward));
  diff_field(o, "train.grad_check", static_cast<int>(a.train.grad_check), static_cast<int>(b.train.grad_check));
  diff_field(o, "train.conv_dgrad_fwd", static_cast<int>(a.train.conv_dgrad_fwd),
             static_cast<int>(b.train.conv_dgrad_fwd));
  diff_field(o, "train.conv_wgrad_overlap", a.train.conv_wgrad_overlap, b.train.conv_wgrad_overlap);
  diff_field(o, "train.conv_wgrad_priority", a.train.conv_wgrad_low_priority, b.train.conv_wgrad_low_priority);
  diff_field(o, "run.out_dir", a.run.out_dir, b.run.out_dir);
  diff_field(o, "run.name", a.run.name, b.run.name);
  diff_field(o, "run.log_interval", a.run.log_interval, b.run.log_interval);
  diff_field(o, "run.progress", a.run.progress, b.run.progress);
  return o.str();
}

}  // namespace trctl::spec_test
