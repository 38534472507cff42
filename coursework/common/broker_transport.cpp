// broker_transport.cpp: see broker_transport.h. The frames come from the broker, which
// checked their lengths and sources; a frame longer than a segment still fails the call
// (the broker's max_frame is the one cap, this the second).
#include "broker_transport.h"

#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>

#include "broker.h"
#include "wire.h"

namespace course::broker {

BrokerTransport::BrokerTransport(int to_broker, int from_broker, std::size_t segment_bytes,
                                 std::chrono::duration<double> wait)
    : to_(to_broker), from_(from_broker), segment_(segment_bytes), wait_(wait) {}

void BrokerTransport::begin(int rank, int size) {
  rank_ = rank;
  size_ = size;
  early_.assign(static_cast<std::size_t>(size), {});
}

void BrokerTransport::check_peer(int peer, const char* what) const {
  if (peer < 0 || peer >= size_ || peer == rank_)
    throw std::invalid_argument("rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                                " tried to " + what + " rank " + std::to_string(peer) +
                                " (ranks are 0 to " + std::to_string(size_ - 1) +
                                ", and not itself)");
}

void BrokerTransport::send_segment(int peer, const void* src, std::size_t len) {
  check_peer(peer, "send to");
  if (len > segment_)
    throw std::invalid_argument("a segment of " + std::to_string(len) +
                                " bytes: a link takes at most " + std::to_string(segment_));
  std::string payload(1, static_cast<char>(peer));
  payload.append(static_cast<const char*>(src), len);
  if (!wire::write_frame(to_, payload))
    throw std::runtime_error("rank " + std::to_string(rank_) + " could not send to rank " +
                             std::to_string(peer) + ": the broker is gone (the test ended?)");
}

void BrokerTransport::recv_segment(int peer,
                                   const std::function<void(const void*, std::size_t)>& use) {
  check_peer(peer, "receive from");
  const auto deadline = std::chrono::steady_clock::now() + wait_;
  while (early_[peer].empty()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{from_, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::max<long long>(left.count(), 0)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0)
      throw std::runtime_error(fmt::format(
          "rank {} of {} timed out after {:g} s waiting for a segment from rank {} in {}", rank_,
          size_, wait_.count(), peer, context_.empty() ? "a collective" : context_));
    std::string frame;
    if (wire::read_frame(from_, frame, static_cast<std::uint32_t>(segment_ + 1)) !=
            wire::Read::kFrame ||
        frame.empty())
      throw std::runtime_error("rank " + std::to_string(rank_) +
                               " lost its link to the broker (the test ended?)");
    const int source = static_cast<std::uint8_t>(frame[0]);
    if (source == kJudge)
      throw std::runtime_error(frame.substr(1));  // "failed because rank 2 failed: ..."
    if (source >= size_)
      throw std::runtime_error("rank " + std::to_string(rank_) + " received a segment from rank " +
                               std::to_string(source) + ", which is not in this collective of " +
                               std::to_string(size_));
    early_[source].push_back(std::move(frame));  // kept whole: its source byte stays in front
  }
  const std::string got = std::move(early_[peer].front());
  early_[peer].pop_front();
  use(got.data() + 1, got.size() - 1);  // the segment, read where it arrived (no copy)
}

}  // namespace course::broker
