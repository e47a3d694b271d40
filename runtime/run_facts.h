// run.json, the run directory's record of what the backend decided at compile time that the config does not say:
// the backend's name and, on the CUDA backend, where its cuDNN convolution algorithms came from (ConvAlgoSources:
// the autotune cache of `trctl bench --autotune` or cuDNN's heuristics). `trctl report` reads it (docs/report.md).
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include "core/util/error.h"

namespace trctl {

// The cuDNN convolution plans of a compiled model: one per direction (fwd, dgrad, wgrad) of each distinct
// geometry (a direction no program runs, e.g. the first layer's dgrad, is not planned and not counted; 1x1
// convolutions run as cuBLASLt GEMMs and are not counted either, nor under AMP the forward and weight gradient of
// an RGB stem that run as im2col + GEMM: docs/cnn.md; a space-to-depth stem's are counted under its stride-1
// geometry), by where the algorithm came from.
struct ConvAlgoSources {
  std::string cache;          // the autotune cache path read (autotune_cache_path(); "": none, no HOME)
  bool cache_exists = false;  // whether that file existed (a missing file is an empty cache)
  bool deterministic = true;  // train.deterministic: only deterministic algorithms were candidates
  int from_cache = 0;         // plans whose algorithm the cache held for their key
  int from_heuristics = 0;    // plans whose algorithm cuDNN's heuristics chose
  int graph_engines = 0;      // of from_cache: plans that run a graph-API engine config the autotune measured
                              // faster than every legacy algorithm (run.json holds it when > 0)
  // train.conv_bn_stats: the mode in effect (effective_conv_bn_stats, core/spec/spec.h: "separate", "fused",
  // "auto"; auto, the default, is separate unless train.deterministic is false under AMP) and, unless separate, how
  // the candidate conv -> training batch norm pairs of every program went: fused (cuDNN's conv + genstats graph, the
  // statistics from its sums), separate (not a pair the fused graph serves, or below auto's size: the statistics
  // pass), fallback (cuDNN offered no engine: the statistics pass; the first reason kept).
  std::string bn_stats_mode = "separate";
  int bn_stats_fused = 0, bn_stats_separate = 0, bn_stats_fallback = 0;
  std::string bn_stats_fallback_reason;
  // train.conv_bn_apply: its mode and, unless separate, the batch norms whose apply + ReLU their consumer conv runs
  // (folded) or that keep it because cuDNN offered no engine for the prologue or the weight-gradient graph
  // (fallback, the first reason kept).
  std::string bn_apply_mode = "separate";
  int bn_apply_folded = 0, bn_apply_fallback = 0;
  std::string bn_apply_fallback_reason;
  // Training batch norms whose backward dx the few-channel weight gradient computes while staging it
  // (runtime/ops/conv2d/fewc_bn_grad.h; train.conv_fewc: on under AMP): their third pass is skipped. run.json holds
  // it when > 0.
  int bn_grad_folded = 0;
  // Data gradients on trctl's wgmma ring kernel (train.conv_wgconv: dgrad), per node of every program; run.json
  // holds it when > 0.
  int wgconv_dgrad = 0;
  // train.conv_wgconv fwd or both: forwards on the ring kernel (per node of every program) and the training batch
  // norms folded into such a forward's prologue (wgconv_bn_apply_choose); run.json holds each when > 0. Of those, the
  // ones whose output is never written (train.conv_wgconv all: the ring weight gradients apply them to x
  // themselves): wgconv_bn_unwritten.
  int wgconv_fwd = 0, wgconv_bn_folded = 0, wgconv_bn_unwritten = 0;
  // train.conv_wgconv wgrad, bwd or all: weight gradients on the ring weight-gradient kernel, per node of every program;
  // run.json holds it when > 0.
  int wgconv_wgrad = 0;
  // train.conv_dgrad_fwd: data gradients run as cuDNN's forward over flipped filters, per node of every program;
  // run.json holds it when > 0.
  int dgrad_fwd = 0;
  // train.conv_wgrad_overlap: weight gradients run on the step's second stream beside the nodes of their window,
  // per node of every program; run.json holds it when > 0.
  int wgrad_overlapped = 0;
  // train.conv_bn_backward: the mode in effect (effective_conv_bn_backward: "separate" or "fused", auto resolved;
  // "wgconv" where only data gradients on the ring px kernel pair, under deterministic: true or bf16:
  // wgconv_bn_backward_pairs) and, unless separate, the batch norms + ReLU whose backward reductions a convolution's
  // data gradient computed (fused: cuDNN's dgrad + ReLU backward + BN-backward-weights graph, or the ring px kernel's
  // epilogue), separate ones (not a pair it serves) and fallbacks (cuDNN offered no engine; the first reason kept).
  std::string bn_bwd_mode = "separate";
  int bn_bwd_fused = 0, bn_bwd_separate = 0, bn_bwd_fallback = 0;
  std::string bn_bwd_fallback_reason;
};

// Counts one geometry: for each direction d (ConvDir order: fwd, dgrad, wgrad) that is planned[d], a plan from the
// cache when cached[d], else from the heuristics. cached[d] of a direction not planned is ignored.
void conv_algo_sources_add(ConvAlgoSources& s, const std::array<bool, 3>& planned, const std::array<bool, 3>& cached);

// "autotune cache" (every plan from it), "heuristics" (every plan from them), "mixed", or "none" (no plans).
const char* conv_algo_source(const ConvAlgoSources& s);

// The device memory a backend allocated for a run (bytes), for a report that compares it with another tool's
// allocator peak: the memory plan's regions, the AMP low-precision weight copy, the kernels' workspaces and the
// device-resident dataset (images, labels, order); not the CUDA context.
struct RunMemory {
  int64_t plan = 0, amp_weight_copy = 0, workspaces = 0, resident_data = 0;
  int64_t total() const { return plan + amp_weight_copy + workspaces + resident_data; }
};

// What run.json holds. conv_algorithms is present on the CUDA backend only (has_conv); the cpu backend records
// none (its convolutions are its own loops, with no algorithm choice). device_memory likewise (has_memory: the
// CUDA backend, once its resident data is uploaded).
struct RunFacts {
  std::string backend;  // Backend::name(): "cpu" | "cuda"
  std::string device;   // Backend::device_description(): the GPU, its SMs and the cuBLASLt / cuDNN versions
                        // loaded (CUDA); "" where not recorded (the cpu backend, older run dirs)
  bool has_conv = false;
  ConvAlgoSources conv;
  bool has_memory = false;
  RunMemory memory;
};

// run.json's text, one object:
//   {"backend": "cuda"[, "device": "NVIDIA H200, sm_90, 132 SMs, ..., cuDNN 91900"], "conv_algorithms":
//    {"source": "autotune cache", "cache": PATH, "cache_exists": true, "from_cache": 39, "from_heuristics": 0,
//    "deterministic": true[, "bn_stats": {"mode": "auto", "fused": 5, "separate": 8, "fallback": 0,
//    "fallback_reason": ""[, "apply": {"mode": "prologue", "folded": 4,
//    "fallback": 0, "fallback_reason": ""}]}]}  (bn_stats only when its mode is not "separate", apply likewise)
//    "device_memory": {"plan_bytes": P, "amp_weight_copy_bytes": A, "workspace_bytes": W,
//    "resident_data_bytes": D, "total_bytes": P + A + W + D}}
// ("conv_algorithms" left out without has_conv, "device_memory" without has_memory; "source" and "total_bytes" are
// written for readers and recomputed when read).
std::string run_facts_json(const RunFacts& f);
// Parses run.json's text (`path` names it in errors). Unknown members are ignored (later versions may add some);
// a conv_algorithms object with a missing or mistyped count is a Format error naming the member.
Result<RunFacts> run_facts_parse(const std::string& text, const std::string& path);

}  // namespace trctl
