// safetensors.h: named tensors to and from a .safetensors file, byte-compatible with
// Python's safetensors (safetensors.torch.save_file / load_file).
//
// Layout:  [u64 little-endian N][N bytes of JSON header][data section]
//   header: {"__metadata__":{"epoch":"3"},
//            "fc1.weight":{"dtype":"F32","shape":[4,2],"data_offsets":[0,32]}, ...}
//   offsets are relative to the start of the data section; data is raw little-endian.
// Read next: checkpoint.h (model + optimizer + epoch on top of this), json.h (the header).
#pragma once
#include <string>

#include "framework/nn/state_dict.h"
#include "framework/tensor/device.h"

namespace dplab {

// The reference reader's limit: a header over 100 MB is taken as a corrupt length field.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Writes every tensor (any device: non-CPU tensors are copied to the host one at a time,
// so a GPU model needs at most one tensor's worth of extra host memory) and the metadata.
// What the writer does, in the order Python's writer does it:
//   - "__metadata__" first (omitted when empty), then tensors in data order;
//   - data order: 8-byte dtypes (I64) before 4-byte ones (F32), each group sorted by name,
//     so every tensor starts at an offset aligned to its element size;
//   - the header is padded with spaces to a multiple of 8 bytes (aligned data section).
// Without metadata (or with one key) the bytes equal those of Python's save_file; with
// more keys only their order differs (Rust's HashMap order is arbitrary).
// Atomic: the bytes go to "<path>.tmp-<pid>-<n>" in the same directory, are fsync'ed,
// then renamed over path (and the directory fsync'ed). A failure at any point removes the
// temporary and leaves an existing file at path untouched.
void save_safetensors(const std::string& path, const StateDict& tensors,
                      const Metadata& metadata = {});

struct Loaded {
  StateDict tensors;  // in data-offset order (file order)
  Metadata metadata;  // "__metadata__", empty if the file has none
};

// Reads a file and places every tensor on map_location (PyTorch's map_location): "cpu:3"
// counts the bytes in memory_stats(cpu:3); "cuda:0" stages through one host buffer.
// Validates everything before trusting it, and names the rule a bad file breaks:
//   file < 8 bytes; header length > 100 MB or past the end of the file; header not
//   starting with '{', not valid JSON, not an object; a tensor entry missing dtype, shape
//   or data_offsets or with values of the wrong kind; a dtype other than F32/I64 (a known
//   safetensors dtype is named as unsupported); shape product * element size != the
//   offsets' span; offsets out of the data section, overlapping or leaving a gap.
// Coverage rule (the reference reader's): sorted by start offset, the tensors must tile
// the data section exactly: first starts at 0, each starts where the previous ended, the
// last ends at the end of the file. Trailing bytes no tensor claims are an error.
Loaded load_safetensors(const std::string& path, Device map_location = Device("cpu"));

// The safetensors name of a dtype ("F32", "I64") and back (throws on any other name,
// naming supported and unsupported safetensors dtypes differently).
std::string safetensors_dtype_name(DType t);
DType parse_safetensors_dtype(const std::string& name);

}  // namespace dplab
