// libFuzzer target: the YAML experiment-spec loader (spec_parse, core/spec). Input: the spec text; after a NUL
// byte, up to 4 NUL-separated "key.path=value" overrides. Asserts: spec_parse returns a Spec or errors (no crash,
// abort, hang or sanitizer report), every error has a message and a location, and an accepted Spec written back
// with spec_to_yaml parses again and writes back to the same text (the round trip is a fixed point).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/spec/spec.h"

using namespace trctl;

namespace {

[[noreturn]] void fail(const std::string& what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_spec: %s\n%s\n", what.c_str(), detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string all(reinterpret_cast<const char*>(data), size);
  const size_t nul = all.find('\0');
  const std::string text = all.substr(0, nul);
  std::vector<std::string> overrides;
  for (size_t at = nul; at != std::string::npos && overrides.size() < 4;) {
    const size_t next = all.find('\0', at + 1);
    overrides.push_back(all.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1));
    at = next;
  }

  Result<Spec> r = spec_parse(text, "fuzz.yaml", overrides);
  if (!r.ok()) {
    if (r.errors().empty()) fail("no spec and no error", text);
    for (const Error& e : r.errors())
      if (e.where.empty() || e.message.empty()) fail("an error without location or message", e.str());
    return 0;
  }
  const std::string once = spec_to_yaml(r.value());
  Result<Spec> again = spec_parse(once, "emitted.yaml");
  if (!again.ok()) fail("spec_to_yaml output is rejected by spec_parse", again.error_text() + "---\n" + once);
  const std::string twice = spec_to_yaml(again.value());
  if (twice != once) fail("spec_to_yaml -> spec_parse -> spec_to_yaml changes the text", once + "---\n" + twice);
  return 0;
}
