// shm_transport.h: the mailbox protocol over one POSIX shared-memory segment, for ranks
// that are separate processes on one machine (CPU tensors).
// Rendezvous: rank 0 creates "/dplab-<pid>-<random>" (O_EXCL; a stale name is unlinked and
// the create retried), publishes the name in the store, waits until every rank has mapped
// it, then shm_unlinks it at once. From then on the segment lives only as long as some
// process maps it, so nothing is left in /dev/shm, even after SIGKILL.
// Read next: shm_transport.cpp, mailbox_transport.h.
#pragma once
#include <memory>
#include <string>

#include "parallel/transport/transport.h"

namespace dplab::parallel {

// key_prefix makes the store keys unique to one process group ("dplab/pg3").
std::unique_ptr<Transport> make_shm_transport(Store& store, const std::string& key_prefix,
                                              int rank, int size, Seconds timeout);

}  // namespace dplab::parallel
