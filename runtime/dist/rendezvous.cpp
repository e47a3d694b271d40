// DistEnv parsing and the TCP rendezvous (POSIX sockets, poll with deadlines, EINTR retried).
#include "runtime/dist/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace trctl {
namespace {

using Clock = std::chrono::steady_clock;

// ---- environment ----

// A whole decimal integer in [lo, hi], or an error naming the variable.
bool parse_int(const char* name, const char* text, long lo, long hi, int* out, std::vector<Error>& errs) {
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || errno == ERANGE || v < lo || v > hi) {
    errs.push_back({ErrCode::Invalid, name,
                    std::string("'") + text + "' is not an integer in [" + std::to_string(lo) + ", " +
                        std::to_string(hi) + "]"});
    return false;
  }
  *out = static_cast<int>(v);
  return true;
}

// ---- wire format (little-endian, fixed sizes) ----

constexpr char kMagic[8] = {'T', 'R', 'C', 'T', 'L', 'R', 'D', 'V'};
constexpr size_t kHelloBytes = 32;  // magic, version, world, rank, reserved, hash
constexpr size_t kReplyBytes = 32;  // magic, version, status, world, payload bytes, hash; then the payload

enum class Refusal : uint32_t { None = 0, Version = 1, WorldSize = 2, JobHash = 3, Rank = 4 };

void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

std::string hex64(uint64_t v) {
  char b[20];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// Waits for `events` on fd until the deadline: 1 ready, 0 timed out, -1 error (errno set).
int wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, ms_left(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return r;
    return 1;
  }
}

// Reads exactly n bytes: "" on success, else why not.
std::string read_exact(int fd, uint8_t* buf, size_t n, Clock::time_point deadline) {
  size_t got = 0;
  while (got < n) {
    const int w = wait_fd(fd, POLLIN, deadline);
    if (w == 0) return "timed out";
    if (w < 0) return std::string("poll: ") + std::strerror(errno);
    const ssize_t r = recv(fd, buf + got, n - got, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r < 0) return std::string("recv: ") + std::strerror(errno);
    if (r == 0) return "the connection was closed by the other side";
    got += static_cast<size_t>(r);
  }
  return "";
}

std::string write_all(int fd, const uint8_t* buf, size_t n, Clock::time_point deadline) {
  size_t sent = 0;
  while (sent < n) {
    const int w = wait_fd(fd, POLLOUT, deadline);
    if (w == 0) return "timed out";
    if (w < 0) return std::string("poll: ") + std::strerror(errno);
    const ssize_t r = send(fd, buf + sent, n - sent, MSG_NOSIGNAL);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r < 0) return std::string("send: ") + std::strerror(errno);
    sent += static_cast<size_t>(r);
  }
  return "";
}

void close_fd(int fd) {
  if (fd >= 0) ::close(fd);
}

std::string where_of(const RendezvousOptions& o) {
  return "rendezvous " + o.addr + ":" + std::to_string(o.port) + " (rank " + std::to_string(o.rank) + ")";
}

Error rdv_error(const RendezvousOptions& o, const std::string& msg) { return {ErrCode::Invalid, where_of(o), msg}; }

// One non-blocking connect attempt to every address of addr:port until the deadline: the fd, or -1 (errno kept
// in *why).
int connect_once(const RendezvousOptions& o, Clock::time_point deadline, std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(o.port);
  const int gai = getaddrinfo(o.addr.c_str(), port.c_str(), &hints, &res);
  if (gai != 0) {
    *why = std::string("cannot resolve MASTER_ADDR: ") + gai_strerror(gai);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc < 0 && errno == EINPROGRESS) {
      const int w = wait_fd(fd, POLLOUT, deadline);
      int err = 0;
      socklen_t len = sizeof err;
      if (w == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) {
        rc = 0;
      } else {
        errno = w == 0 ? ETIMEDOUT : err;
      }
    }
    if (rc != 0) {
      *why = std::strerror(errno);
      close_fd(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd >= 0) {
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

void encode_hello(const RendezvousOptions& o, uint8_t* h) {
  std::memcpy(h, kMagic, 8);
  put32(h + 8, kRendezvousVersion);
  put32(h + 12, static_cast<uint32_t>(o.world_size));
  put32(h + 16, static_cast<uint32_t>(o.rank));
  put32(h + 20, 0);
  put64(h + 24, o.job_hash);
}

std::vector<uint8_t> encode_reply(const RendezvousOptions& o, Refusal status, const uint8_t* payload, size_t n) {
  std::vector<uint8_t> r(kReplyBytes + n);
  std::memcpy(r.data(), kMagic, 8);
  put32(r.data() + 8, kRendezvousVersion);
  put32(r.data() + 12, static_cast<uint32_t>(status));
  put32(r.data() + 16, static_cast<uint32_t>(o.world_size));
  put32(r.data() + 20, static_cast<uint32_t>(n));
  put64(r.data() + 24, o.job_hash);
  if (n) std::memcpy(r.data() + kReplyBytes, payload, n);
  return r;
}

// Rank 0's verdict on a handshake: Refusal::None, or why the rank may not join (and the text both sides print).
Refusal check_hello(const RendezvousOptions& o, const uint8_t* h, const std::vector<bool>& joined, std::string* why) {
  const uint32_t version = get32(h + 8), world = get32(h + 12), rank = get32(h + 16);
  const uint64_t hash = get64(h + 24);
  const std::string who = "rank " + std::to_string(rank);
  if (version != kRendezvousVersion) {
    *why = who + " speaks rendezvous protocol version " + std::to_string(version) + ", rank 0 version " +
           std::to_string(kRendezvousVersion) + " (different trctl builds)";
    return Refusal::Version;
  }
  if (world != static_cast<uint32_t>(o.world_size)) {
    *why = who + " was started with WORLD_SIZE=" + std::to_string(world) + " but rank 0 with WORLD_SIZE=" +
           std::to_string(o.world_size) + " (two jobs on one MASTER_ADDR:MASTER_PORT, or a launcher mismatch)";
    return Refusal::WorldSize;
  }
  if (hash != o.job_hash) {
    *why = who + " runs a different job (spec hash " + hex64(hash) + ", rank 0 has " + hex64(o.job_hash) +
           "): every rank must run the same config with the same overrides";
    return Refusal::JobHash;
  }
  if (rank == 0 || rank >= world || joined[rank]) {
    *why = who + (rank == 0 || rank >= world ? " is not a valid rank of this job" : " joined twice");
    return Refusal::Rank;
  }
  return Refusal::None;
}

}  // namespace

Result<DistEnv> dist_env_parse(const EnvLookup& env) {
  const char* rank = env("RANK");
  const char* world = env("WORLD_SIZE");
  const char* local = env("LOCAL_RANK");
  const char* addr = env("MASTER_ADDR");
  const char* port = env("MASTER_PORT");
  const char* timeout = env("TRCTL_DIST_TIMEOUT_S");
  DistEnv e;
  std::vector<Error> errs;
  if (timeout) {
    char* end = nullptr;
    const double t = std::strtod(timeout, &end);
    if (*timeout == '\0' || *end != '\0' || !(t >= 1 && t <= 86400))
      errs.push_back({ErrCode::Invalid, "TRCTL_DIST_TIMEOUT_S",
                      std::string("'") + timeout + "' is not a number of seconds in [1, 86400]"});
    else
      e.timeout_s = t;
  }
  if (const char* mb = env("TRCTL_DIST_BUCKET_MB")) {
    char* end = nullptr;
    const double v = std::strtod(mb, &end);
    if (*mb == '\0' || *end != '\0' || !(v > 0 && v <= 65536))
      errs.push_back({ErrCode::Invalid, "TRCTL_DIST_BUCKET_MB", std::string("'") + mb + "' is not a size in MiB in (0, 65536]"});
    else
      e.bucket_bytes = std::max<int64_t>(1, static_cast<int64_t>(v * 1048576.0));
  }
  if (!rank && !world && !local && !addr && !port) {
    if (!errs.empty()) return errs;
    return e;  // not distributed
  }
  e.enabled = true;
  if (!world)
    errs.push_back({ErrCode::Invalid, "WORLD_SIZE",
                    "unset, but RANK, LOCAL_RANK, MASTER_ADDR or MASTER_PORT is set (a distributed run needs all of "
                    "RANK and WORLD_SIZE; unset them all for a single-process run)"});
  const bool world_ok = world && parse_int("WORLD_SIZE", world, 1, 65536, &e.world_size, errs);
  bool rank_ok = false;
  if (!rank)
    errs.push_back({ErrCode::Invalid, "RANK", "unset, but WORLD_SIZE is set (each process needs its rank)"});
  else
    rank_ok = parse_int("RANK", rank, 0, 65535, &e.rank, errs);
  bool local_ok = false;
  if (local)
    local_ok = parse_int("LOCAL_RANK", local, 0, 65535, &e.local_rank, errs);
  else if (rank_ok)
    e.local_rank = e.rank;
  if (world_ok && rank_ok && e.rank >= e.world_size)
    errs.push_back({ErrCode::Invalid, "RANK",
                    "RANK=" + std::to_string(e.rank) + " is not below WORLD_SIZE=" + std::to_string(e.world_size)});
  if (world_ok && local_ok && e.local_rank >= e.world_size)
    errs.push_back({ErrCode::Invalid, "LOCAL_RANK",
                    "LOCAL_RANK=" + std::to_string(e.local_rank) + " is not below WORLD_SIZE=" +
                        std::to_string(e.world_size)});
  if (addr) {
    if (*addr == '\0') errs.push_back({ErrCode::Invalid, "MASTER_ADDR", "set but empty"});
    e.master_addr = addr;
  }
  if (port)
    parse_int("MASTER_PORT", port, 1, 65535, &e.master_port, errs);
  else if (world_ok && e.world_size > 1)
    errs.push_back({ErrCode::Invalid, "MASTER_PORT",
                    "unset with WORLD_SIZE=" + std::to_string(e.world_size) + " (rank 0's rendezvous port)"});
  if (!errs.empty()) return errs;
  return e;
}

Result<DistEnv> dist_env_from_environ() {
  return dist_env_parse([](const char* k) { return static_cast<const char*>(std::getenv(k)); });
}

std::string dist_env_describe(const DistEnv& e) {
  if (!e.enabled) return "not distributed";
  return "rank " + std::to_string(e.rank) + "/" + std::to_string(e.world_size) + " (local " +
         std::to_string(e.local_rank) + "), rendezvous " + e.master_addr + ":" + std::to_string(e.master_port);
}

uint64_t dist_job_hash(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

// ---- RendezvousListener ----

RendezvousListener::~RendezvousListener() { close_fd(fd_); }

Result<std::unique_ptr<RendezvousListener>> RendezvousListener::open(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Error{ErrCode::Io, "rendezvous", std::string("socket: ") + std::strerror(errno)};
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);  // MASTER_ADDR names this host for the others; listen on all interfaces
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 128) != 0) {
    const std::string why = std::strerror(errno);
    close_fd(fd);
    return Error{ErrCode::Io, "rendezvous port " + std::to_string(port),
                 "rank 0 cannot listen: " + why + " (MASTER_PORT taken by another job?)"};
  }
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return std::unique_ptr<RendezvousListener>(new RendezvousListener(fd, ntohs(a.sin_port)));
}

// ---- Rendezvous ----

Rendezvous::~Rendezvous() {
  for (int fd : fds_) close_fd(fd);
}

Result<std::unique_ptr<Rendezvous>> Rendezvous::serve(RendezvousListener& listener, const RendezvousOptions& o,
                                                      const std::vector<uint8_t>& blob) {
  if (blob.size() > kRendezvousMaxBlob) return rdv_error(o, "blob over " + std::to_string(kRendezvousMaxBlob) + " bytes");
  const Clock::time_point deadline = deadline_after(o.timeout_s);
  std::unique_ptr<Rendezvous> r(new Rendezvous(o));
  r->fds_.assign(static_cast<size_t>(o.world_size - 1), -1);
  std::vector<bool> joined(static_cast<size_t>(o.world_size), false);
  joined[0] = true;
  int missing = o.world_size - 1, strays = 0;
  while (missing > 0) {
    const int w = wait_fd(listener.fd(), POLLIN, deadline);
    if (w <= 0) {
      std::string list;
      for (int k = 1; k < o.world_size; ++k)
        if (!joined[k]) list += (list.empty() ? "" : ", ") + std::to_string(k);
      return rdv_error(o, std::to_string(o.world_size - missing) + " of " + std::to_string(o.world_size) +
                              " ranks joined within " + std::to_string(o.timeout_s) + " s; missing ranks: " + list +
                              (strays ? " (" + std::to_string(strays) + " connections without the trctl handshake ignored)" : ""));
    }
    const int fd = accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;  // EINTR, or the peer went away before accept
    uint8_t h[kHelloBytes];
    if (!read_exact(fd, h, sizeof h, deadline).empty() || std::memcmp(h, kMagic, 8) != 0) {
      close_fd(fd);  // not a trctl rank (a port probe): ignore it
      ++strays;
      continue;
    }
    std::string why;
    const Refusal ref = check_hello(o, h, joined, &why);
    if (ref != Refusal::None) {
      const std::vector<uint8_t> rep =
          encode_reply(o, ref, reinterpret_cast<const uint8_t*>(why.data()), why.size());
      write_all(fd, rep.data(), rep.size(), deadline);
      close_fd(fd);
      return rdv_error(o, "refused a rank: " + why);
    }
    const int rank = static_cast<int>(get32(h + 16));
    joined[static_cast<size_t>(rank)] = true;
    r->fds_[static_cast<size_t>(rank - 1)] = fd;
    --missing;
  }
  // Everyone is here: hand the blob out.
  const std::vector<uint8_t> rep = encode_reply(o, Refusal::None, blob.data(), blob.size());
  for (int k = 1; k < o.world_size; ++k)
    if (std::string err = write_all(r->fds_[static_cast<size_t>(k - 1)], rep.data(), rep.size(), deadline); !err.empty())
      return rdv_error(o, "sending the blob to rank " + std::to_string(k) + ": " + err);
  return r;
}

Result<std::unique_ptr<Rendezvous>> Rendezvous::join(const RendezvousOptions& o, std::vector<uint8_t>* blob) {
  const Clock::time_point deadline = deadline_after(o.timeout_s);
  std::string why = "no attempt";
  int fd = -1;
  while (fd < 0) {  // rank 0 may start later than us: retry until the deadline
    fd = connect_once(o, deadline, &why);
    if (fd >= 0) break;
    if (why.rfind("cannot resolve", 0) == 0) return rdv_error(o, why);
    if (ms_left(deadline) == 0)
      return rdv_error(o, "rank 0 did not answer within " + std::to_string(o.timeout_s) + " s (last attempt: " + why +
                              "); is rank 0 running, and do MASTER_ADDR/MASTER_PORT name it?");
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(100, ms_left(deadline))));
  }
  std::unique_ptr<Rendezvous> r(new Rendezvous(o));
  r->fds_.push_back(fd);
  uint8_t h[kHelloBytes];
  encode_hello(o, h);
  if (std::string err = write_all(fd, h, sizeof h, deadline); !err.empty()) return rdv_error(o, "handshake: " + err);
  uint8_t rep[kReplyBytes];
  if (std::string err = read_exact(fd, rep, sizeof rep, deadline); !err.empty())
    return rdv_error(o, "waiting for rank 0's reply (all ranks must join within " + std::to_string(o.timeout_s) +
                            " s): " + err);
  if (std::memcmp(rep, kMagic, 8) != 0) return rdv_error(o, "the listener at MASTER_ADDR:MASTER_PORT is not trctl's rank 0");
  const uint32_t status = get32(rep + 12), n = get32(rep + 20);
  if (n > kRendezvousMaxBlob) return rdv_error(o, "rank 0 sent a payload of " + std::to_string(n) + " bytes");
  std::vector<uint8_t> payload(n);
  if (n > 0)
    if (std::string err = read_exact(fd, payload.data(), n, deadline); !err.empty())
      return rdv_error(o, "receiving the blob: " + err);
  if (status != static_cast<uint32_t>(Refusal::None))
    return rdv_error(o, "rank 0 refused this rank: " + std::string(payload.begin(), payload.end()));
  *blob = std::move(payload);
  return r;
}

Status Rendezvous::barrier() {
  if (opt_.world_size == 1) return ok_status();
  const Clock::time_point deadline = deadline_after(opt_.timeout_s);
  const uint32_t seq = ++barriers_;
  uint8_t msg[8] = {'B', 'A', 'R', 'R'};
  put32(msg + 4, seq);
  auto check = [&](const uint8_t* m) { return std::memcmp(m, "BARR", 4) == 0 && get32(m + 4) == seq; };
  if (opt_.rank != 0) {
    if (std::string err = write_all(fds_[0], msg, 8, deadline); !err.empty()) return rdv_error(opt_, "barrier: " + err);
    uint8_t in[8];
    if (std::string err = read_exact(fds_[0], in, 8, deadline); !err.empty())
      return rdv_error(opt_, "barrier " + std::to_string(seq) + ": rank 0 did not release it (" + err +
                                 "; a rank died or hangs)");
    if (!check(in)) return rdv_error(opt_, "barrier: out of step with rank 0");
    return ok_status();
  }
  for (int k = 1; k < opt_.world_size; ++k) {
    uint8_t in[8];
    if (std::string err = read_exact(fds_[static_cast<size_t>(k - 1)], in, 8, deadline); !err.empty())
      return rdv_error(opt_, "barrier " + std::to_string(seq) + ": rank " + std::to_string(k) + " did not arrive (" +
                                 err + "; it died or hangs)");
    if (!check(in)) return rdv_error(opt_, "barrier: rank " + std::to_string(k) + " is out of step");
  }
  for (int k = 1; k < opt_.world_size; ++k)
    if (std::string err = write_all(fds_[static_cast<size_t>(k - 1)], msg, 8, deadline); !err.empty())
      return rdv_error(opt_, "barrier: releasing rank " + std::to_string(k) + ": " + err);
  return ok_status();
}

Result<std::unique_ptr<Rendezvous>> rendezvous_run(const RendezvousOptions& o,
                                                   const std::function<Result<std::vector<uint8_t>>()>& make_blob,
                                                   std::vector<uint8_t>* blob) {
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size)
    return rdv_error(o, "rank " + std::to_string(o.rank) + " of world size " + std::to_string(o.world_size));
  if (o.rank != 0) return Rendezvous::join(o, blob);
  Result<std::unique_ptr<RendezvousListener>> l = RendezvousListener::open(o.port);
  if (!l.ok()) return l.errors();
  Result<std::vector<uint8_t>> b = make_blob();
  if (!b.ok()) return b.errors();
  *blob = b.value();
  return Rendezvous::serve(*l.value(), o, *blob);
}

}  // namespace trctl
