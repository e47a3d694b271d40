// bench_result_json / _write / _read: the trctl-bench/1 document (see bench_result.h, docs/bench.md).
#include "runtime/report/bench_result.h"

#include <unistd.h>

#include <cmath>
#include <ctime>
#include <fstream>
#include <set>
#include <thread>

#include "core/ckpt/atomic_file.h"
#include "runtime/report/json.h"

namespace trctl {
namespace {

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "" : line.substr(start);
  }
  return "";
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Field readers for bench_result_read: each records what is wrong instead of stopping at the first problem.
struct Reader {
  std::string path;
  std::vector<Error> errors;

  void bad(const std::string& what) { errors.push_back(Error{ErrCode::Format, path, what}); }

  std::string str(const JsonNode& obj, const std::string& key, const std::string& ctx, bool required) {
    const JsonNode* v = obj.find(key);
    if (!v || (!required && v->is_null())) {
      if (required) bad(ctx + "'" + key + "' is missing");
      return "";
    }
    if (!v->is_string()) bad(ctx + "'" + key + "' must be a string");
    return v->string;
  }
};

}  // namespace

BenchResult bench_result_begin(const std::string& suite, const std::vector<std::string>& sources,
                               const std::string& backend) {
  BenchResult r;
  r.suite = suite;
  r.sources = sources;
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) == 0) r.machine.host = host;
  r.machine.host_cores = static_cast<int>(std::thread::hardware_concurrency());
  r.machine.cpu = cpu_model();
  r.machine.backend = backend;
  r.created = utc_now();
  return r;
}

std::string bench_result_json(const BenchResult& r) {
  std::string o = "{\n  \"schema\": " + json_quote(kBenchSchema) + ",\n  \"suite\": " + json_quote(r.suite) +
                  ",\n  \"sources\": [";
  for (size_t i = 0; i < r.sources.size(); ++i) o += (i ? ", " : "") + json_quote(r.sources[i]);
  const BenchMachine& m = r.machine;
  o += "],\n  \"machine\": {\"host\": " + json_quote(m.host) + ", \"host_cores\": " + std::to_string(m.host_cores) +
       ", \"cpu\": " + json_quote(m.cpu) + ", \"gpu\": " + (m.gpu.empty() ? "null" : json_quote(m.gpu)) +
       ", \"backend\": " + json_quote(m.backend) + "},\n  \"commit\": " + json_quote(r.commit) +
       ",\n  \"created\": " + json_quote(r.created) + ",\n  \"metrics\": [";
  for (size_t i = 0; i < r.metrics.size(); ++i) {
    const BenchMetric& x = r.metrics[i];
    o += std::string(i ? "," : "") + "\n    {\"name\": " + json_quote(x.name) + ", \"value\": " + json_number(x.value) +
         ", \"unit\": " + json_quote(x.unit) + ", \"better\": \"" + (x.higher_better ? "higher" : "lower") + "\"";
    if (x.exact) o += ", \"exact\": true";
    if (!x.check) o += ", \"check\": false";
    o += "}";
  }
  o += r.metrics.empty() ? "]" : "\n  ]";
  for (const auto& [key, raw] : r.details) o += ",\n  " + json_quote(key) + ": " + raw;
  return o + "\n}\n";
}

Status bench_result_write(const std::string& path, const BenchResult& r) {
  const std::string text = bench_result_json(r);
  std::vector<std::byte> bytes(text.size());
  for (size_t i = 0; i < text.size(); ++i) bytes[i] = static_cast<std::byte>(text[i]);
  return atomic_write_file(path, bytes);
}

Result<BenchResult> bench_result_read(const std::string& path) {
  Result<JsonNode> doc = json_read_file(path);
  if (!doc.ok()) return doc.errors();
  const JsonNode& d = doc.value();
  Reader rd{path, {}};
  if (!d.is_object()) return Error{ErrCode::Format, path, "a trctl-bench/1 document is a JSON object"};
  BenchResult r;
  if (rd.str(d, "schema", "", true) != kBenchSchema && rd.errors.empty())
    rd.bad(std::string("'schema' must be \"") + kBenchSchema + "\"");
  r.suite = rd.str(d, "suite", "", true);
  r.commit = rd.str(d, "commit", "", true);
  r.created = rd.str(d, "created", "", false);
  if (const JsonNode* s = d.find("sources"); !s || !s->is_array()) {
    rd.bad("'sources' must be an array of strings");
  } else {
    for (const JsonNode& x : s->array) {
      if (!x.is_string()) rd.bad("'sources' must be an array of strings");
      r.sources.push_back(x.string);
    }
  }
  if (const JsonNode* m = d.find("machine"); !m || !m->is_object()) {
    rd.bad("'machine' must be an object");
  } else {
    r.machine.host = rd.str(*m, "host", "machine.", false);
    r.machine.cpu = rd.str(*m, "cpu", "machine.", false);
    r.machine.gpu = rd.str(*m, "gpu", "machine.", false);
    r.machine.backend = rd.str(*m, "backend", "machine.", true);
    const JsonNode* c = m->find("host_cores");
    if (!c || !c->is_number()) rd.bad("'machine.host_cores' must be a number");
    else r.machine.host_cores = static_cast<int>(c->number);
  }
  const JsonNode* ms = d.find("metrics");
  if (!ms || !ms->is_array()) {
    rd.bad("'metrics' must be an array");
  } else {
    std::set<std::string> names;
    for (size_t i = 0; i < ms->array.size(); ++i) {
      const JsonNode& x = ms->array[i];
      const std::string ctx = "metrics[" + std::to_string(i) + "].";
      if (!x.is_object()) {
        rd.bad(ctx.substr(0, ctx.size() - 1) + " must be an object");
        continue;
      }
      BenchMetric m;
      m.name = rd.str(x, "name", ctx, true);
      m.unit = rd.str(x, "unit", ctx, true);
      const std::string better = rd.str(x, "better", ctx, true);
      if (better != "higher" && better != "lower") rd.bad(ctx + "better must be \"higher\" or \"lower\"");
      m.higher_better = better == "higher";
      const JsonNode* v = x.find("value");
      if (!v || !v->is_number() || !std::isfinite(v->number)) rd.bad(ctx + "value must be a finite number");
      else m.value = v->number;
      for (auto [key, flag] : {std::make_pair("exact", &m.exact), std::make_pair("check", &m.check)})
        if (const JsonNode* b = x.find(key)) {
          if (b->kind != JsonKind::Bool) rd.bad(ctx + key + " must be true or false");
          else *flag = b->boolean;
        }
      if (!m.name.empty() && !names.insert(m.name).second) rd.bad(ctx + "name '" + m.name + "' appears twice");
      r.metrics.push_back(m);
    }
  }
  if (!rd.errors.empty()) return rd.errors;
  return r;
}

}  // namespace trctl
