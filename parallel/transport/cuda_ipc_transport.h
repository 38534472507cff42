// cuda_ipc_transport.h: the mailbox protocol with its slots in GPU memory, for CUDA tensors.
// Each rank cudaMallocs (through the caching allocator) one slot buffer for the links that
// end at it and exports it with cudaIpcGetMemHandle; the handle (+ the offset inside its
// cudaMalloc block) goes through the store, and every peer opens it once with
// cudaIpcOpenMemHandle (a peer in the same process, a thread rank, uses the pointer). A
// sender fills a slot with cudaMemcpyAsync on its comm stream; the counters, waits and failure
// flags are mailbox_transport's, in a POSIX shm block (the heap for thread ranks).
// This header names no CUDA type: it compiles in every build; without CUDA
// (cuda_ipc_fallback.cpp) cuda_ipc_compiled() is false and CUDA tensors are staged.
// Read next: cuda_ipc_transport.cpp, then engines/make_engine.cpp (where it is chosen).
#pragma once
#include <memory>
#include <string>

#include "parallel/transport/transport.h"

namespace dplab::parallel {

// True when dplab was built with CUDA, so that ProcessGroups move CUDA tensors with cuda_ipc.
bool cuda_ipc_compiled();

// Collective: every rank of the group calls it with its own logical device cuda:k (several
// ranks may share one physical GPU). threads: the ranks are threads of this process (a
// HashStore group), so the mailbox lives on the heap and peers' buffers are used directly.
// `store`: this transport's own view (PrefixStore "dplab/pg3/cuda_ipc").
std::unique_ptr<Transport> make_cuda_ipc_transport(Store& store, int rank, int size,
                                                   int cuda_device, bool threads, Seconds timeout);

}  // namespace dplab::parallel
