// ConvAlgoSources counting and run.json's writer and reader (see run_facts.h).
#include "runtime/run_facts.h"

#include <cmath>
#include <initializer_list>
#include <utility>

#include "runtime/report/json.h"

namespace trctl {

void conv_algo_sources_add(ConvAlgoSources& s, const std::array<bool, 3>& planned, const std::array<bool, 3>& cached) {
  for (size_t d = 0; d < planned.size(); ++d) {
    if (!planned[d]) continue;
    if (cached[d]) ++s.from_cache;
    else ++s.from_heuristics;
  }
}

const char* conv_algo_source(const ConvAlgoSources& s) {
  if (s.from_cache > 0 && s.from_heuristics > 0) return "mixed";
  if (s.from_cache > 0) return "autotune cache";
  if (s.from_heuristics > 0) return "heuristics";
  return "none";
}

std::string run_facts_json(const RunFacts& f) {
  std::string s = "{\"backend\": " + json_quote(f.backend);
  if (!f.device.empty()) s += ", \"device\": " + json_quote(f.device);
  if (f.has_conv) {
    const ConvAlgoSources& c = f.conv;
    s += ", \"conv_algorithms\": {\"source\": " + json_quote(conv_algo_source(c)) + ", \"cache\": " +
         json_quote(c.cache) + ", \"cache_exists\": " + (c.cache_exists ? "true" : "false") +
         ", \"from_cache\": " + std::to_string(c.from_cache) + ", \"from_heuristics\": " +
         std::to_string(c.from_heuristics) + ", \"deterministic\": " + (c.deterministic ? "true" : "false");
    if (c.graph_engines > 0) s += ", \"graph_engines\": " + std::to_string(c.graph_engines);
    if (c.bn_grad_folded > 0) s += ", \"bn_grad_folded\": " + std::to_string(c.bn_grad_folded);
    if (c.wgconv_dgrad > 0) s += ", \"wgconv_dgrad\": " + std::to_string(c.wgconv_dgrad);
    if (c.wgconv_fwd > 0) s += ", \"wgconv_fwd\": " + std::to_string(c.wgconv_fwd);
    if (c.wgconv_bn_folded > 0) s += ", \"wgconv_bn_folded\": " + std::to_string(c.wgconv_bn_folded);
    if (c.wgconv_bn_unwritten > 0) s += ", \"wgconv_bn_unwritten\": " + std::to_string(c.wgconv_bn_unwritten);
    if (c.wgconv_wgrad > 0) s += ", \"wgconv_wgrad\": " + std::to_string(c.wgconv_wgrad);
    if (c.dgrad_fwd > 0) s += ", \"dgrad_fwd\": " + std::to_string(c.dgrad_fwd);
    if (c.wgrad_overlapped > 0) s += ", \"wgrad_overlapped\": " + std::to_string(c.wgrad_overlapped);
    if (c.bn_bwd_mode != "separate")
      s += ", \"bn_backward\": {\"mode\": " + json_quote(c.bn_bwd_mode) + ", \"fused\": " +
           std::to_string(c.bn_bwd_fused) + ", \"separate\": " + std::to_string(c.bn_bwd_separate) +
           ", \"fallback\": " + std::to_string(c.bn_bwd_fallback) + ", \"fallback_reason\": " +
           json_quote(c.bn_bwd_fallback_reason) + "}";
    if (c.bn_stats_mode != "separate")
      s += ", \"bn_stats\": {\"mode\": " + json_quote(c.bn_stats_mode) + ", \"fused\": " +
           std::to_string(c.bn_stats_fused) + ", \"separate\": " + std::to_string(c.bn_stats_separate) +
           ", \"fallback\": " + std::to_string(c.bn_stats_fallback) + ", \"fallback_reason\": " +
           json_quote(c.bn_stats_fallback_reason) +
           (c.bn_apply_mode == "separate"
                ? std::string()
                : ", \"apply\": {\"mode\": " + json_quote(c.bn_apply_mode) + ", \"folded\": " +
                      std::to_string(c.bn_apply_folded) + ", \"fallback\": " + std::to_string(c.bn_apply_fallback) +
                      ", \"fallback_reason\": " + json_quote(c.bn_apply_fallback_reason) + "}") +
           "}";
    s += "}";
  }
  if (f.has_memory) {
    const RunMemory& m = f.memory;
    s += ", \"device_memory\": {\"plan_bytes\": " + std::to_string(m.plan) + ", \"amp_weight_copy_bytes\": " +
         std::to_string(m.amp_weight_copy) + ", \"workspace_bytes\": " + std::to_string(m.workspaces) +
         ", \"resident_data_bytes\": " + std::to_string(m.resident_data) + ", \"total_bytes\": " +
         std::to_string(m.total()) + "}";
  }
  return s + "}\n";
}

namespace {

// A member that is a whole number in [0, max]: conv_algorithms' counts (int: max 2^31 - 1) and device_memory's
// byte counts (int64_t: max 2^53, exact in a JSON number).
template <class I>
bool whole_of(const JsonNode& obj, const char* key, double max, I* out) {
  const JsonNode* n = obj.find(key);
  if (!n || !n->is_number() || n->number < 0 || n->number != std::floor(n->number) || n->number > max) return false;
  *out = static_cast<I>(n->number);
  return true;
}
bool count_of(const JsonNode& conv, const char* key, int* out) { return whole_of(conv, key, 2147483647.0, out); }
bool bytes_of(const JsonNode& obj, const char* key, int64_t* out) { return whole_of(obj, key, 9007199254740992.0, out); }

// A boolean member; absent keeps *out.
bool bool_of(const JsonNode& conv, const char* key, bool* out) {
  const JsonNode* n = conv.find(key);
  if (!n) return true;
  if (n->kind != JsonKind::Bool) return false;
  *out = n->boolean;
  return true;
}

// One of conv_algorithms' fusion records ("bn_stats", its "apply"), named `name` in errors: the counts, the mode
// (required) and the first fallback's reason (optional).
Status fusion_record_of(const JsonNode& obj, const std::string& name, const std::string& path,
                        std::initializer_list<std::pair<const char*, int*>> counts, std::string* mode,
                        std::string* reason) {
  if (!obj.is_object()) return Error{ErrCode::Format, path, name + ": expected an object"};
  for (const auto& [key, out] : counts)
    if (!count_of(obj, key, out))
      return Error{ErrCode::Format, path, name + "." + key + ": expected a count (an integer >= 0)"};
  const JsonNode* m = obj.find("mode");
  if (!m || !m->is_string()) return Error{ErrCode::Format, path, name + ".mode: expected a string"};
  *mode = m->string;
  if (const JsonNode* r = obj.find("fallback_reason"); r && r->is_string()) *reason = r->string;
  return ok_status();
}

}  // namespace

Result<RunFacts> run_facts_parse(const std::string& text, const std::string& path) {
  Result<JsonNode> j = json_read(text, path);
  if (!j.ok()) return j.errors();
  const JsonNode& top = j.value();
  if (!top.is_object()) return Error{ErrCode::Format, path, "run.json: expected one JSON object"};
  RunFacts f;
  if (const JsonNode* b = top.find("backend"); b && b->is_string()) f.backend = b->string;
  if (const JsonNode* d = top.find("device"); d && d->is_string()) f.device = d->string;
  if (const JsonNode* mem = top.find("device_memory"); mem && !mem->is_null()) {
    if (!mem->is_object()) return Error{ErrCode::Format, path, "device_memory: expected an object"};
    const std::pair<const char*, int64_t*> sizes[] = {{"plan_bytes", &f.memory.plan},
                                                       {"amp_weight_copy_bytes", &f.memory.amp_weight_copy},
                                                       {"workspace_bytes", &f.memory.workspaces},
                                                       {"resident_data_bytes", &f.memory.resident_data}};
    for (const auto& [key, out] : sizes)
      if (!bytes_of(*mem, key, out))
        return Error{ErrCode::Format, path,
                     std::string("device_memory.") + key + ": expected a byte count (an integer >= 0)"};
    f.has_memory = true;
  }
  const JsonNode* conv = top.find("conv_algorithms");
  if (!conv || conv->is_null()) return f;
  if (!conv->is_object()) return Error{ErrCode::Format, path, "conv_algorithms: expected an object"};
  const std::pair<const char*, int*> counts[] = {{"from_cache", &f.conv.from_cache},
                                                  {"from_heuristics", &f.conv.from_heuristics}};
  for (const auto& [key, out] : counts)
    if (!count_of(*conv, key, out))
      return Error{ErrCode::Format, path,
                   std::string("conv_algorithms.") + key + ": expected a count (an integer >= 0)"};
  const std::pair<const char*, bool*> flags[] = {{"cache_exists", &f.conv.cache_exists},
                                                 {"deterministic", &f.conv.deterministic}};
  for (const auto& [key, out] : flags)
    if (!bool_of(*conv, key, out))
      return Error{ErrCode::Format, path, std::string("conv_algorithms.") + key + ": expected true or false"};
  if (const JsonNode* c = conv->find("cache"); c && c->is_string()) f.conv.cache = c->string;
  if (conv->find("graph_engines") && !count_of(*conv, "graph_engines", &f.conv.graph_engines))
    return Error{ErrCode::Format, path, "conv_algorithms.graph_engines: expected a count (an integer >= 0)"};
  if (conv->find("bn_grad_folded") && !count_of(*conv, "bn_grad_folded", &f.conv.bn_grad_folded))
    return Error{ErrCode::Format, path, "conv_algorithms.bn_grad_folded: expected a count (an integer >= 0)"};
  for (auto [key, out] : {std::pair{"wgconv_dgrad", &f.conv.wgconv_dgrad}, {"wgconv_fwd", &f.conv.wgconv_fwd},
                          {"wgconv_bn_folded", &f.conv.wgconv_bn_folded},
                          {"wgconv_bn_unwritten", &f.conv.wgconv_bn_unwritten}, {"wgconv_wgrad", &f.conv.wgconv_wgrad},
                          {"dgrad_fwd", &f.conv.dgrad_fwd}, {"wgrad_overlapped", &f.conv.wgrad_overlapped}})
    if (conv->find(key) && !count_of(*conv, key, out))
      return Error{ErrCode::Format, path,
                   std::string("conv_algorithms.") + key + ": expected a count (an integer >= 0)"};
  if (const JsonNode* bb = conv->find("bn_backward"); bb && !bb->is_null()) {  // train.conv_bn_backward, likewise
    ConvAlgoSources& c = f.conv;
    Status st = fusion_record_of(*bb, "conv_algorithms.bn_backward", path,
                                 {{"fused", &c.bn_bwd_fused}, {"separate", &c.bn_bwd_separate},
                                  {"fallback", &c.bn_bwd_fallback}},
                                 &c.bn_bwd_mode, &c.bn_bwd_fallback_reason);
    if (!st.ok()) return st.errors();
  }
  if (const JsonNode* bs = conv->find("bn_stats"); bs && !bs->is_null()) {  // train.conv_bn_stats, when not separate
    ConvAlgoSources& c = f.conv;
    Status st = fusion_record_of(*bs, "conv_algorithms.bn_stats", path,
                                 {{"fused", &c.bn_stats_fused}, {"separate", &c.bn_stats_separate},
                                  {"fallback", &c.bn_stats_fallback}},
                                 &c.bn_stats_mode, &c.bn_stats_fallback_reason);
    if (!st.ok()) return st.errors();
    if (const JsonNode* ap = bs->find("apply"); ap && !ap->is_null()) {  // train.conv_bn_apply, when not separate
      st = fusion_record_of(*ap, "conv_algorithms.bn_stats.apply", path,
                            {{"folded", &c.bn_apply_folded}, {"fallback", &c.bn_apply_fallback}}, &c.bn_apply_mode,
                            &c.bn_apply_fallback_reason);
      if (!st.ok()) return st.errors();
    }
  }
  f.has_conv = true;
  return f;
}

}  // namespace trctl
