// plot_script (gnuplot script with the runs' per-epoch data inline) and plot_run (gnuplot as a child process,
// its PNGs checked); gnuplot_find looks for the executable.
#include "runtime/report/report_plot.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace trctl {
namespace {

// Columns of each run's data block: 1 epoch, 2 train loss, 3 val loss, 4 train top-1 %, 5 val top-1 %, 6 lr,
// 7 training images/s.
enum Column { kEpoch = 1, kTrainLoss, kValLoss, kTrainTop1, kValTop1, kLr, kImagesPerS };

struct Series {
  int column;
  const char* suffix;  // after the group's name in the legend
  int dash;            // gnuplot dash type: 1 solid (train), 2 dashed (validation)
};

struct Figure {
  const char* file;
  const char* title;
  const char* ylabel;
  std::vector<Series> series;
  bool rate = false;  // images/s: from zero, or logarithmic when the series span more than a factor of 10
};

const std::vector<Figure>& figures() {
  static const std::vector<Figure> f = {
      {"loss.png", "Loss per epoch (solid: train, dashed: validation)", "loss",
       {{kTrainLoss, "train", 1}, {kValLoss, "val", 2}}},
      {"accuracy.png", "Top-1 accuracy per epoch (solid: train, dashed: validation)", "top-1 (%)",
       {{kTrainTop1, "train", 1}, {kValTop1, "val", 2}}},
      {"lr.png", "Learning rate per epoch", "learning rate", {{kLr, "lr", 1}}},
      {"throughput.png", "Training throughput per epoch", "images/s", {{kImagesPerS, "images/s", 1}}, true},
  };
  return f;
}

// A throughput report's per-epoch figure (runs with epoch records only); its bar chart is write_bars'.
const Figure& epoch_throughput_figure() {
  static const Figure f = {"throughput_epochs.png",
                           "Training throughput per epoch (runs with epoch records; epoch 1 holds graph capture)",
                           "images/s", {{kImagesPerS, "images/s", 1}}, true};
  return f;
}

const char* const kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"};

double column_value(const EpochPoint& e, int column) {
  switch (column) {
    case kEpoch: return e.epoch;
    case kTrainLoss: return e.train_loss;
    case kValLoss: return e.val_loss;
    case kTrainTop1: return 100 * e.train_top1;
    case kValTop1: return 100 * e.val_top1;
    case kLr: return e.lr;
    case kImagesPerS: return e.images_per_s;
  }
  return kNoFigure;
}

bool has_data(const RunData& r, int column) {
  for (const EpochPoint& e : r.epochs)
    if (std::isfinite(column_value(e, column))) return true;
  return false;
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c != '\n') out += c;
  }
  return out + "\"";
}

std::string block_name(size_t g, size_t r) { return "$g" + std::to_string(g) + "r" + std::to_string(r); }

void write_blocks(std::ostringstream& os, const std::vector<ToolResult>& groups) {
  for (size_t g = 0; g < groups.size(); ++g)
    for (size_t r = 0; r < groups[g].runs.size(); ++r) {
      os << "# " << groups[g].name << ": " << groups[g].runs[r].source << "\n";
      os << block_name(g, r) << " << EOD\n";
      for (const EpochPoint& e : groups[g].runs[r].epochs) {
        for (int c = kEpoch; c <= kImagesPerS; ++c) {
          const double v = column_value(e, c);
          char buf[32] = "NaN";
          if (std::isfinite(v)) std::snprintf(buf, sizeof buf, "%.9g", v);
          os << (c == kEpoch ? "" : " ") << buf;
        }
        os << "\n";
      }
      os << "EOD\n";
    }
}

// The throughput axis is logarithmic when the series span more than a factor of 10 (trctl vs an eager run).
bool wide_range(const std::vector<ToolResult>& groups, int column) {
  double lo = 0, hi = 0;
  for (const ToolResult& g : groups)
    for (const RunData& r : g.runs)
      for (const EpochPoint& e : r.epochs) {
        const double v = column_value(e, column);
        if (!std::isfinite(v) || v <= 0) continue;
        lo = lo == 0 ? v : std::min(lo, v);
        hi = std::max(hi, v);
      }
  return lo > 0 && hi / lo > 10;
}

int last_epoch(const std::vector<ToolResult>& groups) {
  int last = 0;
  for (const ToolResult& g : groups)
    for (const RunData& r : g.runs)
      for (const EpochPoint& e : r.epochs) last = std::max(last, e.epoch);
  return last;
}

std::vector<std::string> plot_clauses(const std::vector<ToolResult>& groups, const Figure& f) {
  // Points mark the epochs of short runs; long ones are clearer as lines. The reference group is drawn wider, so
  // that a curve the others repeat exactly (the learning rate) stays visible under them.
  const std::string style = last_epoch(groups) <= 40 ? "linespoints pt 7 ps 0.5" : "lines";
  std::vector<std::string> clauses;
  for (size_t g = 0; g < groups.size(); ++g) {
    const ToolResult& tr = groups[g];
    const char* color = kColors[g % (sizeof kColors / sizeof kColors[0])];
    for (const Series& s : f.series) {
      bool titled = false;
      for (size_t r = 0; r < tr.runs.size(); ++r) {
        if (!has_data(tr.runs[r], s.column)) continue;
        std::string title = "notitle";
        if (!titled) {
          std::string t = tr.name + (f.series.size() > 1 ? std::string(" ") + s.suffix : "");
          if (tr.runs.size() > 1) t += " (" + std::to_string(tr.runs.size()) + " runs)";
          title = "title " + quoted(t);
          titled = true;
        }
        clauses.push_back(block_name(g, r) + " using 1:" + std::to_string(s.column) +
                          " with " + style + (g == 0 ? " lw 3.5" : " lw 1.5") + " dt " + std::to_string(s.dash) +
                          " lc rgb \"" + color + "\" " + title);
      }
    }
  }
  return clauses;
}

void write_figure(std::ostringstream& os, const std::vector<ToolResult>& groups, const Figure& f) {
  const std::vector<std::string> clauses = plot_clauses(groups, f);
  const bool log = f.rate && wide_range(groups, kImagesPerS);
  os << "\nset output " << quoted(f.file) << "\n";
  os << "set title " << quoted(f.title + std::string(log ? " (log scale)" : "")) << "\n";
  os << "set xlabel \"epoch\"\nset ylabel " << quoted(f.ylabel) << "\n";
  os << (log ? "set logscale y\n" : "unset logscale y\n");
  const bool from_zero = !log && f.rate;  // a rate's ratio reads off the axis
  os << (from_zero ? "set yrange [0:*]\n" : "set yrange [*:*]\n");
  if (clauses.empty()) {  // an empty figure still says so rather than leaving a file out
    os << "set xrange [0:1]\nset yrange [0:1]\n";
    os << "set label 1 \"no data in the inputs\" at graph 0.5, 0.5 center\nplot 2 notitle\n";
    os << "unset label 1\nset autoscale\n";
  } else {
    os << "plot ";
    for (size_t i = 0; i < clauses.size(); ++i) os << (i ? ", \\\n     " : "") << clauses[i];
    os << "\n";
  }
  os << "set output\n";
}

// throughput.png of a throughput report: one bar per group at its median steady images/s, whiskers from the
// lowest to the highest run, the median written above; a group without the figure has no bar.
void write_bars(std::ostringstream& os, const std::vector<ToolResult>& groups) {
  std::string xtics, clauses;
  for (size_t g = 0; g < groups.size(); ++g) {
    xtics += (g ? ", " : "") + quoted(groups[g].name) + " " + std::to_string(g);
    std::vector<double> ips;
    for (const RunData& r : groups[g].runs) ips.push_back(r.images_per_s_steady);
    const Spread s = spread_of(ips);
    if (s.n == 0) continue;
    char row[160];
    std::snprintf(row, sizeof row, "%zu %.9g %.9g %.9g 0.3\n", g, s.median, s.min, s.max);
    os << "$bars" << g << " << EOD\n" << row << "EOD\n";
    const std::string block = "$bars" + std::to_string(g);
    clauses += std::string(clauses.empty() ? "" : ", \\\n     ") + block +
               " using 1:2:3:4:5 with boxerrorbars lc rgb \"" + kColors[g % (sizeof kColors / sizeof kColors[0])] +
               "\" notitle, \\\n     " + block + " using 1:4:(sprintf(\"%.0f\", $2)) with labels offset 0,1 notitle";
  }
  os << "\nset output \"throughput.png\"\n";
  os << "set title \"Training throughput, steady (bar: median images/s; whiskers: lowest and highest run)\"\n";
  os << "set xlabel \"\"\nset ylabel \"images/s\"\nunset logscale y\nset yrange [0:*]\n";
  os << "set xrange [-0.6:" << groups.size() - 0.4 << "]\nset xtics (" << xtics << ")\n";
  os << "set style fill solid 0.6 border -1\nset offsets 0, 0, graph 0.1, 0\n";
  if (clauses.empty())
    os << "set label 1 \"no data in the inputs\" at graph 0.5, 0.5 center\nplot 2 notitle\nunset label 1\n";
  else
    os << "plot " << clauses << "\n";
  os << "set output\n";
}

bool executable(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

std::string log_tail(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  if (s.size() > 1500) s = "..." + s.substr(s.size() - 1500);
  return s;
}

bool png_file(const std::string& path) {
  static const unsigned char kSig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::ifstream f(path, std::ios::binary);
  char head[8] = {};
  return f.read(head, 8) && std::memcmp(head, kSig, 8) == 0;
}

}  // namespace

std::vector<PlotRef> plot_refs(bool throughput_only) {
  if (throughput_only)
    return {{"throughput.png", "Throughput",
             "steady training images/s of each tool (bar: the median of its runs, whiskers: the lowest and highest "
             "run)"},
            {"throughput_epochs.png", "Throughput per epoch",
             "training images/s of each epoch, for the runs with epoch records (epoch 1 holds graph capture)"}};
  return {{"loss.png", "Loss",
           "train and validation loss per epoch (each tool's validation loss as its recipe states)"},
          {"accuracy.png", "Accuracy", "train and validation top-1 per epoch (train top-1 where the tool records it)"},
          {"lr.png", "Learning rate", "learning rate of each epoch"},
          {"throughput.png", "Throughput", "training images/s of each epoch (epoch 1 holds compilation/capture)"}};
}

Result<std::string> gnuplot_find() {
  if (const char* env = std::getenv("TRCTL_GNUPLOT"); env && *env) {
    if (executable(env)) return std::string(env);
    return Error{ErrCode::Missing, "TRCTL_GNUPLOT", std::string("'") + env + "' is not an executable file"};
  }
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':'))
    if (!dir.empty() && executable(dir + "/gnuplot")) return dir + "/gnuplot";
  return Error{ErrCode::Missing, "gnuplot",
               "not found on PATH: trctl report draws its plots with gnuplot (Debian: apt-get install gnuplot-nox; "
               "tools/setup.sh installs it), or pass --no-plots"};
}

std::string plot_script(const std::vector<ToolResult>& groups) {
  std::ostringstream os;
  os << "# Plots of a trctl report, generated by `trctl report`; `gnuplot plots.gp` in this folder redraws them.\n";
  os << "if (strstrt(GPVAL_TERMINALS, \"pngcairo\") > 0) {\n"
        "  set terminal pngcairo size 960,600 noenhanced font \"sans,10\"\n"
        "} else {\n"
        "  set terminal png size 960,600 noenhanced\n"
        "}\n";
  os << "set datafile missing \"NaN\"\nset grid\nset key below spacing 1.2 samplen 3\nset bmargin 6\n";
  os << "set format y \"%g\"\n";
  os << (last_epoch(groups) <= 20 ? "set xtics 1\n\n" : "set xtics autofreq\n\n");  // whole epochs on short runs
  write_blocks(os, groups);
  if (report_throughput_only(groups)) {  // synthetic data: no loss or accuracy figure
    write_figure(os, groups, epoch_throughput_figure());
    write_bars(os, groups);
    return os.str();
  }
  for (const Figure& f : figures()) write_figure(os, groups, f);
  return os.str();
}

Status plot_run(const std::string& gnuplot, const std::string& dir, const std::string& script_name,
                const std::vector<PlotRef>& refs) {
  const std::string log = dir + "/gnuplot.log";
  const pid_t pid = ::fork();
  if (pid < 0) return Error{ErrCode::Io, "gnuplot", std::string("cannot start: ") + std::strerror(errno)};
  if (pid == 0) {  // the child: only async-signal-safe calls until exec
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ::chdir(dir.c_str()) != 0) ::_exit(126);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    ::execl(gnuplot.c_str(), "gnuplot", script_name.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return Error{ErrCode::Io, "gnuplot", std::string("wait failed: ") + std::strerror(errno)};
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return Error{ErrCode::Internal, dir + "/" + script_name,
                 "gnuplot (" + gnuplot + ") failed with status " + std::to_string(WEXITSTATUS(status)) +
                     "; its output (" + log + "):\n" + log_tail(log)};
  for (const PlotRef& p : refs)
    if (!png_file(dir + "/" + p.file))
      return Error{ErrCode::Internal, dir + "/" + p.file, "gnuplot did not write this PNG; its output:\n" +
                                                              log_tail(log)};
  return ok_status();
}

}  // namespace trctl
