// The report's plots: a gnuplot script (data inline, one PNG per figure, every group's runs overlaid on the same
// axes where the data exists) and running gnuplot on it as a child process.
#pragma once
#include <string>
#include <vector>

#include "runtime/report/report_data.h"

namespace trctl {

struct PlotRef {
  std::string file;     // PNG name in the report directory
  std::string title;
  std::string caption;  // one line under the image
};

// loss.png, accuracy.png, lr.png, throughput.png, in this order; for a throughput report (every input on
// synthetic data) throughput.png (bars) and throughput_epochs.png.
std::vector<PlotRef> plot_refs(bool throughput_only);

// gnuplot itself: $TRCTL_GNUPLOT when set, else `gnuplot` on PATH; an error saying how to install it otherwise.
Result<std::string> gnuplot_find();

// The script that writes plot_refs(report_throughput_only(groups))' files into the current directory
// (gnuplot >= 5: inline data blocks).
std::string plot_script(const std::vector<ToolResult>& groups);

// Runs `gnuplot SCRIPT` with `dir` as its working directory (its output in dir/gnuplot.log) and checks that
// every PNG of `refs` was written and starts with the PNG signature.
Status plot_run(const std::string& gnuplot, const std::string& dir, const std::string& script_name,
                const std::vector<PlotRef>& refs);

}  // namespace trctl
