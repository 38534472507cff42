// fuzz_idx.cpp: any bytes given to the IDX reader (as 1-dim labels and 3-dim images, plain
// or gzip: zlib reads both) end in data or a dplab::Error, never a crash or a huge allocation.
// Read next: datasets/idx_file.cpp (the reader under test).
#include <cstddef>
#include <cstdint>

#include "datasets/idx_file.h"
#include "framework/error.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dplab::fuzz::InputFile file(data, size);
  for (int ndims : {1, 3}) {
    try {
      dplab::datasets::IdxData idx = dplab::datasets::read_idx_u8(file.path(), ndims, 0);
      (void)idx.bytes.size();
    } catch (const dplab::Error&) {}
  }
  return 0;
}
