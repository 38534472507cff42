// shm_transport.h: the mailbox protocol over one POSIX shared-memory segment, for ranks
// that are separate processes on one machine (CPU tensors).
// Rendezvous: rank 0 creates the block as an anonymous file (memfd_create: it has no name
// in /dev/shm or anywhere), sealed at its size, publishes its pid, descriptor number and the
// file's inode in the store, and every other rank opens /proc/<pid>/fd/<fd> after checking
// that it is that very memfd (owner, size, inode, seals), then maps it. Rank 0 closes its
// descriptor once all have mapped it. The kernel frees the block with the last mapping, so nothing can be left
// behind, whatever is killed and when (even during the set-up, even by SIGKILL).
// Read next: shm_transport.cpp, mailbox_transport.h.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "parallel/transport/mailbox_transport.h"

namespace dplab::parallel {

// Builds a transport over a mailbox block; owner keeps the block alive (its deleter unmaps).
using MakeMailbox =
    std::function<std::unique_ptr<MailboxTransport>(std::shared_ptr<void> owner, void* memory)>;

// The rendezvous above for a block of `bytes` (>= mailbox_bytes(size, ...)): make() builds
// the transport once the block is mapped, then this rank's pid is filed and rank 0's
// descriptor closed. make_shm_transport is this with a plain MailboxTransport; cuda_ipc reuses it.
// `store` is the group's own: a PrefixStore view ("dplab/pg3"), so its keys ("shm_block",
// "mapped/1") never meet another group's.
std::unique_ptr<MailboxTransport> make_shm_mailbox(Store& store, int rank, int size,
                                                   std::size_t bytes, const MakeMailbox& make);

// slot_bytes: one slot (all ranks pass the same), shm_segment_bytes(size) by default.
std::unique_ptr<Transport> make_shm_transport(Store& store, int rank, int size, Seconds timeout,
                                              std::size_t slot_bytes);

}  // namespace dplab::parallel
