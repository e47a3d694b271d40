// trctl report RUN_DIR... [--vs RESULT.json...] -o DIR: reads every input (all errors at once), groups the runs
// by tool, draws the plots with gnuplot and writes report.md and report.html.
#include "apps/cmd_report.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>

#include "apps/cli_errors.h"
#include "runtime/report/report_plot.h"
#include "runtime/report/report_write.h"

namespace trctl {
namespace {


Result<std::vector<ToolResult>> read_inputs(const ReportArgs& a) {
  std::vector<ToolResult> inputs;
  std::vector<Error> errors;
  auto take = [&](Result<ToolResult> r) {
    if (r.ok()) inputs.push_back(std::move(r.value()));
    else errors.insert(errors.end(), r.errors().begin(), r.errors().end());
  };
  for (const std::string& d : a.run_dirs) take(report_read_run_dir(d));
  for (const std::string& f : a.vs) take(report_read_result_json(f));
  if (!errors.empty()) return errors;
  return inputs;
}

Result<double> threshold_of(double tta) {
  if (tta < 0) return kNoFigure;
  const double t = tta > 1 ? tta / 100 : tta;  // 85 and 0.85 both mean 85 %
  if (!(t > 0 && t <= 1)) return Error{ErrCode::OutOfRange, "--tta", "expected a top-1 in (0, 1] or a percentage"};
  return t;
}

Status write_report(const ReportArgs& a, const ReportDoc& doc, const std::string& gnuplot) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(a.out, ec);
  if (ec) return Error{ErrCode::Io, a.out, "cannot create the report directory: " + ec.message()};
  if (!a.no_plots) {
    Status st = report_write_file(a.out + "/plots.gp", plot_script(doc.groups));
    if (st.ok()) st = plot_run(gnuplot, a.out, "plots.gp", doc.plots);
    if (!st.ok()) return st;
  }
  Status st = report_write_file(a.out + "/report.md", report_markdown(doc));
  if (st.ok()) st = report_write_file(a.out + "/report.html", report_html(doc));
  return st;
}

}  // namespace

CLI::App* report_subcommand(CLI::App& app, ReportArgs& a) {
  auto* cmd = app.add_subcommand(
      "report", "fairness report: trctl run directories vs benchmark result JSON files (recipes side by side, "
                "results, gnuplot plots) as report.md and report.html");
  cmd->add_option("run_dirs", a.run_dirs, "trctl run directories (runs/<name>/); several: median of the runs");
  cmd->add_option("--vs", a.vs, "result JSON files in the trctl-bench-result schema (docs/report.md), e.g. "
                                "from benchmarks/pytorch_mlp_fmnist.py --out")
      ->expected(1, -1);
  cmd->add_option("-o,--output", a.out, "the report directory (created)")->required();
  cmd->add_option("--tta", a.tta, "time-to-accuracy threshold, val top-1 as 0.85 or 85 (default: the lowest median "
                                  "final val top-1 minus 1 point)");
  cmd->add_flag("--no-plots", a.no_plots, "write the report without plots (no gnuplot needed)");
  return cmd;
}

int cmd_report(const ReportArgs& a) {
  if (a.run_dirs.empty() && a.vs.empty()) {
    std::fprintf(stderr, "error: trctl report RUN_DIR [RUN_DIR...] [--vs RESULT.json...] -o REPORT_DIR: no inputs\n");
    return kExitBadInput;
  }
  Result<double> tta = threshold_of(a.tta);
  if (!tta.ok()) return report_errors(tta.errors());
  std::string gnuplot;
  if (!a.no_plots) {
    Result<std::string> g = gnuplot_find();
    if (!g.ok()) return report_errors(g.errors());
    gnuplot = g.value();
  }
  Result<std::vector<ToolResult>> inputs = read_inputs(a);
  if (!inputs.ok()) return report_errors(inputs.errors());
  const ReportDoc doc = report_build(report_group(std::move(inputs.value())), tta.value(), !a.no_plots);
  Status st = write_report(a, doc, gnuplot);
  if (!st.ok()) return report_errors(st.errors());
  int diffs = 0;
  for (const FairRow& r : doc.fairness) diffs += r.mark == FairMark::Differs;
  const std::string plots = a.no_plots ? " (no plots)" : ", " + std::to_string(doc.plots.size()) + " plots";
  std::printf("report: %s/report.md, %s/report.html%s; %zu tools, %d recipe difference%s%s\n", a.out.c_str(),
              a.out.c_str(), plots.c_str(), doc.groups.size(), diffs, diffs == 1 ? "" : "s",
              doc.results.throughput_only ? "; throughput only (synthetic data)" : "");
  return 0;
}

}  // namespace trctl
