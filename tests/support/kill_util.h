// Test helpers for the kill -9 trials (tests/e2e/kill_test.cpp on the CPU, tests/gpu/kill_gpu_test.cpp on CUDA):
// run a trctl command and SIGKILL it at a chosen moment, find the run that finished, read files whole, and check
// that no checkpoint directory a reader would take is half written.
#pragma once
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace trctl::testing {

inline std::vector<char> slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

struct KillRun {
  bool killed = false;  // it was SIGKILLed (false: it ended first)
  int ready_ms = -1;    // when `ready` first held, since the start (-1: never)
  int end_ms = 0;       // when it ended or was killed, since the start
};

// Runs cmd under /bin/sh (exec'd, so the kill reaches trctl itself). Once ready() holds (at the start when ready is
// empty; polled every 5 ms), SIGKILLs it `ms` milliseconds later unless it ended before.
inline KillRun run_and_kill(const std::string& cmd, int ms, const std::function<bool()>& ready = {}) {
  using Clock = std::chrono::steady_clock;
  const auto since = [](Clock::time_point t) {
    return static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count());
  };
  KillRun r;
  const std::string line = "exec " + cmd;  // built before fork: the child only execs
  const Clock::time_point t0 = Clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  if (!ready) r.ready_ms = 0;
  int status = 0;
  for (;;) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      r.end_ms = since(t0);
      return r;
    }
    if (r.ready_ms < 0 && ready()) r.ready_ms = since(t0);
    if (r.ready_ms >= 0 && since(t0) - r.ready_ms >= ms) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  r.end_ms = since(t0);
  r.killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  return r;
}

// The newest run directory out/NAME, NAME-2, ... (up to NAME-50) that holds `file` (e.g.
// "checkpoints/epoch-0006/weights.safetensors"); empty when none does.
inline std::filesystem::path finished_run(const std::filesystem::path& out, const std::string& name,
                                          const std::string& file) {
  for (int i = 50; i >= 1; --i) {
    const std::filesystem::path d = out / (i == 1 ? name : name + "-" + std::to_string(i));
    if (std::filesystem::exists(d / file)) return d;
  }
  return {};
}

inline bool is_partial(const std::filesystem::path& p) {
  const std::string n = p.filename().string();
  return n.size() > 8 && n.compare(n.size() - 8, 8, ".partial") == 0;
}

// Complete checkpoints (both files, not *.partial) in every run directory under `out`.
inline int count_checkpoints(const std::filesystem::path& out) {
  int n = 0;
  std::error_code ec;
  for (const auto& run : std::filesystem::directory_iterator(out, ec)) {
    std::error_code ec2;
    for (const auto& ck : std::filesystem::directory_iterator(run.path() / "checkpoints", ec2))
      n += !is_partial(ck.path()) && std::filesystem::exists(ck.path() / "state.bin") &&
           std::filesystem::exists(ck.path() / "weights.safetensors");
  }
  return n;
}

// Every checkpoint directory under out/*/checkpoints that is not *.partial holds both files.
inline void check_checkpoints_whole(const std::filesystem::path& out) {
  for (const auto& run : std::filesystem::directory_iterator(out)) {
    if (!run.is_directory()) continue;
    std::error_code ec;  // a run killed before its first checkpoint has no checkpoints/ folder
    for (const auto& ck : std::filesystem::directory_iterator(run.path() / "checkpoints", ec)) {
      if (is_partial(ck.path())) continue;
      INFO(ck.path().string());
      CHECK(std::filesystem::exists(ck.path() / "state.bin"));
      CHECK(std::filesystem::exists(ck.path() / "weights.safetensors"));
    }
  }
}

}  // namespace trctl::testing
