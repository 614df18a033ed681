// The libFuzzer entry point of resource_json_fuzzer; resource_json_fuzz.cc says
// what an input is.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return shoal::fuzz::FuzzResourceJson(data, size);
}
