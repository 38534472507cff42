// fuzz_safetensors.cpp: any bytes given to load_safetensors end in a loaded file or a
// dplab::Error, never a crash, a sanitizer report, a hang or an allocation beyond the file.
// Read next: framework/io/safetensors.cpp (the validating reader under test).
#include <cstddef>
#include <cstdint>

#include "framework/error.h"
#include "framework/io/safetensors.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dplab::fuzz::InputFile file(data, size);
  try {
    dplab::Loaded loaded = dplab::load_safetensors(file.path());
    for (const auto& [name, t] : loaded.tensors) (void)t.numel();
  } catch (const dplab::Error&) {
    // a clear error is the expected outcome for most inputs
  }
  return 0;
}
