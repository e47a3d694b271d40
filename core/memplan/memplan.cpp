// memplan_build: regions and offsets for every value; activations placed greedily (largest first, lowest offset
// that overlaps no value live at the same time).
#include "core/memplan/memplan.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

namespace trctl {

const char* to_string(Region r) {
  switch (r) {
    case Region::Weights: return "weights";
    case Region::Grads: return "grads";
    case Region::OptState: return "opt_state";
    case Region::Inputs: return "inputs";
    case Region::Activations: return "activations";
    case Region::Results: return "results";
    case Region::Hyper: return "hyper";
    case Region::Buffers: return "buffers";
  }
  return "?";
}

int64_t MemoryPlan::total_bytes() const {
  int64_t t = 0;
  for (int64_t b : region_bytes) t += b;
  return t;
}

std::vector<int64_t> program_bases(const Graph& g) {
  std::vector<int64_t> base;
  int64_t pos = 0;
  for (const auto& p : g.programs) {
    base.push_back(pos);
    pos += static_cast<int64_t>(p.nodes.size());
  }
  return base;
}

namespace {

ValueId root_of(const Graph& g, ValueId v) {
  while (g.values[v].alias_of != kNoValue) v = g.values[v].alias_of;
  return v;
}

void place_persistent(const Graph& g, MemoryPlan& m) {
  int64_t off = 0;
  m.update_ranges.clear();
  for (const auto& p : g.params) {
    if (!p.frozen) {  // trainable parameters come first, group by group (assign_param_groups)
      if (m.update_ranges.empty() || m.update_ranges.back().group != p.group)
        m.update_ranges.push_back({off, off, p.group});
    }
    m.values[p.value] = {Region::Weights, off, g.values[p.value].bytes()};
    if (p.grad != kNoValue) m.values[p.grad] = {Region::Grads, off, g.values[p.grad].bytes()};
    off = align_up(off + g.values[p.value].bytes());
    if (!p.frozen) m.update_ranges.back().end = off;
  }
  m.trainable_bytes = m.update_ranges.empty() ? 0 : m.update_ranges.back().end;
  m.weights_bytes = off;
  m.region_bytes[static_cast<int>(Region::Weights)] = off;
  m.region_bytes[static_cast<int>(Region::Grads)] = m.trainable_bytes;
  size_t states = 0;
  for (const auto& p : g.params) {
    states = std::max(states, p.state.size());
    for (size_t s = 0; s < p.state.size(); ++s)
      m.values[p.state[s]] = {Region::OptState, static_cast<int64_t>(s) * off + m.values[p.value].offset,
                              g.values[p.state[s]].bytes()};
  }
  m.region_bytes[static_cast<int>(Region::OptState)] = static_cast<int64_t>(states) * off;
  int64_t boff = 0;
  for (const auto& b : g.buffers) {
    m.values[b.value] = {Region::Buffers, boff, g.values[b.value].bytes()};
    boff = align_up(boff + g.values[b.value].bytes());
  }
  m.region_bytes[static_cast<int>(Region::Buffers)] = boff;
}

// The gradient accumulators: a second copy of the gradient layout after the first, in the Grads region.
void place_grad_accumulators(const Graph& g, MemoryPlan& m) {
  bool any = false;
  for (const auto& p : g.params) any |= p.accum != kNoValue;
  if (!any) return;
  int64_t& grads = m.region_bytes[static_cast<int>(Region::Grads)];
  m.grad_accum_offset = grads;
  for (const auto& p : g.params)
    if (p.accum != kNoValue && p.grad != kNoValue)
      m.values[p.accum] = {Region::Grads, grads + m.values[p.grad].offset, g.values[p.accum].bytes()};
  grads *= 2;
}

void place_inputs_results(const Graph& g, MemoryPlan& m) {
  int64_t max_in = 0, max_lab = 0;
  for (const auto& p : g.programs) {
    max_in = std::max(max_in, stored_bytes(g, p.input));
    max_lab = std::max(max_lab, g.values[p.label].bytes());
  }
  int64_t results = 0;
  for (const auto& p : g.programs) {
    m.values[p.input] = {Region::Inputs, 0, stored_bytes(g, p.input)};
    m.values[p.label] = {Region::Inputs, align_up(max_in), g.values[p.label].bytes()};
    for (ValueId r : {p.loss, p.correct, p.loss_sum, p.correct_sum, p.count, p.correct5, p.correct5_sum}) {
      m.values[r] = {Region::Results, results, g.values[r].bytes()};
      results = align_up(results + g.values[r].bytes());
    }
  }
  m.input_slot_bytes = align_up(max_in) + align_up(max_lab);
  m.region_bytes[static_cast<int>(Region::Inputs)] = 2 * m.input_slot_bytes;
  m.region_bytes[static_cast<int>(Region::Results)] = results;
  m.region_bytes[static_cast<int>(Region::Hyper)] = kHyperBytes;
}

// Liveness of every activation root (aliases extend their root's range; a node's Attrs::overlap its inputs').
void compute_liveness(const Graph& g, MemoryPlan& m) {
  std::vector<int64_t> base = program_bases(g);
  for (size_t pi = 0; pi < g.programs.size(); ++pi) {
    const auto& p = g.programs[pi];
    for (size_t i = 0; i < p.nodes.size(); ++i) {
      int64_t pos = base[pi] + static_cast<int64_t>(i);
      auto touch = [&](ValueId v) {
        Placement& pl = m.values[root_of(g, v)];
        if (pl.first < 0 || pos < pl.first) pl.first = pos;
        pl.last = std::max(pl.last, pos);
      };
      for (ValueId v : p.nodes[i].in) touch(v);
      for (ValueId v : p.nodes[i].out) touch(v);
      if (p.nodes[i].attrs.overlap > 0) {  // pass_overlap_wgrad: the inputs may be read through the window
        pos += p.nodes[i].attrs.overlap;
        for (ValueId v : p.nodes[i].in) touch(v);
      }
    }
  }
}

void place_activations(const Graph& g, MemoryPlan& m) {
  std::vector<ValueId> acts;
  for (ValueId v = 0; v < static_cast<ValueId>(g.values.size()); ++v)
    if (g.values[v].role == Role::Activation && g.values[v].alias_of == kNoValue && m.values[v].first >= 0)
      acts.push_back(v);
  std::stable_sort(acts.begin(), acts.end(),
                   [&](ValueId a, ValueId b) { return stored_bytes(g, a) > stored_bytes(g, b); });
  std::vector<ValueId> placed;
  int64_t top = 0;
  for (ValueId v : acts) {
    Placement& pl = m.values[v];
    pl.region = Region::Activations;
    pl.bytes = stored_bytes(g, v);
    m.activation_naive_bytes += align_up(pl.bytes);
    std::vector<std::pair<int64_t, int64_t>> busy;  // [begin, end) of live-overlapping placed values
    for (ValueId o : placed) {
      const Placement& q = m.values[o];
      if (q.first <= pl.last && pl.first <= q.last) busy.emplace_back(q.offset, q.offset + align_up(q.bytes));
    }
    std::sort(busy.begin(), busy.end());
    int64_t off = 0;
    for (const auto& [b, e] : busy) {
      if (off + pl.bytes <= b) break;
      off = std::max(off, e);
    }
    pl.offset = off;
    top = std::max(top, align_up(off + pl.bytes));
    placed.push_back(v);
  }
  m.region_bytes[static_cast<int>(Region::Activations)] = top;
}

}  // namespace

Result<MemoryPlan> memplan_build(const Graph& g) {
  MemoryPlan m;
  m.values.resize(g.values.size());
  place_persistent(g, m);
  place_grad_accumulators(g, m);
  place_inputs_results(g, m);
  compute_liveness(g, m);
  place_activations(g, m);
  for (ValueId v = 0; v < static_cast<ValueId>(g.values.size()); ++v) {
    if (g.values[v].alias_of == kNoValue) continue;
    ValueId r = root_of(g, v);
    Placement pl = m.values[r];
    pl.bytes = stored_bytes(g, v);
    m.values[v] = pl;
  }
  Status st = memplan_verify(g, m);
  if (!st.ok()) return st.errors();
  return m;
}

Status memplan_verify(const Graph& g, const MemoryPlan& m) {
  std::vector<Error> errs;
  auto fail = [&](ValueId v, const std::string& what) {
    errs.push_back({ErrCode::Internal, "memplan", g.values[v].name + ": " + what});
  };
  for (ValueId v = 0; v < static_cast<ValueId>(g.values.size()); ++v) {
    const Placement& p = m.values[v];
    if (p.offset < 0) continue;
    if (p.offset % kAlign != 0) fail(v, "offset not 256-byte aligned");
    int64_t cap = m.region_bytes[static_cast<int>(p.region)];
    if (p.region == Region::Inputs) cap = m.input_slot_bytes;
    if (p.offset + p.bytes > cap) fail(v, "out of its region's bounds");
  }
  int64_t at = 0;  // the update ranges tile [0, trainable_bytes) in order; a group's parameters lie in its range
  for (const UpdateRange& r : m.update_ranges) {
    if (r.begin != at || r.end < r.begin || r.group < 0 || r.group >= static_cast<int32_t>(g.param_groups.size()))
      errs.push_back(Error{ErrCode::Internal, "memplan", "optimizer update ranges do not tile the trainable weights"});
    at = r.end;
  }
  if (at != m.trainable_bytes)
    errs.push_back(Error{ErrCode::Internal, "memplan", "optimizer update ranges end before the trainable weights"});
  for (const auto& prm : g.params) {
    const int64_t off = m.values[prm.value].offset;
    bool in_range = false;
    for (const UpdateRange& r : m.update_ranges) in_range |= r.group == prm.group && off >= r.begin && off < r.end;
    if (prm.frozen ? off < m.trainable_bytes || prm.grad != kNoValue : !in_range)
      fail(prm.value, prm.frozen ? "frozen parameter inside the trainable range or with a gradient"
                                 : "parameter outside its group's update range");
    if (prm.grad != kNoValue && m.values[prm.grad].offset != m.values[prm.value].offset)
      fail(prm.grad, "grad offset differs from its weight");
    if (prm.accum != kNoValue &&
        (m.grad_accum_offset <= 0 || prm.grad == kNoValue ||
         m.values[prm.accum].offset != m.grad_accum_offset + m.values[prm.grad].offset))
      fail(prm.accum, "gradient accumulator not in the second gradient layout");
    for (size_t s = 0; s < prm.state.size(); ++s)
      if (m.values[prm.state[s]].offset != static_cast<int64_t>(s) * m.weights_bytes + m.values[prm.value].offset)
        fail(prm.state[s], "optimizer state not in the weight layout");
  }
  std::vector<ValueId> acts;
  for (ValueId v = 0; v < static_cast<ValueId>(g.values.size()); ++v)
    if (g.values[v].role == Role::Activation && g.values[v].alias_of == kNoValue && m.values[v].offset >= 0)
      acts.push_back(v);
  for (size_t i = 0; i < acts.size(); ++i)
    for (size_t j = i + 1; j < acts.size(); ++j) {
      const Placement &a = m.values[acts[i]], &b = m.values[acts[j]];
      bool live = a.first <= b.last && b.first <= a.last;
      bool mem = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
      if (live && mem) fail(acts[i], "overlaps live value " + g.values[acts[j]].name);
    }
  if (!errs.empty()) return errs;
  return ok_status();
}

bool memplan_early_write_safe(const Graph& g, const MemoryPlan& m, int program, ValueId v, int64_t at) {
  const Placement& pv = m.values[v];
  if (pv.region != Region::Activations) return true;  // persistent and result regions are never shared
  const int64_t from = program_bases(g)[program] + at, to = pv.first;
  for (ValueId o = 0; o < static_cast<ValueId>(g.values.size()); ++o) {
    const Placement& po = m.values[o];
    if (o == v || po.region != Region::Activations || po.offset < 0 || g.values[o].alias_of != kNoValue) continue;
    const bool mem = po.offset < pv.offset + pv.bytes && pv.offset < po.offset + po.bytes;
    const bool live = po.first <= to && from <= po.last;
    if (mem && live) return false;
  }
  return true;
}

std::string memplan_dump(const Graph& g, const MemoryPlan& m) {
  std::ostringstream os;
  char buf[256];
  os << "memory plan (" << m.total_bytes() << " bytes):\n";
  for (int r = 0; r < kRegionCount; ++r) {
    std::snprintf(buf, sizeof buf, "  region %-12s %12lld bytes\n", to_string(static_cast<Region>(r)),
                  static_cast<long long>(m.region_bytes[r]));
    os << buf;
  }
  os << "  inputs: 2 slots (A/B) of " << m.input_slot_bytes << " bytes; optimizer groups:";
  for (const UpdateRange& r : m.update_ranges)
    os << " [" << r.begin << ", " << r.end << ") " << g.param_groups[static_cast<size_t>(r.group)].name;
  if (m.trainable_bytes < m.weights_bytes) os << "; frozen: [" << m.trainable_bytes << ", " << m.weights_bytes << ")";
  os << "\n";
  if (m.grad_accum_offset > 0)
    os << "  grads: gradients [0, " << m.grad_accum_offset << "), accumulators [" << m.grad_accum_offset << ", "
       << 2 * m.grad_accum_offset << ")\n";
  os << "  activations: " << m.region_bytes[static_cast<int>(Region::Activations)] << " bytes planned, "
     << m.activation_naive_bytes << " bytes without reuse\n";
  os << "values:\n";
  for (ValueId v = 0; v < static_cast<ValueId>(g.values.size()); ++v) {
    const Placement& p = m.values[v];
    if (p.offset < 0) continue;
    std::snprintf(buf, sizeof buf, "  %%%-4d %-34s %-11s +%-10lld %10lld B", v, g.values[v].name.c_str(),
                  to_string(p.region), static_cast<long long>(p.offset), static_cast<long long>(p.bytes));
    os << buf;
    if (p.region == Region::Activations && g.values[v].alias_of == kNoValue)
      os << "  live [" << p.first << ", " << p.last << "]";
    if (g.values[v].alias_of != kNoValue) os << "  view of %" << g.values[v].alias_of;
    os << "\n";
  }
  return os.str();
}

}  // namespace trctl
