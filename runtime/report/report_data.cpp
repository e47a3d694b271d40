// Readers of trctl run directories (config.resolved.yaml, plan.txt, run.json, metrics.jsonl or summary.csv) and of
// trctl-bench-result JSON files into ToolResult; per-run figures, grouping, spreads and time to accuracy.
#include "runtime/report/report_data.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/report/json.h"
#include "runtime/report/report_recipe.h"

namespace trctl {
namespace {

namespace fs = std::filesystem;

Result<std::string> read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Error{ErrCode::Io, path, std::string("cannot read: ") + std::strerror(errno)};
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// `o[key]` as a number: NaN when absent or null, an error naming the file and the JSON path otherwise.
Status get_number(const JsonNode& o, const char* key, const std::string& where, const std::string& ctx, double* out) {
  const JsonNode* v = o.find(key);
  if (!v || v->is_null()) return ok_status();
  if (!v->is_number()) return Error{ErrCode::WrongType, where, ctx + "." + key + ": expected a number or null"};
  *out = v->number;
  return ok_status();
}

// One epoch object: "epoch" required; `seconds_key` names the epoch's wall time ("seconds" in the result schema,
// "epoch_seconds" in metrics.jsonl, whose "seconds" counts from the start of the run).
Result<EpochPoint> epoch_from_json(const JsonNode& o, const std::string& where, const std::string& ctx,
                                   const char* seconds_key) {
  if (!o.is_object()) return Error{ErrCode::WrongType, where, ctx + ": expected an object"};
  EpochPoint e;
  double epoch = kNoFigure;
  const std::pair<const char*, double*> fields[] = {
      {"epoch", &epoch},       {"train_loss", &e.train_loss}, {"train_top1", &e.train_top1},
      {"val_loss", &e.val_loss}, {"val_top1", &e.val_top1},   {"lr", &e.lr},
      {"images_per_s", &e.images_per_s}, {seconds_key, &e.seconds}, {"energy_j", &e.energy_j},
      {"steps", &e.steps}};
  for (const auto& [key, dst] : fields) {
    Status st = get_number(o, key, where, ctx, dst);
    if (!st.ok()) return st.errors();
  }
  if (!std::isfinite(epoch) || epoch < 0)
    return Error{ErrCode::Missing, where, ctx + ": no \"epoch\" number in the epoch record"};
  e.epoch = static_cast<int>(epoch);
  return e;
}

Result<std::vector<EpochPoint>> read_metrics_jsonl(const std::string& path) {
  Result<std::string> text = read_text(path);
  if (!text.ok()) return text.errors();
  std::vector<EpochPoint> epochs;
  size_t offset = 0, line_no = 1;
  const std::string& s = text.value();
  while (offset < s.size()) {
    const size_t end = std::min(s.find('\n', offset), s.size());
    const std::string line = s.substr(offset, end - offset);
    if (line.find_first_not_of(" \t\r") != std::string::npos) {
      Result<JsonNode> j = json_read(line, path, offset, line_no);
      if (!j.ok()) return j.errors();
      const JsonNode* kind = j->find("kind");
      if (kind && kind->is_string() && kind->string == "epoch") {
        Result<EpochPoint> e = epoch_from_json(j.value(), path, "line " + std::to_string(line_no), "epoch_seconds");
        if (!e.ok()) return e.errors();
        epochs.push_back(e.value());
      }
    }
    offset = end + 1;
    ++line_no;
  }
  return epochs;
}

// summary.csv, columns found by their header names; an empty field (epoch not validated) is no value.
Result<std::vector<EpochPoint>> read_summary_csv(const std::string& path) {
  Result<std::string> text = read_text(path);
  if (!text.ok()) return text.errors();
  std::istringstream in(text.value());
  std::string line;
  std::vector<std::string> header;
  std::vector<EpochPoint> epochs;
  auto split = [](const std::string& l) {
    std::vector<std::string> f;
    std::istringstream ls(l);
    std::string x;
    while (std::getline(ls, x, ',')) f.push_back(x);
    if (!l.empty() && l.back() == ',') f.emplace_back();
    return f;
  };
  for (int n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (header.empty()) {
      header = split(line);
      if (std::find(header.begin(), header.end(), "epoch") == header.end())
        return Error{ErrCode::Format, path + ":1", "no 'epoch' column: not a trctl summary.csv"};
      continue;
    }
    const std::vector<std::string> f = split(line);
    EpochPoint e;
    for (size_t i = 0; i < f.size() && i < header.size(); ++i) {
      const double v = f[i].empty() ? kNoFigure : std::strtod(f[i].c_str(), nullptr);
      const std::string& h = header[i];
      if (h == "epoch") e.epoch = static_cast<int>(v);
      else if (h == "lr") e.lr = v;
      else if (h == "train_loss") e.train_loss = v;
      else if (h == "train_top1") e.train_top1 = v;
      else if (h == "val_loss") e.val_loss = v;
      else if (h == "val_top1") e.val_top1 = v;
      else if (h == "images_per_s") e.images_per_s = v;
      else if (h == "epoch_seconds") e.seconds = v;
    }
    epochs.push_back(e);
  }
  return epochs;
}

// A directory without config.resolved.yaml: say what it looks like instead.
Error not_a_run_dir(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(fs::path(dir) / "weights.safetensors", ec))
    return Error{ErrCode::Invalid, dir, "a checkpoint directory, not a run directory (the run directory holds "
                                        "checkpoints/ and config.resolved.yaml)"};
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory(ec) && fs::exists(e.path() / "config.resolved.yaml", ec))
      return Error{ErrCode::Invalid, dir, "a folder of run directories (e.g. " + e.path().string() +
                                              "): give the run directories themselves"};
  return Error{ErrCode::Invalid, dir, "not a trctl run directory: no config.resolved.yaml"};
}

// A recipe value as text: strings as they are, numbers through %g, arrays "[a, b]".
std::string json_text(const JsonNode& v) {
  switch (v.kind) {
    case JsonKind::Null: return "";
    case JsonKind::Bool: return v.boolean ? "true" : "false";
    case JsonKind::Number: return recipe_number(v.number);
    case JsonKind::String: return v.string;
    case JsonKind::Array: {
      std::string s;
      for (const JsonNode& e : v.array) s += (s.empty() ? "" : ", ") + json_text(e);
      return "[" + s + "]";
    }
    case JsonKind::Object: {
      std::string s;
      for (const auto& [k, e] : v.object) s += (s.empty() ? "" : ", ") + k + "=" + json_text(e);
      return "{" + s + "}";
    }
  }
  return "";
}

Result<RunData> run_from_json(const JsonNode& r, const std::string& path, size_t index) {
  const std::string ctx = "runs[" + std::to_string(index) + "]";
  if (!r.is_object()) return Error{ErrCode::WrongType, path, ctx + ": expected an object"};
  RunData run;
  run.source = path + " run " + std::to_string(index + 1);
  const std::pair<const char*, double*> fields[] = {{"final_val_top1", &run.final_val_top1},
                                                    {"best_val_top1", &run.best_val_top1},
                                                    {"epochs_per_s_steady", &run.epochs_per_s_steady},
                                                    {"images_per_s_steady", &run.images_per_s_steady},
                                                    {"seconds", &run.seconds},
                                                    {"ms_per_step", &run.ms_per_step},
                                                    {"peak_memory_bytes", &run.peak_memory_bytes},
                                                    {"j_per_step", &run.j_per_step}};
  for (const auto& [key, dst] : fields) {
    Status st = get_number(r, key, path, ctx, dst);
    if (!st.ok()) return st.errors();
  }
  if (const JsonNode* epochs = r.find("epochs"); epochs && !epochs->is_null()) {
    if (!epochs->is_array()) return Error{ErrCode::WrongType, path, ctx + ".epochs: expected an array"};
    for (size_t i = 0; i < epochs->array.size(); ++i) {
      Result<EpochPoint> e =
          epoch_from_json(epochs->array[i], path, ctx + ".epochs[" + std::to_string(i) + "]", "seconds");
      if (!e.ok()) return e.errors();
      run.epochs.push_back(e.value());
    }
  }
  report_run_finalize(run);
  return run;
}

// plan.txt's "memory plan (N bytes):" line: the bytes the memory plan places; NaN without one.
double plan_bytes(const std::string& plan) {
  const std::string tag = "\nmemory plan (";
  const size_t at = plan.find(tag);
  if (at == std::string::npos) return kNoFigure;
  char* end = nullptr;
  const double v = std::strtod(plan.c_str() + at + tag.size(), &end);
  return end && std::strncmp(end, " bytes)", 7) == 0 ? v : kNoFigure;
}

bool starts_with_nocase(const std::string& s, const char* prefix) {
  const size_t first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return false;
  for (size_t i = 0; prefix[i]; ++i)
    if (first + i >= s.size() || std::tolower(static_cast<unsigned char>(s[first + i])) != prefix[i]) return false;
  return true;
}

}  // namespace

Result<ToolResult> report_read_run_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return Error{ErrCode::Io, dir, "no such run directory"};
  if (!fs::is_directory(dir, ec))
    return Error{ErrCode::Invalid, dir, "not a directory: give trctl run directories (runs/<name>/) as arguments "
                                        "and result JSON files after --vs"};
  const fs::path d(dir);
  if (!fs::exists(d / "config.resolved.yaml", ec)) return not_a_run_dir(dir);
  Result<std::string> config = read_text((d / "config.resolved.yaml").string());
  if (!config.ok()) return config.errors();
  std::string plan;
  if (fs::exists(d / "plan.txt", ec)) {
    Result<std::string> p = read_text((d / "plan.txt").string());
    if (!p.ok()) return p.errors();
    plan = p.value();
  }
  RunFacts facts;  // run.json: the backend and its convolution algorithms' source (older run dirs have none)
  const bool has_facts = fs::exists(d / "run.json", ec);
  if (has_facts) {
    Result<std::string> text = read_text((d / "run.json").string());
    if (!text.ok()) return text.errors();
    Result<RunFacts> f = run_facts_parse(text.value(), (d / "run.json").string());
    if (!f.ok()) return f.errors();
    facts = std::move(f.value());
  }
  Result<std::vector<RecipeItem>> recipe = recipe_from_trctl(config.value(), (d / "config.resolved.yaml").string(),
                                                             plan, has_facts ? &facts : nullptr);
  if (!recipe.ok()) return recipe.errors();
  const std::string metrics = (d / "metrics.jsonl").string(), summary = (d / "summary.csv").string();
  const bool has_jsonl = fs::exists(metrics, ec);
  if (!has_jsonl && !fs::exists(summary, ec))
    return Error{ErrCode::Missing, dir, "no metrics: neither metrics.jsonl nor summary.csv in the run directory"};
  Result<std::vector<EpochPoint>> epochs = has_jsonl ? read_metrics_jsonl(metrics) : read_summary_csv(summary);
  if (!epochs.ok()) return epochs.errors();
  if (epochs->empty())
    return Error{ErrCode::Missing, has_jsonl ? metrics : summary,
                 "no epoch records: the run did not finish an epoch"};
  ToolResult t;
  t.tool = t.name = "trctl";
  t.recipe = std::move(recipe.value());
  RunData run;
  run.source = dir;
  run.epochs = std::move(epochs.value());
  report_run_finalize(run);
  // Every device allocation where run.json records them (the CUDA backend: comparable with an allocator's peak,
  // which counts workspaces and resident data too), else the memory plan alone (older run directories, cpu).
  const bool all_allocations = has_facts && facts.has_memory;
  run.peak_memory_bytes = all_allocations ? static_cast<double>(facts.memory.total()) : plan_bytes(plan);
  const bool has_memory = std::isfinite(run.peak_memory_bytes);
  t.runs.push_back(std::move(run));
  report_tool_finish(t);
  if (has_memory && t.synthetic) {  // the memory column of a throughput report says what it counts
    if (all_allocations)
      t.recipe.push_back({"memory_measure", "every device allocation of the run (run.json device_memory: the memory "
                                            "plan, the AMP weight copy, workspaces, resident data); without the CUDA "
                                            "context"});
    else
      t.recipe.push_back({"memory_measure", "the memory plan (plan.txt: weights, gradients, optimizer state, inputs, "
                                            "activations); without the AMP weight copy, workspaces, resident data "
                                            "and the CUDA context"});
  }
  return t;
}

Result<ToolResult> report_read_result_json(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    return Error{ErrCode::Invalid, path, "a directory: --vs takes result JSON files (docs/report.md); trctl run "
                                         "directories are given without --vs"};
  Result<JsonNode> j = json_read_file(path);
  if (!j.ok()) return j.errors();
  const JsonNode& top = j.value();
  const JsonNode* tool = top.find("tool");
  if (!top.is_object() || !tool || !tool->is_string() || tool->string.empty())
    return Error{ErrCode::Format, path, "no \"tool\" string: not a result in the trctl-bench-result schema "
                                        "(docs/report.md)"};
  ToolResult t;
  t.tool = tool->string;
  const JsonNode* name = top.find("name");
  t.name = name && name->is_string() && !name->string.empty() ? name->string : t.tool;
  const JsonNode* recipe = top.find("recipe");
  if (!recipe || !recipe->is_object()) return Error{ErrCode::Format, path, "no \"recipe\" object"};
  for (const auto& [k, v] : recipe->object)
    if (!v.is_null()) t.recipe.push_back({k, json_text(v)});
  const JsonNode* runs = top.find("runs");
  if (!runs || !runs->is_array() || runs->array.empty())
    return Error{ErrCode::Format, path, "no \"runs\" array with at least one run"};
  for (size_t i = 0; i < runs->array.size(); ++i) {
    Result<RunData> r = run_from_json(runs->array[i], path, i);
    if (!r.ok()) return r.errors();
    t.runs.push_back(std::move(r.value()));
  }
  // A measurement that says its loss ended non-finite timed a diverged model: NaN and inf arithmetic, which draws
  // less power than a training step (a power-capped card then clocks higher), and no optimizer update.
  const JsonNode* measurement = top.find("measurement");
  const JsonNode* finite = measurement && measurement->is_object() ? measurement->find("loss_finite") : nullptr;
  if (finite && finite->kind == JsonKind::Bool && !finite->boolean)
    t.notes.push_back(t.name + "'s loss was not finite at the end of its measurement (the model diverged): its " +
                      "steps computed NaN and inf values, not a training step; its figures are no training speed");
  report_tool_finish(t);
  return t;
}

void report_tool_finish(ToolResult& t) {
  const std::string* dataset = recipe_find(t.recipe, "dataset");
  t.synthetic = dataset && starts_with_nocase(*dataset, "synthetic");
  const std::string* batch_text = recipe_find(t.recipe, "batch_size");
  const double batch = batch_text ? std::strtod(batch_text->c_str(), nullptr) : 0;
  for (RunData& r : t.runs) {
    if (t.synthetic) {  // random labels: an accuracy would be a claim about nothing
      for (EpochPoint& e : r.epochs) e.train_top1 = e.val_top1 = kNoFigure;
      r.final_val_top1 = r.best_val_top1 = kNoFigure;
    }
    if (!std::isfinite(r.ms_per_step) && batch > 0 && std::isfinite(r.images_per_s_steady) &&
        r.images_per_s_steady > 0)
      r.ms_per_step = 1000 * batch / r.images_per_s_steady;
  }
}

bool report_throughput_only(const std::vector<ToolResult>& groups) {
  if (groups.empty()) return false;
  for (const ToolResult& g : groups)
    if (!g.synthetic) return false;
  return true;
}

void report_run_finalize(RunData& run) {
  auto& e = run.epochs;
  std::stable_sort(e.begin(), e.end(), [](const EpochPoint& a, const EpochPoint& b) { return a.epoch < b.epoch; });
  std::vector<EpochPoint> kept;  // a repeated epoch (a resumed run) keeps its last record
  for (size_t i = 0; i < e.size(); ++i)
    if (i + 1 == e.size() || e[i + 1].epoch != e[i].epoch) kept.push_back(e[i]);
  e = std::move(kept);
  if (e.empty()) return;
  double best = kNoFigure, final_top1 = kNoFigure, total = 0, steady = 0, inv_ips = 0, joules = 0, steps = 0;
  bool all_seconds = true, all_ips = true, all_energy = true;
  for (size_t i = 0; i < e.size(); ++i) {
    if (std::isfinite(e[i].val_top1)) {
      final_top1 = e[i].val_top1;
      best = std::isfinite(best) ? std::max(best, e[i].val_top1) : e[i].val_top1;
    }
    all_seconds &= std::isfinite(e[i].seconds);
    total += e[i].seconds;
    if (i > 0) steady += e[i].seconds;
    if (i > 0 || e.size() == 1) {
      all_ips &= std::isfinite(e[i].images_per_s) && e[i].images_per_s > 0;
      inv_ips += 1 / e[i].images_per_s;
      all_energy &= std::isfinite(e[i].energy_j) && std::isfinite(e[i].steps) && e[i].steps > 0;
      joules += e[i].energy_j;
      steps += e[i].steps;
    }
  }
  const double n_steady = e.size() == 1 ? 1.0 : static_cast<double>(e.size() - 1);
  if (std::isfinite(final_top1)) run.final_val_top1 = final_top1, run.best_val_top1 = best;
  if (all_seconds) run.seconds = total;
  if (all_seconds && e.size() > 1 && steady > 0) run.epochs_per_s_steady = n_steady / steady;
  if (all_ips) run.images_per_s_steady = n_steady / inv_ips;  // equal images per epoch: the harmonic mean
  if (all_energy) run.j_per_step = joules / steps;
}

std::vector<ToolResult> report_group(std::vector<ToolResult> inputs) {
  std::vector<ToolResult> groups;
  for (ToolResult& in : inputs) {
    auto g = std::find_if(groups.begin(), groups.end(),
                          [&](const ToolResult& x) { return x.tool == in.tool && x.name == in.name; });
    if (g == groups.end()) {
      groups.push_back(std::move(in));
      continue;
    }
    for (const RecipeKey& k : recipe_keys()) {
      const std::string *a = recipe_find(g->recipe, k.key), *b = recipe_find(in.recipe, k.key);
      if (!k.compared || std::string(k.key) == "runs" || (!a && !b) || (a && b && *a == *b)) continue;
      g->notes.push_back("the runs of " + g->name + " differ in " + k.label + ": '" + (a ? *a : "-") + "' (" +
                         g->runs.front().source + ") vs '" + (b ? *b : "-") + "' (" + in.runs.front().source +
                         ")");
    }
    g->synthetic = g->synthetic || in.synthetic;
    for (RunData& r : in.runs) g->runs.push_back(std::move(r));
  }
  auto ref = std::find_if(groups.begin(), groups.end(), [](const ToolResult& g) { return g.tool == "trctl"; });
  if (ref != groups.end()) std::rotate(groups.begin(), ref, ref + 1);
  for (ToolResult& g : groups) {
    const std::string n = std::to_string(g.runs.size());
    auto it = std::find_if(g.recipe.begin(), g.recipe.end(), [](const RecipeItem& i) { return i.key == "runs"; });
    if (it != g.recipe.end()) it->value = n;
    else g.recipe.push_back({"runs", n});
  }
  return groups;
}

const std::string* recipe_find(const std::vector<RecipeItem>& recipe, const std::string& key) {
  for (const RecipeItem& i : recipe)
    if (i.key == key) return &i.value;
  return nullptr;
}

Spread spread_of(std::vector<double> values) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return !std::isfinite(v); }),
               values.end());
  Spread s;
  s.n = static_cast<int>(values.size());
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  const size_t m = values.size() / 2;
  s.median = values.size() % 2 ? values[m] : (values[m - 1] + values[m]) / 2;
  s.min = values.front();
  s.max = values.back();
  return s;
}

TimeToAccuracy time_to_accuracy(const RunData& run, double threshold) {
  TimeToAccuracy t;
  double seconds = 0;
  for (const EpochPoint& e : run.epochs) {
    seconds += e.seconds;  // NaN from here on when an epoch lacks its time
    if (std::isfinite(e.val_top1) && e.val_top1 >= threshold) {
      t.reached = true;
      t.epoch = e.epoch;
      t.seconds = seconds;
      return t;
    }
  }
  return t;
}

}  // namespace trctl
