// thread_transport.cpp: rank 0 allocates the mailbox block, files it in a process-wide
// registry under a fresh id and publishes the id in the store; the other ranks look it up.
// The block is freed when the last rank's transport lets go of it.
// Read next: ../comm/process_group.cpp.
#include "parallel/transport/thread_transport.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "framework/error.h"
#include "parallel/transport/mailbox_transport.h"

namespace dplab::parallel {
namespace {

std::mutex registry_mu;
std::map<int64_t, std::shared_ptr<void>> registry;  // id -> block, until all ranks took it
int64_t next_id = 0;

}  // namespace

std::unique_ptr<MailboxTransport> make_heap_mailbox(Store& store, int rank, int size,
                                                    std::size_t bytes, const MakeMailbox& make) {
  std::shared_ptr<void> block;
  const std::string id_key = "thread_block";
  if (rank == 0) {
    void* p = std::aligned_alloc(64, bytes);
    DPLAB_CHECK(p != nullptr, "thread transport: cannot allocate {} bytes", bytes);
    std::memset(p, 0, bytes);  // zero is the valid empty state
    block = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
    int64_t id;
    {
      std::lock_guard<std::mutex> lock(registry_mu);
      id = next_id++;
      registry[id] = block;
    }
    store.set(id_key, std::to_string(id));
    std::vector<std::string> keys;
    for (int r = 1; r < size; ++r) keys.push_back(fmt::format("taken/{}", r));
    try {
      store.wait(keys);
    } catch (...) {
      std::lock_guard<std::mutex> lock(registry_mu);
      registry.erase(id);
      throw;
    }
    std::lock_guard<std::mutex> lock(registry_mu);
    registry.erase(id);
  } else {
    int64_t id = std::stoll(store.get(id_key));
    {
      std::lock_guard<std::mutex> lock(registry_mu);
      auto it = registry.find(id);
      DPLAB_CHECK(it != registry.end(),
                  "thread transport: rank {} found no block {}: is rank 0 a thread of another "
                  "process? (a HashStore only joins threads of one process)",
                  rank, id);
      block = it->second;
    }
    store.set(fmt::format("taken/{}", rank), "1");
  }
  return make(block, block.get());
}

std::unique_ptr<Transport> make_thread_transport(Store& store, int rank, int size, Seconds timeout,
                                                 std::size_t slot_bytes) {
  return make_heap_mailbox(store, rank, size, mailbox_bytes(size, slot_bytes),
                           [&](std::shared_ptr<void> owner, void* memory) {
    return std::make_unique<MailboxTransport>(owner, memory, rank, size, timeout, "thread",
                                              slot_bytes);
  });
}

}  // namespace dplab::parallel
