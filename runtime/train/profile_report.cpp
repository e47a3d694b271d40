// profile_table / profile_metrics: see profile_report.h.
#include "runtime/train/profile_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "runtime/report/json.h"

namespace trctl {
namespace {

struct OpTotal {
  int count = 0;
  double ms = 0, flops = 0, bytes = 0, mj = 0;
  double loaded_ms = 0;  // the energy loops' time per run (mj / w): ms at the clocks that load left
};

// A node's time per run in its energy loop (mj / w), or its burst ms where the power was not recorded.
double loaded_ms(const NodeTime& n) { return n.w > 0 ? n.mj / n.w : n.ms; }

double sum_ms(const StepProfile& p) {
  double s = 0;
  for (const NodeTime& n : p.nodes) s += n.ms;
  return s;
}

// "412.3 TFLOP/s (52%)" for matrix work, else "1830 GB/s (43%)" (bytes read + written once).
std::string rate(double ms, double flops, double bytes) {
  char buf[64];
  if (ms <= 0) return "-";
  if (flops > 0) {
    const double t = flops / (ms * 1e-3) / 1e12;
    std::snprintf(buf, sizeof buf, "%7.1f TFLOP/s (%3.0f%%)", t, 100 * t / kH200MatrixTflops);
  } else {
    const double g = bytes / (ms * 1e-3) / 1e9;
    std::snprintf(buf, sizeof buf, "%7.0f GB/s    (%3.0f%%)", g, 100 * g / kH200CopyGBs);
  }
  return buf;
}

// The nodes, largest `key` (ms, mj) first.
std::vector<const NodeTime*> nodes_by(const StepProfile& p, double NodeTime::*key) {
  std::vector<const NodeTime*> nodes;
  for (const NodeTime& n : p.nodes) nodes.push_back(&n);
  std::sort(nodes.begin(), nodes.end(), [key](const NodeTime* a, const NodeTime* b) { return a->*key > b->*key; });
  return nodes;
}

// The energy section (ProfileOptions::energy_s > 0): the step's energy and power, then the op kinds and the nodes
// that spend the most, each with the board's mean power over its runs and its time per run there ("loaded ms":
// above the burst's ms where the power cap lowered the clocks).
std::string energy_table(const StepProfile& p, const std::vector<std::pair<std::string, OpTotal>>& ops, int top) {
  std::string out;
  char buf[512];
  double nodes_mj = 0;
  for (const NodeTime& n : p.nodes) nodes_mj += n.mj;
  char settle[64] = "";
  if (p.energy_settle_s > 0) std::snprintf(settle, sizeof settle, ", after %.1f s of them", p.energy_settle_s);
  std::snprintf(buf, sizeof buf,
                "\nenergy (the board's counter over %.1f s of back-to-back runs each%s): step %.2f J per replay at "
                "%.0f W; nodes one by one %.2f J\n",
                p.energy_s, settle, p.step_mj * 1e-3, p.step_w, nodes_mj * 1e-3);
  out += buf;
  std::vector<std::pair<std::string, OpTotal>> by_j = ops;
  std::sort(by_j.begin(), by_j.end(), [](const auto& a, const auto& b) { return a.second.mj > b.second.mj; });
  out += "by op kind                      count      J   share      W  loaded ms  burst ms\n";
  for (const auto& [op, t] : by_j) {
    std::snprintf(buf, sizeof buf, "  %-28s %5d %8.3f %5.1f%%  %5.0f %10.3f %9.3f\n", op.c_str(), t.count,
                  t.mj * 1e-3, nodes_mj > 0 ? 100 * t.mj / nodes_mj : 0.0,
                  t.loaded_ms > 0 ? t.mj / t.loaded_ms : 0.0, t.loaded_ms, t.ms);
    out += buf;
  }
  const std::vector<const NodeTime*> nodes = nodes_by(p, &NodeTime::mj);
  std::snprintf(buf, sizeof buf, "most energy: %d nodes (W and loaded ms over its energy runs; burst ms)\n", top);
  out += buf;
  for (int i = 0; i < top && i < static_cast<int>(nodes.size()); ++i) {
    const NodeTime& n = *nodes[i];
    const double lms = loaded_ms(n);
    std::snprintf(buf, sizeof buf, "  %-34s %-20s %8.3f J %5.1f%%  %5.0f W  %8.3f ms %8.3f ms\n", n.name.c_str(),
                  n.op.c_str(), n.mj * 1e-3, nodes_mj > 0 ? 100 * n.mj / nodes_mj : 0.0, lms > 0 ? n.mj / lms : 0.0,
                  lms, n.ms);
    out += buf;
  }
  return out;
}

}  // namespace

std::string profile_table(const StepProfile& p, int64_t batch, int top) {
  std::string out;
  char buf[512];
  const double total = sum_ms(p);
  std::snprintf(buf, sizeof buf,
                "step (captured graph replay): %.3f ms = %.0f img/s at batch %lld; nodes run one by one: %.3f ms "
                "(%zu nodes, %d reps each)\n",
                p.graph_ms, p.graph_ms > 0 ? batch / (p.graph_ms * 1e-3) : 0.0, static_cast<long long>(batch),
                total, p.nodes.size(), p.reps);
  out += buf;
  if (total > 0 && p.graph_ms > 0) {  // what one graph launch saves over a launch per node
    const double saved = total - p.graph_ms;
    std::snprintf(buf, sizeof buf,
                  "graph replay vs node sum: %.3f ms vs %.3f ms = %.2f; the graph %s %.3f ms per step (the node "
                  "sum holds one launch latency per node)\n",
                  p.graph_ms, total, p.graph_ms / total, saved >= 0 ? "saves" : "costs", std::fabs(saved));
    out += buf;
  }
  if (p.sustained_ms > 0) {  // the step at the clocks a training run settles to
    std::snprintf(buf, sizeof buf,
                  "sustained: %.3f ms = %.0f img/s over %d replays after %.1f s of replays (%+.1f %% vs the burst%s)\n",
                  p.sustained_ms, batch / (p.sustained_ms * 1e-3), p.sustained_reps, p.sustain_s,
                  p.graph_ms > 0 ? 100 * (p.sustained_ms / p.graph_ms - 1) : 0.0,
                  p.sustained_ms > p.graph_ms ? ": slower under sustained load, e.g. the card's power cap"
                                              : ": faster once the clocks have settled under load");
    out += buf;
  }
  if (p.graph_ms > 0) {
    std::snprintf(buf, sizeof buf,
                  "graph launch: %.3f ms of host time per cudaGraphLaunch onto a drained stream; that launch costs "
                  "%.3f ms more than a replay (the stream's start and end)\n",
                  p.launch_host_ms, p.restart_ms);
    out += buf;
  }
  std::map<std::string, OpTotal> by_op;
  for (const NodeTime& n : p.nodes) {
    OpTotal& t = by_op[n.op];
    ++t.count;
    t.ms += n.ms;
    t.flops += n.flops;
    t.bytes += n.bytes;
    t.mj += n.mj;
    t.loaded_ms += loaded_ms(n);
  }
  std::vector<std::pair<std::string, OpTotal>> ops(by_op.begin(), by_op.end());
  std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  out += "\nby op kind                      count     ms   share  achieved (of the card's ceiling)\n";
  for (const auto& [op, t] : ops) {
    std::snprintf(buf, sizeof buf, "  %-28s %5d %8.3f %5.1f%%  %s\n", op.c_str(), t.count, t.ms,
                  total > 0 ? 100 * t.ms / total : 0.0, rate(t.ms, t.flops, t.bytes).c_str());
    out += buf;
  }
  const std::vector<const NodeTime*> nodes = nodes_by(p, &NodeTime::ms);
  std::snprintf(buf, sizeof buf, "\nslowest %d nodes\n", top);
  out += buf;
  for (int i = 0; i < top && i < static_cast<int>(nodes.size()); ++i) {
    const NodeTime& n = *nodes[i];
    std::snprintf(buf, sizeof buf, "  %-34s %-20s %-22s %8.3f ms %5.1f%%  %s\n", n.name.c_str(), n.op.c_str(),
                  n.shape.c_str(), n.ms, total > 0 ? 100 * n.ms / total : 0.0, rate(n.ms, n.flops, n.bytes).c_str());
    out += buf;
  }
  if (p.energy_s > 0) out += energy_table(p, ops, top);
  if (p.skipped_steps >= 0) {  // the training state the replays left (a diverged one times NaN arithmetic)
    const bool finite = std::isfinite(p.end_loss);
    std::snprintf(buf, sizeof buf, "\nstate after the profile: loss %.4f, %lld steps skipped for non-finite "
                  "gradients%s\n", p.end_loss, static_cast<long long>(p.skipped_steps),
                  finite ? "" : "\nWARNING: the loss is not finite: the model diverged during the profile, and "
                                "steps on NaN and inf values are not a training step's work or power");
    out += buf;
  }
  return out;
}

void profile_metrics(const StepProfile& p, int64_t batch, BenchResult* out) {
  out->add("step_ms", p.graph_ms, "ms", false);
  out->add("images_per_s", p.graph_ms > 0 ? batch / (p.graph_ms * 1e-3) : 0.0, "img/s", true);
  if (p.sustained_ms > 0) {  // shown, not checked: new with the sustained timing (the baselines predate it)
    out->add("step_ms_sustained", p.sustained_ms, "ms", false, false, false);
    out->add("images_per_s_sustained", batch / (p.sustained_ms * 1e-3), "img/s", true, false, false);
  }
  if (p.energy_s > 0) {  // shown, not checked: the counter's 20-100 ms updates make it a few % coarse
    out->add("step_j", p.step_mj * 1e-3, "J", false, false, false);
    out->add("step_w", p.step_w, "W", false, false, false);
  }
  out->add("nodes_ms", sum_ms(p), "ms", false);
  out->add("launch_host_ms", p.launch_host_ms, "ms", false);
  out->add("restart_ms", p.restart_ms, "ms", false);
  std::map<std::string, double> by_op;
  for (const NodeTime& n : p.nodes) by_op[n.op] += n.ms;
  for (const auto& [op, ms] : by_op) out->add("op/" + op + "_ms", ms, "ms", false);
  std::string nodes = "[";
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    const NodeTime& n = p.nodes[i];
    nodes += std::string(i ? ",\n    " : "\n    ") + "{\"name\": " + json_quote(n.name) + ", \"op\": " +
             json_quote(n.op) + ", \"shape\": " + json_quote(n.shape) + ", \"ms\": " + json_number(n.ms) +
             ", \"flops\": " + json_number(n.flops) + ", \"bytes\": " + json_number(n.bytes);
    if (p.energy_s > 0) nodes += ", \"mj\": " + json_number(n.mj) + ", \"w\": " + json_number(n.w);
    if (!n.launch_ms.empty()) {
      nodes += ", \"launch_ms\": [";
      for (size_t k = 0; k < n.launch_ms.size(); ++k) nodes += (k ? ", " : "") + json_number(n.launch_ms[k]);
      nodes += "]";
    }
    nodes += "}";
  }
  out->details.emplace_back("nodes", nodes + (p.nodes.empty() ? "]" : "\n  ]"));
  out->details.emplace_back("batch", std::to_string(batch));
  out->details.emplace_back("reps", std::to_string(p.reps));
  if (p.energy_s > 0) {
    out->details.emplace_back("energy_s", json_number(p.energy_s));
    out->details.emplace_back("energy_settle_s", json_number(p.energy_settle_s));
  }
  if (p.skipped_steps >= 0) {
    out->details.emplace_back("end_loss", json_number(p.end_loss));
    out->details.emplace_back("skipped_steps", std::to_string(p.skipped_steps));
  }
}

}  // namespace trctl
