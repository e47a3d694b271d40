// The --gpus N launcher: fork + exec of N workers, watched with waitpid; signals to the launcher are forwarded.
#include "apps/cmd_dist.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "apps/cli_errors.h"
#include "core/spec/spec.h"
#include "runtime/dist/rendezvous.h"
#if defined(TRCTL_HAVE_CUDA)
#include "runtime/cuda/cuda_backend.h"
#endif

namespace trctl {
namespace {

std::atomic<int> g_forward_signal{0};  // a signal to pass on to the workers (the handler can reach nothing else)
extern "C" void on_launcher_signal(int sig) { g_forward_signal.store(sig); }

int visible_gpus() {
#if defined(TRCTL_HAVE_CUDA)
  return cuda_device_count();
#else
  return 0;
#endif
}

// argv without --gpus N / --gpus=N.
std::vector<std::string> worker_args(int argc, char** argv) {
  std::vector<std::string> a;
  for (int i = 0; i < argc; ++i) {
    const std::string s = argv[i];
    if (s == "--gpus") {
      ++i;
      continue;
    }
    if (s.rfind("--gpus=", 0) == 0) continue;
    a.push_back(s);
  }
  return a;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "status " + std::to_string(status);
}

// Forks a worker: the child sets its rank's variables and execs this binary.
pid_t spawn(const std::vector<std::string>& args, int rank, int world, int port) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // the launcher gone: the worker goes too
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  setenv("NCCL_NVLS_ENABLE", "0", 1);  // NVLink multicast stays off, also in the processes trctl starts
  std::vector<char*> av;
  for (const std::string& s : args) av.push_back(const_cast<char*>(s.c_str()));
  av.push_back(nullptr);
  execv("/proc/self/exe", av.data());
  std::fprintf(stderr, "error: rank %d: cannot start %s: %s\n", rank, "/proc/self/exe", std::strerror(errno));
  _exit(127);
}

void stop_all(std::vector<pid_t>& pids, int sig) {
  for (pid_t p : pids)
    if (p > 0) kill(p, sig);
}

}  // namespace

int cmd_train_launch(int argc, char** argv, int gpus, const std::string& config,
                     const std::vector<std::string>& overrides) {
  if (std::getenv("WORLD_SIZE") || std::getenv("RANK")) {
    std::fprintf(stderr, "error: --gpus: WORLD_SIZE/RANK are already set (an outer launcher): use one or the other\n");
    return kExitBadInput;
  }
  Result<Spec> spec = spec_load(config, overrides);
  if (!spec.ok()) {
    for (const auto& e : spec.errors()) std::fprintf(stderr, "error: %s\n", e.str().c_str());
    return kExitBadInput;
  }
  const int visible = visible_gpus();
  if (spec->train.device == DeviceKind::Cpu || visible == 0) {
    std::fprintf(stderr, "error: --gpus %d: data-parallel training is not supported on the cpu backend (%s)\n", gpus,
                 visible == 0 ? "no CUDA device visible, or a build without CUDA" : "train.device: cpu");
    return kExitBadInput;
  }
  if (gpus > visible) {
    std::fprintf(stderr, "error: --gpus %d, but only %d CUDA device%s visible\n", gpus, visible,
                 visible == 1 ? " is" : "s are");
    return kExitBadInput;
  }
  Result<std::unique_ptr<RendezvousListener>> probe = RendezvousListener::open(0);  // a free port for rank 0
  if (!probe.ok()) {
    for (const auto& e : probe.errors()) std::fprintf(stderr, "error: %s\n", e.str().c_str());
    return 1;
  }
  const int port = probe.value()->port();
  probe.value().reset();
  struct sigaction sa {};
  sa.sa_handler = on_launcher_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  const std::vector<std::string> args = worker_args(argc, argv);
  std::vector<pid_t> pids;
  for (int r = 0; r < gpus; ++r) pids.push_back(spawn(args, r, gpus, port));
  int live = gpus, rc = 0;
  bool failing = false;
  auto t_fail = std::chrono::steady_clock::now();
  while (live > 0) {
    if (const int sig = g_forward_signal.exchange(0); sig != 0) stop_all(pids, sig);
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      // The others were asked to stop: those still there after 10 s are killed.
      if (failing && std::chrono::steady_clock::now() - t_fail > std::chrono::seconds(10)) stop_all(pids, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    int rank = -1;
    for (int r = 0; r < gpus; ++r)
      if (pids[static_cast<size_t>(r)] == pid) rank = r;
    if (rank < 0) continue;
    pids[static_cast<size_t>(rank)] = -1;
    --live;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok && !failing) {
      failing = true;
      t_fail = std::chrono::steady_clock::now();
      rc = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
      std::fprintf(stderr, "error: rank %d (pid %d) ended with %s; stopping the other %d rank%s\n", rank,
                   static_cast<int>(pid), describe_status(status).c_str(), live, live == 1 ? "" : "s");
      stop_all(pids, SIGTERM);
    }
  }
  return rc;
}

}  // namespace trctl
