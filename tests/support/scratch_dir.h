// Test helper: ScratchDir, a per-process directory under the system temp dir (<temp>/<prefix>_<pid>), emptied on
// construction (and created, unless `create` is false: for tests whose code under test must create it itself) and
// removed with everything in it at scope exit.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace trctl::testing {

struct ScratchDir {
  std::filesystem::path path;

  explicit ScratchDir(const std::string& prefix, bool create = true)
      : path(std::filesystem::temp_directory_path() / (prefix + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    if (create) std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
};

}  // namespace trctl::testing
