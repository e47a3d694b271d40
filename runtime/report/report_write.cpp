// report_markdown and report_html: the same document (inputs, fairness, results, plots, definitions) as Markdown
// with **bold** differences and as one HTML page with inline CSS; report_write_file writes atomically.
#include "runtime/report/report_write.h"

#include <cerrno>
#include <cstdio>
#include <iterator>
#include <cstring>
#include <sstream>

namespace trctl {
namespace {

const char* const kDefinitions[] = {
    "*steady*: epochs 2..N; epochs/s = (N − 1) / wall time of epochs 2..N, so that epoch 1 (trctl's graph "
    "capture, torch.compile's compilation) is left out on both sides; an epoch's time covers training and "
    "validation.",
    "*images/s*: training images per second of training time (validation excluded), over epochs 2..N.",
    "*final* / *best val top-1*: the last validated epoch's / the highest validation top-1.",
    "*time to accuracy*: wall time of epochs 1..k (epoch 1's compilation included) where k is the first epoch "
    "whose validation top-1 reaches the threshold; *epochs to* is k.",
    "Each figure is the median over a tool's runs, with (min–max) when there is more than one run; a ratio row "
    "divides the reference's medians by the other tool's (for times, below 1 means the reference is faster) and "
    "gives accuracy differences in points.",
};

const char* const kThroughputDefinitions[] = {
    "*throughput report*: every input trained on synthetic data (random images and labels), so accuracies mean "
    "nothing and none is shown; recipe items that do not change a training step (epochs, lr schedule, "
    "validation) are not compared.",
    "*images/s (steady)*: training images per second of training time (validation excluded); for a run with "
    "epoch records over epochs 2..N (epoch 1 holds trctl's graph capture), else the figure the result states "
    "(benchmarks/pytorch_cnn.py: one run per timed window of steps, after the first step — compilation, cuDNN "
    "autotuning — and the warm-up steps).",
    "*ms/step*: the figure a result states, else 1000 × batch size / images/s.",
    "*peak memory*: each tool's own measure (the fairness table's peak memory measure), not divided in the "
    "ratio rows.",
    "Each figure is the median over a tool's runs, with (min–max) when there is more than one run; a ratio row "
    "divides the reference's medians by the other tool's (images/s above 1 and ms/step below 1 mean the reference "
    "is faster).",
};

// The definitions under the results table of this kind of report.
std::vector<const char*> definitions(const ReportDoc& d) {
  if (d.results.throughput_only)
    return {std::begin(kThroughputDefinitions), std::end(kThroughputDefinitions)};
  return {std::begin(kDefinitions), std::end(kDefinitions)};
}

std::string md_cell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += ' ';
    else out += c;
  }
  return out.empty() ? "—" : out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// "*x*" spans of the definitions as <em> in HTML.
std::string html_emph(const std::string& s) {
  std::string out;
  bool open = false;
  for (char c : html_escape(s)) {
    if (c == '*') out += (open = !open) ? "<em>" : "</em>";
    else out += c;
  }
  return out;
}

std::string title_of(const ReportDoc& d) {
  std::string t;
  for (size_t i = 0; i < d.groups.size(); ++i) t += (i ? " vs " : "") + d.groups[i].name;
  return "trctl report: " + t;
}

std::string threshold_text(const ReportDoc& d) {
  if (!std::isfinite(d.results.threshold)) return "no threshold (no validated epochs)";
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.2f %% val top-1 (%s)", 100 * d.results.threshold,
                d.threshold_given ? "--tta" : "the lowest median final val top-1 minus 1 point");
  return buf;
}

// The sentence under "## Results".
std::string results_intro(const ReportDoc& d) {
  if (d.results.throughput_only)
    return "Median of N runs (min–max). Throughput only: every input trained on synthetic data, so no accuracy is "
           "shown.";
  return "Median of N runs (min–max). Time-to-accuracy threshold: " + threshold_text(d) + ".";
}

std::vector<std::string> differing_labels(const ReportDoc& d) {
  std::vector<std::string> out;
  for (const FairRow& r : d.fairness)
    if (r.mark == FairMark::Differs) out.push_back(r.label);
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

std::string mark_text(const FairRow& r) {
  switch (r.mark) {
    case FairMark::Same: return "=";
    case FairMark::Differs: return "≠ " + r.marker;
    case FairMark::Unknown: return "? " + r.marker;
    case FairMark::Informational: return r.marker.empty() ? "(info)" : "(info: " + r.marker + ")";
  }
  return "";
}

void md_inputs(std::ostringstream& os, const ReportDoc& d) {
  os << "## Inputs\n\n";
  for (const ToolResult& g : d.groups) {
    os << "- **" << md_cell(g.name) << "** (" << g.tool << ", " << g.runs.size()
       << (g.runs.size() == 1 ? " run" : " runs") << "):";
    for (size_t i = 0; i < g.runs.size(); ++i) os << (i ? "," : "") << " `" << g.runs[i].source << "`";
    os << "\n";
  }
  for (const ToolResult& g : d.groups)
    for (const std::string& n : g.notes) os << "\n> **warning**: " << md_cell(n) << "\n";
  os << "\n";
}

void md_fairness(std::ostringstream& os, const ReportDoc& d) {
  os << "## Fairness: the recipes side by side\n\n"
     << "Generated from each side's recipe (trctl: config.resolved.yaml and plan.txt; others: the result JSON's "
        "\"recipe\"). A **bold** value and ≠ in the last column mark an item that differs from "
     << d.groups[0].name << "'s; ? an item a side does not state; (info) items are not compared.\n\n";
  os << "| item |";
  for (const ToolResult& g : d.groups) os << " " << md_cell(g.name) << " |";
  os << " differs |\n|---|";
  for (size_t i = 0; i < d.groups.size(); ++i) os << "---|";
  os << "---|\n";
  for (const FairRow& r : d.fairness) {
    const bool diff = r.mark == FairMark::Differs;
    os << "| " << (diff ? "**" + md_cell(r.label) + "**" : md_cell(r.label)) << " |";
    for (size_t i = 0; i < r.values.size(); ++i) {
      const bool bold = diff && (i == 0 || r.differs[i]) && !r.values[i].empty();
      os << " " << (bold ? "**" + md_cell(r.values[i]) + "**" : md_cell(r.values[i])) << " |";
    }
    os << " " << md_cell(mark_text(r)) << " |\n";
  }
  const std::vector<std::string> diffs = differing_labels(d);
  os << "\n" << diffs.size() << (diffs.size() == 1 ? " difference" : " differences")
     << (diffs.empty() ? "." : ": " + joined(diffs) + ".") << "\n\n";
}

void md_results(std::ostringstream& os, const ReportDoc& d) {
  const ResultsTable& t = d.results;
  os << "## Results\n\n" << results_intro(d) << "\n\n|";
  for (const std::string& h : t.header) os << " " << md_cell(h) << " |";
  os << "\n|";
  for (size_t i = 0; i < t.header.size(); ++i) os << (i ? "---:|" : "---|");
  os << "\n";
  for (size_t r = 0; r < t.rows.size(); ++r) {
    os << "|";
    for (size_t c = 0; c < t.rows[r].size(); ++c) {
      const std::string v = md_cell(t.rows[r][c]);
      os << " " << (t.ratio_row[r] && c == 0 ? "*" + v + "*" : v) << " |";
    }
    os << "\n";
  }
  os << "\n";
  for (const char* def : definitions(d)) os << "- " << def << "\n";
  os << "\n";
}

void md_plots(std::ostringstream& os, const ReportDoc& d) {
  os << "## Plots\n\n";
  if (d.plots.empty()) os << "Written with --no-plots.\n";
  for (const PlotRef& p : d.plots)
    os << "### " << p.title << "\n\n![" << p.title << "](" << p.file << ")\n\n" << p.caption << ".\n\n";
}

const char kCss[] =
    "body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
    "table{border-collapse:collapse;margin:1em 0;font-size:14px}"
    "th,td{border:1px solid #ccc;padding:4px 8px;vertical-align:top;text-align:left}"
    "th{background:#f0f0f0}tr.diff td{background:#fff3cd}tr.unknown td.mark{color:#888}"
    "tr.ratio td{font-style:italic;background:#f7f7f7}td.num{text-align:right}"
    ".warn{background:#fde2e1;padding:6px 10px;border-left:4px solid #d62728}"
    "img{max-width:100%;border:1px solid #ddd}figcaption{color:#555;font-size:14px}";

void html_inputs(std::ostringstream& os, const ReportDoc& d) {
  os << "<h2>Inputs</h2>\n<ul>\n";
  for (const ToolResult& g : d.groups) {
    os << "<li><strong>" << html_escape(g.name) << "</strong> (" << html_escape(g.tool) << ", " << g.runs.size()
       << (g.runs.size() == 1 ? " run" : " runs") << "):";
    for (size_t i = 0; i < g.runs.size(); ++i)
      os << (i ? "," : "") << " <code>" << html_escape(g.runs[i].source) << "</code>";
    os << "</li>\n";
  }
  os << "</ul>\n";
  for (const ToolResult& g : d.groups)
    for (const std::string& n : g.notes) os << "<p class=\"warn\">warning: " << html_escape(n) << "</p>\n";
}

void html_fairness(std::ostringstream& os, const ReportDoc& d) {
  os << "<h2>Fairness: the recipes side by side</h2>\n<p>Highlighted rows differ from " << html_escape(d.groups[0].name)
     << "'s recipe (the differing values in bold); ? marks an item a side does not state; (info) items are not "
        "compared.</p>\n<table>\n<tr><th>item</th>";
  for (const ToolResult& g : d.groups) os << "<th>" << html_escape(g.name) << "</th>";
  os << "<th>differs</th></tr>\n";
  for (const FairRow& r : d.fairness) {
    const bool diff = r.mark == FairMark::Differs;
    os << "<tr" << (diff ? " class=\"diff\"" : r.mark == FairMark::Unknown ? " class=\"unknown\"" : "") << "><td>"
       << (diff ? "<strong>" + html_escape(r.label) + "</strong>" : html_escape(r.label)) << "</td>";
    for (size_t i = 0; i < r.values.size(); ++i) {
      const bool bold = diff && (i == 0 || r.differs[i]);
      const std::string v = r.values[i].empty() ? "—" : html_escape(r.values[i]);
      os << "<td>" << (bold ? "<strong>" + v + "</strong>" : v) << "</td>";
    }
    os << "<td class=\"mark\">" << html_escape(mark_text(r)) << "</td></tr>\n";
  }
  const std::vector<std::string> diffs = differing_labels(d);
  os << "</table>\n<p>" << diffs.size() << (diffs.size() == 1 ? " difference" : " differences")
     << html_escape(diffs.empty() ? "." : ": " + joined(diffs) + ".") << "</p>\n";
}

void html_results(std::ostringstream& os, const ReportDoc& d) {
  const ResultsTable& t = d.results;
  os << "<h2>Results</h2>\n<p>" << html_escape(results_intro(d)) << "</p>\n<table>\n<tr>";
  for (const std::string& h : t.header) os << "<th>" << html_escape(h) << "</th>";
  os << "</tr>\n";
  for (size_t r = 0; r < t.rows.size(); ++r) {
    os << "<tr" << (t.ratio_row[r] ? " class=\"ratio\"" : "") << ">";
    for (size_t c = 0; c < t.rows[r].size(); ++c)
      os << "<td" << (c > 0 ? " class=\"num\"" : "") << ">" << html_escape(t.rows[r][c]) << "</td>";
    os << "</tr>\n";
  }
  os << "</table>\n<ul>\n";
  for (const char* def : definitions(d)) os << "<li>" << html_emph(def) << "</li>\n";
  os << "</ul>\n";
}

}  // namespace

ReportDoc report_build(std::vector<ToolResult> groups, double tta, bool with_plots) {
  ReportDoc d;
  d.groups = std::move(groups);
  d.threshold_given = std::isfinite(tta);
  d.fairness = report_fairness(d.groups);
  d.results = report_results(d.groups, d.threshold_given ? tta : report_default_threshold(d.groups));
  if (with_plots) d.plots = plot_refs(d.results.throughput_only);
  return d;
}

std::string report_markdown(const ReportDoc& d) {
  std::ostringstream os;
  os << "# " << title_of(d) << "\n\nGenerated by `trctl report` (docs/report.md).\n\n";
  md_inputs(os, d);
  md_fairness(os, d);
  md_results(os, d);
  md_plots(os, d);
  return os.str();
}

std::string report_html(const ReportDoc& d) {
  std::ostringstream os;
  const std::string title = html_escape(title_of(d));
  os << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" << title
     << "</title>\n<style>" << kCss << "</style>\n</head>\n<body>\n<h1>" << title
     << "</h1>\n<p>Generated by <code>trctl report</code> (docs/report.md).</p>\n";
  html_inputs(os, d);
  html_fairness(os, d);
  html_results(os, d);
  os << "<h2>Plots</h2>\n";
  if (d.plots.empty()) os << "<p>Written with --no-plots.</p>\n";
  for (const PlotRef& p : d.plots)
    os << "<figure>\n<img src=\"" << html_escape(p.file) << "\" alt=\"" << html_escape(p.title) << "\">\n<figcaption>"
       << html_escape(p.title) << ": " << html_escape(p.caption) << ".</figcaption>\n</figure>\n";
  os << "</body>\n</html>\n";
  return os.str();
}

Status report_write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return Error{ErrCode::Io, path, std::string("cannot write: ") + std::strerror(errno)};
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok &= std::fclose(f) == 0;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Error{ErrCode::Io, path, "write failed"};
  }
  return ok_status();
}

}  // namespace trctl
