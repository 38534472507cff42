// transport.h: the narrow interface every collective is written against (the gloo way).
// A transport links each ordered pair of ranks (s -> r) with a mailbox of a few fixed-size
// slots. send_segment copies up to segment_bytes() into the next free slot and signals;
// recv_segment waits for the next filled slot, lets the caller read it in place (reduce it
// into a buffer, or copy it out), then frees the slot. Transports move bytes and signal;
// they never add. Every wait ends, within the timeout, in a CommError naming this rank,
// the peer and the collective; a failed or dead peer ends it sooner.
// Implementations: mailbox_transport.h (shared by shm_transport.h and thread_transport.h).
// Read next: mailbox_transport.h, algorithms/ring.cpp.
#pragma once
#include <cstddef>
#include <functional>
#include <string>

#include "parallel/rendezvous/store.h"

namespace dplab::parallel {

// One slot, the unit of every hand-off, unless a transport is made with another (a multiple
// of 8): the thread transport's, and the cost model's default (algorithms/cost.h).
inline constexpr std::size_t kSegmentBytes = 128 * 1024;

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const std::string& name() const = 0;  // "shm", "thread"
  virtual std::size_t segment_bytes() const = 0;
  // Names the collective in progress, for error messages ("all_reduce(ring)"); called as
  // each collective begins. end_collective() is called as it ends (also when it threw): a
  // GPU transport orders its communication stream back into the compute stream there.
  virtual void set_context(const std::string& collective) = 0;
  virtual void end_collective() {}

  // Blocks while all of the link's slots are full. len may be 0 (a token, e.g. barrier).
  virtual void send_segment(int peer, const void* src, std::size_t len) = 0;
  // Blocks until peer's next segment arrives; use(data, len) reads it before it is freed.
  virtual void recv_segment(int peer,
                            const std::function<void(const void* data, std::size_t len)>& use) = 0;

  // A segment with one word beside it, read back by the receiver inside `use` with
  // received_note(peer): the emulated link sends the moment the segment's bytes start down
  // its wire (link_model.cpp). A transport that cannot carry a note drops it (the receiver
  // reads 0); the mailbox transports carry it.
  virtual void send_noted(int peer, const void* src, std::size_t len, uint64_t /*note*/) {
    send_segment(peer, src, len);
  }
  virtual uint64_t received_note(int /*peer*/) const { return 0; }

  // Tells every peer this rank failed (they stop waiting and name it), with the reason.
  virtual void mark_failed(const std::string& why) = 0;
  // Tells every peer this rank is done: a peer still waiting on it will wait in vain.
  virtual void mark_left() = 0;
};

}  // namespace dplab::parallel
