// trctl report: the fairness report of trctl run directories against other tools' benchmark results
// (docs/report.md): report.md, report.html and gnuplot PNGs in one output directory.
#pragma once
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace trctl {

struct ReportArgs {
  std::vector<std::string> run_dirs;  // trctl run directories
  std::vector<std::string> vs;        // result JSON files (trctl-bench-result schema)
  std::string out;                    // the report directory
  double tta = -1;                    // time-to-accuracy threshold (fraction, or percent when > 1); < 0: default
  bool no_plots = false;
};

// Adds `report` and its options to the command line.
CLI::App* report_subcommand(CLI::App& app, ReportArgs& a);
int cmd_report(const ReportArgs& a);

}  // namespace trctl
