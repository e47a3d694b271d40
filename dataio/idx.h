// Byte-level helpers behind idx_load: reading a whole file and inflating gzip with a cap on the output size (a
// guard against decompression bombs). Exposed so that tests can exercise the guard with a small cap.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/util/error.h"

namespace trctl {

// The most bytes idx_load will inflate from one gzip file; more is reported as an error, not allocated.
constexpr size_t kIdxMaxInflatedBytes = size_t(1) << 30;  // 1 GiB

// The whole regular file. Errors: ErrCode::Io, where = path.
Result<std::vector<uint8_t>> idx_read_file(const std::string& path);

// Inflates a gzip stream (one or more members, as `gzip -c a b` writes). A corrupt or truncated stream, bytes
// after the last member, or more than max_out bytes of output is ErrCode::Format with where = "path:offset N"
// (N counted in the compressed input).
Result<std::vector<uint8_t>> idx_gunzip(const std::vector<uint8_t>& gz, const std::string& path,
                                        size_t max_out = kIdxMaxInflatedBytes);

// idx_read_file, then idx_gunzip when the bytes start with the gzip magic 1f 8b (the file name does not matter);
// *was_gzip (when given) tells which.
Result<std::vector<uint8_t>> idx_read_bytes(const std::string& path, size_t max_inflated = kIdxMaxInflatedBytes,
                                            bool* was_gzip = nullptr);

}  // namespace trctl
