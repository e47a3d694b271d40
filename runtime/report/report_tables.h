// The two tables of a report as plain rows of text, shared by the Markdown and HTML writers: the fairness table
// (every recipe item side by side, differences marked) and the results table (median, min and max of N runs).
#pragma once
#include <string>
#include <vector>

#include "runtime/report/report_data.h"

namespace trctl {

enum class FairMark {
  Same,         // every group states the same value
  Differs,      // a compared item whose value differs from the reference group's
  Unknown,      // some group does not state it
  Informational // not compared (framework, device, seed; in a throughput report also the items that do not
                // change a training step: epochs, lr schedule, validation, validation loss, epoch time)
};

struct FairRow {
  std::string key, label;
  std::vector<std::string> values;  // one per group ("" when the group does not state it)
  std::vector<bool> differs;        // per group: differs from the reference (group 0); false for group 0
  FairMark mark = FairMark::Same;
  std::string marker;  // Differs: "trctl: fp16 AMP / pytorch: bf16"; Unknown: "not stated by pytorch";
                       // Informational: why, when it is compared in other reports ("" otherwise)
};

// Documented items in their order, then the sources' other items; values compared after trimming, collapsing
// whitespace and ignoring case. In a throughput report (report_throughput_only) the items that do not change
// the work of a training step are informational.
std::vector<FairRow> report_fairness(const std::vector<ToolResult>& groups);

struct ResultsTable {
  bool throughput_only = false;  // every input on synthetic data: images/s, ms/step and memory, no accuracy
  double threshold = kNoFigure;  // time-to-accuracy threshold (val top-1 as a fraction)
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;  // first cell: the group's name, or "A / B" for a ratio row
  std::vector<bool> ratio_row;
};

// The threshold when --tta is not given: the lowest group median of final val top-1, minus 1 point.
double report_default_threshold(const std::vector<ToolResult>& groups);

// One row per group (medians with min-max over its runs), then one ratio row per other group against group 0.
// Accuracy columns (epochs/s, images/s, final and best val top-1, time and epochs to the threshold; a synthetic
// group's accuracy cells read "synthetic data"), or in a throughput report: images/s, ms/step, peak memory, and
// J/step (with the watts it implies) when any group measured its energy.
ResultsTable report_results(const std::vector<ToolResult>& groups, double threshold);

}  // namespace trctl
