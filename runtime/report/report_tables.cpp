// report_fairness and report_results: the recipe comparison and the results (median of N runs with min/max,
// epochs/s, images/s, final and best val top-1, time to accuracy, ratios) as rows of text.
#include "runtime/report/report_tables.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "runtime/report/report_recipe.h"

namespace trctl {
namespace {

std::string normalized(const std::string& s) {
  std::string out;
  bool space = false;
  for (char c : s) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

std::vector<std::string> row_keys(const std::vector<ToolResult>& groups) {
  std::vector<std::string> keys;
  for (const RecipeKey& k : recipe_keys())
    for (const ToolResult& g : groups)
      if (recipe_find(g.recipe, k.key)) {
        keys.push_back(k.key);
        break;
      }
  for (const ToolResult& g : groups)
    for (const RecipeItem& i : g.recipe)
      if (!recipe_key(i.key) && std::find(keys.begin(), keys.end(), i.key) == keys.end()) keys.push_back(i.key);
  return keys;
}

// Items that leave the work of a training step unchanged: not compared when only images/s is reported.
bool throughput_neutral(const std::string& key) {
  for (const char* k : {"epochs", "lr_schedule", "val_loss", "validation", "epoch_time"})
    if (key == k) return true;
  return false;
}

FairRow fair_row(const std::vector<ToolResult>& groups, const std::string& key, bool throughput_only) {
  FairRow row;
  row.key = key;
  const RecipeKey* rk = recipe_key(key);
  row.label = rk ? rk->label : key;
  std::vector<std::string> missing;
  for (const ToolResult& g : groups) {
    const std::string* v = recipe_find(g.recipe, key);
    row.values.push_back(v ? *v : "");
    if (!v) missing.push_back(g.name);
  }
  row.differs.assign(groups.size(), false);
  if (rk && !rk->compared) {
    row.mark = FairMark::Informational;
    return row;
  }
  if (throughput_only && throughput_neutral(key)) {
    row.mark = FairMark::Informational;
    row.marker = "throughput report: no effect on a training step";
    return row;
  }
  const std::string ref = normalized(row.values[0]);
  std::string marker = groups[0].name + ": " + row.values[0];
  for (size_t i = 1; i < groups.size(); ++i) {
    if (row.values[i].empty() || row.values[0].empty() || normalized(row.values[i]) == ref) continue;
    row.differs[i] = true;
    row.mark = FairMark::Differs;
    marker += " / " + groups[i].name + ": " + row.values[i];
  }
  if (row.mark == FairMark::Differs) {
    row.marker = marker;
  } else if (!missing.empty() && groups.size() > 1) {
    row.mark = FairMark::Unknown;
    row.marker = "not stated by ";
    for (size_t i = 0; i < missing.size(); ++i) row.marker += (i ? ", " : "") + missing[i];
  }
  return row;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// "median (min-max)" with N > 1, the value alone with one run, an em dash with none.
std::string cell(const Spread& s, const char* f, const std::string& unit = "") {
  if (s.n == 0) return "—";
  std::string out = fmt(f, s.median) + unit;
  if (s.n > 1) out += " (" + fmt(f, s.min) + "–" + fmt(f, s.max) + ")";
  return out;
}

struct GroupFigures {
  Spread steady, images, final_top1, best_top1, tta_seconds, tta_epochs, ms_per_step, memory, j_per_step;
  int reached = 0, runs = 0;
};

GroupFigures figures_of(const ToolResult& g, double threshold) {
  std::vector<double> steady, images, fin, best, tta_s, tta_e, ms, mem, joules;
  GroupFigures f;
  f.runs = static_cast<int>(g.runs.size());
  for (const RunData& r : g.runs) {
    steady.push_back(r.epochs_per_s_steady);
    images.push_back(r.images_per_s_steady);
    fin.push_back(100 * r.final_val_top1);
    best.push_back(100 * r.best_val_top1);
    ms.push_back(r.ms_per_step);
    mem.push_back(r.peak_memory_bytes);
    joules.push_back(r.j_per_step);
    if (!std::isfinite(threshold) || g.synthetic) continue;
    const TimeToAccuracy t = time_to_accuracy(r, threshold);
    if (!t.reached) continue;
    ++f.reached;
    tta_s.push_back(t.seconds);
    tta_e.push_back(t.epoch);
  }
  f.steady = spread_of(steady);
  f.images = spread_of(images);
  f.final_top1 = spread_of(fin);
  f.best_top1 = spread_of(best);
  f.tta_seconds = spread_of(tta_s);
  f.tta_epochs = spread_of(tta_e);
  f.ms_per_step = spread_of(ms);
  f.memory = spread_of(mem);
  f.j_per_step = spread_of(joules);
  return f;
}

// Bytes in GiB (two decimals) from 1 GiB up, else in MiB.
std::string memory_cell(const Spread& s) {
  if (s.n == 0) return "—";
  const bool gib = s.median >= 1073741824.0;
  Spread scaled = s;
  const double unit = gib ? 1073741824.0 : 1048576.0;
  scaled.median /= unit;
  scaled.min /= unit;
  scaled.max /= unit;
  return cell(scaled, gib ? "%.2f" : "%.0f", gib ? " GiB" : " MiB");
}

std::string tta_cell(const GroupFigures& f, const Spread& s, const char* format, const std::string& unit) {
  if (f.reached == 0) return "not reached";
  std::string c = cell(s, format, unit);
  if (f.reached < f.runs) c += " (" + std::to_string(f.reached) + "/" + std::to_string(f.runs) + " runs reached)";
  return c;
}

std::string ratio(const Spread& a, const Spread& b) {
  if (a.n == 0 || b.n == 0 || b.median == 0) return "—";
  return fmt("%.2f", a.median / b.median) + "×";
}

std::string points(const Spread& a, const Spread& b) {
  if (a.n == 0 || b.n == 0) return "—";
  return fmt("%+.2f", a.median - b.median) + " pt";
}

}  // namespace

std::vector<FairRow> report_fairness(const std::vector<ToolResult>& groups) {
  std::vector<FairRow> rows;
  if (groups.empty()) return rows;
  const bool throughput_only = report_throughput_only(groups);
  for (const std::string& key : row_keys(groups)) rows.push_back(fair_row(groups, key, throughput_only));
  return rows;
}

double report_default_threshold(const std::vector<ToolResult>& groups) {
  double lowest = kNoFigure;
  for (const ToolResult& g : groups) {
    std::vector<double> fin;
    for (const RunData& r : g.runs) fin.push_back(r.final_val_top1);
    const Spread s = spread_of(fin);
    if (s.n > 0) lowest = std::isfinite(lowest) ? std::min(lowest, s.median) : s.median;
  }
  return std::isfinite(lowest) ? lowest - 0.01 : kNoFigure;
}

namespace {

// Throughput only: images/s and ms/step with their ratios; memory in each tool's own measure, never divided; where
// an input measured the board's energy, joules per step (with the mean watts they imply: J / s per step) and
// their ratio.
ResultsTable throughput_results(const std::vector<ToolResult>& groups) {
  ResultsTable t;
  t.throughput_only = true;
  t.header = {"tool", "runs", "images/s (steady)", "ms/step (steady)", "peak memory"};
  std::vector<GroupFigures> figs;
  bool energy = false;
  for (const ToolResult& g : groups) {
    figs.push_back(figures_of(g, kNoFigure));
    energy |= figs.back().j_per_step.n > 0;
  }
  if (energy) t.header.push_back("J/step (steady)");
  for (size_t i = 0; i < groups.size(); ++i) {
    const GroupFigures& f = figs[i];
    t.rows.push_back({groups[i].name, std::to_string(f.runs), cell(f.images, "%.0f"), cell(f.ms_per_step, "%.2f"),
                      memory_cell(f.memory)});
    if (energy) {
      std::string j = cell(f.j_per_step, "%.2f");
      if (f.j_per_step.n > 0 && f.ms_per_step.n > 0 && f.ms_per_step.median > 0)
        j += fmt(" at %.0f W", 1000 * f.j_per_step.median / f.ms_per_step.median);
      t.rows.back().push_back(j);
    }
    t.ratio_row.push_back(false);
  }
  for (size_t i = 1; i < groups.size(); ++i) {
    t.rows.push_back({groups[0].name + " / " + groups[i].name, "", ratio(figs[0].images, figs[i].images),
                      ratio(figs[0].ms_per_step, figs[i].ms_per_step), "—"});
    if (energy) t.rows.back().push_back(ratio(figs[0].j_per_step, figs[i].j_per_step));
    t.ratio_row.push_back(true);
  }
  return t;
}

}  // namespace

ResultsTable report_results(const std::vector<ToolResult>& groups, double threshold) {
  if (report_throughput_only(groups)) return throughput_results(groups);
  ResultsTable t;
  t.threshold = threshold;
  const std::string pct = std::isfinite(threshold) ? fmt("%.2f", 100 * threshold) + " %" : "—";
  t.header = {"tool", "runs", "epochs/s (steady)", "images/s (steady)", "final val top-1", "best val top-1",
              "time to " + pct, "epochs to " + pct};
  std::vector<GroupFigures> figs;
  for (const ToolResult& g : groups) {
    const GroupFigures f = figures_of(g, threshold);
    figs.push_back(f);
    if (g.synthetic) {  // in a report with real-data runs: its throughput, never its accuracy
      const std::string syn = "synthetic data";
      t.rows.push_back({g.name, std::to_string(f.runs), cell(f.steady, "%.2f"), cell(f.images, "%.0f"), syn, syn,
                        syn, syn});
    } else {
      t.rows.push_back({g.name, std::to_string(f.runs), cell(f.steady, "%.2f"), cell(f.images, "%.0f"),
                        cell(f.final_top1, "%.2f", " %"), cell(f.best_top1, "%.2f", " %"),
                        tta_cell(f, f.tta_seconds, "%.2f", " s"), tta_cell(f, f.tta_epochs, "%.0f", "")});
    }
    t.ratio_row.push_back(false);
  }
  for (size_t i = 1; i < groups.size(); ++i) {
    const GroupFigures &a = figs[0], &b = figs[i];
    t.rows.push_back({groups[0].name + " / " + groups[i].name, "", ratio(a.steady, b.steady),
                      ratio(a.images, b.images), points(a.final_top1, b.final_top1),
                      points(a.best_top1, b.best_top1), ratio(a.tta_seconds, b.tta_seconds),
                      ratio(a.tta_epochs, b.tta_epochs)});
    t.ratio_row.push_back(true);
  }
  return t;
}

}  // namespace trctl
