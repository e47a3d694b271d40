// The safetensors file format (https://github.com/huggingface/safetensors), written and read exactly:
//   u64 little-endian N | N bytes of JSON header, space-padded to a multiple of 8 | tensor bytes
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the
// byte buffer after the header) plus an optional "__metadata__" object of string -> string. The reader checks
// every field and that the tensors tile the buffer exactly (contiguous, no overlap, nothing left over).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/ckpt/atomic_file.h"
#include "core/graph/ir.h"
#include "core/util/error.h"

namespace trctl {

// One tensor: raw little-endian element bytes, row-major. An empty shape is a scalar (one element).
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<std::byte> data;
};

using SafetensorsMetadata = std::map<std::string, std::string>;

struct SafetensorsFile {
  std::vector<TensorView> tensors;  // in file layout order (increasing data offsets)
  SafetensorsMetadata metadata;
  const TensorView* find(const std::string& name) const;
};

// Largest header accepted (the reference implementation's limit): rejects absurd lengths before allocating.
constexpr uint64_t kSafetensorsMaxHeader = 100u << 20;

// "F32", "F64", "F16", "BF16", "I32", "U8"; parse returns false for any other name.
const char* safetensors_dtype_name(DType t);
bool safetensors_dtype_parse(const std::string& name, DType& out);

// The whole file as bytes (tensors in the order given, contiguous). Errors: empty/duplicate/reserved names,
// negative dimensions, data size != numel * dtype size.
Result<std::vector<std::byte>> safetensors_encode(const std::vector<TensorView>& tensors,
                                                  const SafetensorsMetadata& metadata);
// Parses and validates a whole file's bytes; `where` (the file name) prefixes every error, with the byte offset.
Result<SafetensorsFile> safetensors_decode(const std::vector<std::byte>& bytes, const std::string& where);

// Encode + atomic_write_file; read_bytes + decode.
Status safetensors_write(const std::string& path, const std::vector<TensorView>& tensors,
                         const SafetensorsMetadata& metadata, const AtomicWriteOptions& opt = {});
Result<SafetensorsFile> safetensors_read(const std::string& path);

}  // namespace trctl
