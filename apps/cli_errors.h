// Exit codes shared by the trctl commands, and the one way they print a list of errors.
#pragma once
#include <cstdio>
#include <vector>

#include "core/util/error.h"

namespace trctl {

inline constexpr int kExitBadInput = 2;     // bad config, data, checkpoint or image; a feature not supported
inline constexpr int kExitEnvironment = 1;  // internal errors and the environment (a disk that is full)

// Prints every error as "error: ..." on stderr; returns 1 when the first is internal, else `code`.
inline int report_errors(const std::vector<Error>& errors, int code = kExitBadInput) {
  for (const auto& e : errors) std::fprintf(stderr, "error: %s\n", e.str().c_str());
  return !errors.empty() && errors.front().code == ErrCode::Internal ? kExitEnvironment : code;
}

}  // namespace trctl
