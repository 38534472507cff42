// ddp_checkpoint.h: checkpoints under DDP (PyTorch's DDP tutorial, "save and load").
// Every rank holds the same parameters, so ONE rank writes: rank 0 saves, the others wait
// until the file is complete, then every rank loads it onto its own device (map_location:
// the file may have been written from cpu:0, rank 2 wants its tensors on cpu:2).
//   save_checkpoint_on_rank0(pg, "ckpt.safetensors", ddp, &opt, {{"step", "10"}});
//   Metadata meta = load_checkpoint_on_all_ranks(pg, "ckpt.safetensors", ddp, &opt);
// Pass the DistributedDataParallel wrapper or the module inside it: the file holds the
// inner module's names ("net1.weight", not "module.net1.weight"), so it also loads into a
// plain, single-process model. Read next: framework/io/checkpoint.h (the file format).
#pragma once
#include <optional>
#include <string>

#include "framework/io/checkpoint.h"
#include "parallel/comm/process_group.h"

namespace dplab::parallel {

// The module a DDP wrapper holds, or m itself when it is not one.
nn::Module& unwrap_ddp(nn::Module& m);
const nn::Module& unwrap_ddp(const nn::Module& m);

// Collective. Rank 0 writes (atomically: io/checkpoint.h); then rank 0 broadcasts whether
// the write succeeded, which doubles as the barrier (cost: one broadcast of 8 bytes). If it
// failed, rank 0 rethrows its error and every other rank throws Error saying rank 0 failed,
// instead of waiting forever or loading a missing file.
void save_checkpoint_on_rank0(ProcessGroup& pg, const std::string& path, const nn::Module& model,
                              const optim::Optimizer* optimizer = nullptr, Metadata extra = {});

// Collective. Every rank loads the file onto map_location (default: the device of the
// model's first parameter, i.e. this rank's device), then the ranks exchange ok-flags
// (one all_gather of 8 bytes each), so no rank overwrites or deletes the file while a peer
// still reads it, and a rank that failed is named on every rank. Returns the metadata.
Metadata load_checkpoint_on_all_ranks(ProcessGroup& pg, const std::string& path, nn::Module& model,
                                      optim::Optimizer* optimizer = nullptr,
                                      std::optional<Device> map_location = std::nullopt);

}  // namespace dplab::parallel
