// Atomic file replacement (write "PATH.tmp.<pid>", fsync, rename over PATH, fsync the directory) and whole-file
// reads. A failed write leaves the previous PATH untouched and removes the temp file. See STYLE.md §11.
#pragma once
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/util/error.h"

namespace trctl {

struct AtomicWriteOptions {
  // Fault injection for tests: after this many bytes have reached the temp file, the next write fails with
  // `fail_errno` (ENOSPC: a full disk). -1: no fault.
  int64_t fail_after_bytes = -1;
  int fail_errno = ENOSPC;
  bool fail_rename = false;  // the rename fails with `fail_errno` after a complete, synced temp file
  bool sync = true;          // fsync the file and the directory (off only for throwaway files)
};

// The temp file name used for `path` ("path.tmp.<pid>").
std::string atomic_temp_path(const std::string& path);

Status atomic_write_file(const std::string& path, const std::vector<std::byte>& bytes,
                         const AtomicWriteOptions& opt = {});

// fsync of the directory holding `path` (a rename into it is durable after this).
Status sync_parent_dir(const std::string& path);

// Whole file; Error{Io, path, "... : <strerror>"} when it cannot be opened or read.
Result<std::vector<std::byte>> file_read_bytes(const std::string& path);

}  // namespace trctl
