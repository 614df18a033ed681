// The libFuzzer entry point of output_bytes_fuzzer; output_bytes_fuzz.cc says
// what an input is.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return shoal::fuzz::FuzzOutputBytes(data, size);
}
