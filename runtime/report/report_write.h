// report.md and report.html of `trctl report`: the inputs, the fairness table, the results table and the plots
// (PNG files next to the report, referenced by relative paths; the HTML is otherwise self-contained).
#pragma once
#include <string>
#include <vector>

#include "runtime/report/report_data.h"
#include "runtime/report/report_plot.h"
#include "runtime/report/report_tables.h"

namespace trctl {

struct ReportDoc {
  std::vector<ToolResult> groups;  // reference group first
  std::vector<FairRow> fairness;
  ResultsTable results;
  bool threshold_given = false;    // --tta, rather than the default threshold
  std::vector<PlotRef> plots;      // empty when written with --no-plots
};

ReportDoc report_build(std::vector<ToolResult> groups, double tta, bool with_plots);

std::string report_markdown(const ReportDoc& doc);
std::string report_html(const ReportDoc& doc);

// Writes `text` to `path` through a temporary file renamed into place.
Status report_write_file(const std::string& path, const std::string& text);

}  // namespace trctl
