// Atomic write with POSIX calls (open/write/fsync/close/rename and a directory fsync), with fault injection.
#include "core/ckpt/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace trctl {

namespace {

Error io_error(const std::string& where, const std::string& what, int err) {
  return {ErrCode::Io, where, what + ": " + std::strerror(err)};
}

std::string dir_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Writes all of `bytes` to fd, honouring the injected fault; returns 0 or an errno value.
int write_all(int fd, const std::vector<std::byte>& bytes, const AtomicWriteOptions& opt) {
  size_t done = 0;
  while (done < bytes.size()) {
    size_t chunk = bytes.size() - done;
    if (opt.fail_after_bytes >= 0) {
      if (static_cast<int64_t>(done) >= opt.fail_after_bytes) return opt.fail_errno;
      chunk = std::min<size_t>(chunk, static_cast<size_t>(opt.fail_after_bytes) - done);
    }
    ssize_t n = ::write(fd, bytes.data() + done, chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    done += static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace

Status sync_parent_dir(const std::string& path) {
  std::string dir = dir_of(path);
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return io_error(path, "cannot open directory '" + dir + "' to sync the rename", errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return io_error(path, "fsync of directory '" + dir + "' failed (the file was replaced)", err);
  return ok_status();
}


std::string atomic_temp_path(const std::string& path) {
  return path + ".tmp." + std::to_string(static_cast<long>(::getpid()));
}

Status atomic_write_file(const std::string& path, const std::vector<std::byte>& bytes,
                         const AtomicWriteOptions& opt) {
  const std::string tmp = atomic_temp_path(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error(path, "cannot create temp file '" + tmp + "'", errno);
  auto abandon = [&](const std::string& what, int err) -> Status {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    return io_error(path, what + " (the previous file is unchanged)", err);
  };
  if (int err = write_all(fd, bytes, opt)) return abandon("write to '" + tmp + "' failed", err);
  if (opt.sync && ::fsync(fd) != 0) return abandon("fsync of '" + tmp + "' failed", errno);
  int rc = ::close(fd);
  fd = -1;
  if (rc != 0) return abandon("close of '" + tmp + "' failed", errno);
  if (opt.fail_rename) return abandon("rename of '" + tmp + "' failed", opt.fail_errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return abandon("rename of '" + tmp + "' failed", errno);
  if (opt.sync) return sync_parent_dir(path);
  return ok_status();
}

Result<std::vector<std::byte>> file_read_bytes(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error(path, "cannot open", errno);
  std::vector<std::byte> out;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > 0) out.reserve(static_cast<size_t>(st.st_size));
  std::byte buf[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return io_error(path, "read failed", err);
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  ::close(fd);
  return out;
}

}  // namespace trctl
