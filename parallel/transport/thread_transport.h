// thread_transport.h: the mailbox protocol on the heap, for ranks that are threads of one
// process (fast protocol tests over a HashStore). Same slots, counters and futex waits as
// shm; only where the memory comes from differs, and no pid checks (one process).
// Read next: thread_transport.cpp, mailbox_transport.h.
#pragma once
#include <memory>
#include <string>

#include "parallel/transport/shm_transport.h"  // MakeMailbox

namespace dplab::parallel {

// The heap twin of make_shm_mailbox: a zeroed block of `bytes`, shared by the rank threads.
// `store` is the group's own (a PrefixStore view), as for make_shm_mailbox.
std::unique_ptr<MailboxTransport> make_heap_mailbox(Store& store, int rank, int size,
                                                    std::size_t bytes, const MakeMailbox& make);

std::unique_ptr<Transport> make_thread_transport(Store& store, int rank, int size, Seconds timeout,
                                                 std::size_t slot_bytes = kSegmentBytes);

}  // namespace dplab::parallel
