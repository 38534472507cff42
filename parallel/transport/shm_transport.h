// shm_transport.h: the mailbox protocol over one POSIX shared-memory segment, for ranks
// that are separate processes on one machine (CPU tensors).
// Rendezvous: rank 0 creates "/dplab-<pid>-<random>" (O_EXCL; a stale name is unlinked and
// the create retried), publishes the name in the store, waits until every rank has mapped
// it, then shm_unlinks it at once. From then on the segment lives only as long as some
// process maps it, so nothing is left in /dev/shm, even after SIGKILL.
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
// the transport once the block is mapped, then this rank's pid is filed and the name
// unlinked. make_shm_transport is this with a plain MailboxTransport; cuda_ipc reuses it.
std::unique_ptr<MailboxTransport> make_shm_mailbox(Store& store, const std::string& key_prefix,
                                                   int rank, int size, std::size_t bytes,
                                                   const MakeMailbox& make);

// key_prefix makes the store keys unique to one process group ("dplab/pg3").
std::unique_ptr<Transport> make_shm_transport(Store& store, const std::string& key_prefix,
                                              int rank, int size, Seconds timeout);

}  // namespace dplab::parallel
