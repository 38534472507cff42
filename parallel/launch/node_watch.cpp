// node_watch.cpp: the heartbeat loop of NodeWatch. One thread per launcher; its store
// requests use a short timeout so stopping the watch never waits long, and a store that
// stops answering only pauses the watch (its clocks restart when it answers again, so an
// outage on our side is never blamed on another node).
// Read next: exe/dplab_run.cpp.
#include "parallel/launch/node_watch.h"

#include <chrono>
#include <vector>

#include "framework/error.h"
#include "parallel/rendezvous/tcp_store.h"

namespace dplab::parallel {

namespace {
using Clock = std::chrono::steady_clock;
constexpr auto kTick = std::chrono::milliseconds(250);
constexpr Seconds kStoreTimeout{1.0};
std::string key(const char* what, int node) { return fmt::format("dplab-run/{}/{}", what, node); }
}  // namespace

NodeWatch::NodeWatch(std::string host, int port, std::string token, int nnodes, int node_rank,
                     Seconds silence)
    : host_(std::move(host)),
      token_(std::move(token)),
      port_(port),
      nnodes_(nnodes),
      node_rank_(node_rank),
      silence_(silence) {
  thread_ = std::thread([this] { run(); });
}

NodeWatch::~NodeWatch() {
  stop_ = true;
  thread_.join();
}

std::optional<std::string> NodeWatch::remote_failure() const {
  std::lock_guard<std::mutex> lock(failure_mu_);
  return failure_;
}

bool NodeWatch::connect() {
  try {
    auto s = std::make_shared<TCPStore>(host_, port_, false, kStoreTimeout, token_);
    std::lock_guard<std::mutex> lock(store_mu_);
    store_ = std::move(s);
    return true;
  } catch (const Error&) {
    return false;  // rank 0 does not serve yet, or no more
  }
}

void NodeWatch::file(const std::string& k, const std::string& value) {
  std::lock_guard<std::mutex> lock(store_mu_);
  if (!store_) return;
  try {
    store_->set(k, value);
  } catch (const Error&) {
    store_.reset();
  }
}

void NodeWatch::report_failure(const std::string& what) {
  file(key("failed", node_rank_), what);
}

void NodeWatch::report_done() { file(key("done", node_rank_), "ok"); }

void NodeWatch::run() {
  struct Peer {
    int64_t beats = 0;  // 0: not seen yet
    Clock::time_point changed{};
    bool done = false;
  };
  std::vector<Peer> peers(static_cast<size_t>(nnodes_));
  bool connected = false;
  while (!stop_) {
    auto next = Clock::now() + kTick;
    if (!connected) {
      connected = connect();
      for (auto& p : peers) p.changed = Clock::now();  // our outage is nobody's silence
    }
    if (connected) {
      try {
        std::lock_guard<std::mutex> lock(store_mu_);
        if (!store_) throw CommError("store connection dropped");
        store_->add(key("alive", node_rank_), 1);
        std::optional<std::string> seen;
        for (int n = 0; n < nnodes_ && !seen; ++n) {
          Peer& p = peers[static_cast<size_t>(n)];
          if (n == node_rank_ || p.done) continue;
          if (store_->check({key("failed", n)})) {
            seen = fmt::format("node {}: {}", n, store_->get(key("failed", n)));
          } else if (store_->check({key("done", n)})) {
            p.done = true;
          } else if (int64_t b = store_->add(key("alive", n), 0); b != p.beats) {
            p.beats = b;
            p.changed = Clock::now();
          } else if (p.beats > 0 && Clock::now() - p.changed > silence_) {
            seen = fmt::format(
                "node {}: its dplab-run stopped (no heartbeat for {:.1f} s: killed, or its "
                "machine or network is down); its ranks end with it",
                n, std::chrono::duration<double>(Clock::now() - p.changed).count());
          }
        }
        if (seen) {
          std::lock_guard<std::mutex> flock(failure_mu_);
          if (!failure_) failure_ = seen;
        }
      } catch (const Error&) {
        std::lock_guard<std::mutex> lock(store_mu_);
        store_.reset();
        connected = false;
      }
    }
    std::this_thread::sleep_until(next);
  }
}

}  // namespace dplab::parallel
