// gloo_transport.cpp: the interface choice, gloo's context through dplab's store, and the
// segment protocol. A message is [8-byte length][payload]: gloo tells a receiver that a
// message came, not how long it was, and a receive may be posted longer than the message.
// Receives on one pair and slot are matched in the order they were posted, and TCP keeps
// the sender's order, so the k-th segment a rank sends to a peer fills that peer's k-th
// posted receive: buffer k % kGlooDepth.
// Every gloo error (a wait that times out, the peer's connection gone, a receive that could
// not be posted, also by the constructor) becomes one CommError naming this rank, the peer
// and the collective, with the reason a failed peer filed in the store ("failed/<rank>")
// when it is there. A receive that cannot be posted (the peer reset the connection, perhaps
// while this rank was still being set up) fails the wait that needs it. mark_failed
// files the reason and asks for a hard close (gloo's Pair::close sets SO_LINGER 0): peers
// stop waiting when this process exits and its connections reset, or at their timeout.
// Read next: node_transport.cpp.
#include "parallel/transport/gloo_transport.h"

#include <arpa/inet.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>

#include "framework/error.h"
#include "parallel/rendezvous/gloo_store.h"

namespace dplab::parallel {

namespace {

// The local address the kernel would send from to reach `host` (a UDP connect sends nothing).
std::string address_routing_to(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || res == nullptr) return "";
  std::string out;
  int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    char text[INET_ADDRSTRLEN] = {};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text)))
      out = text;
  }
  if (fd >= 0) ::close(fd);
  freeaddrinfo(res);
  return out;
}

}  // namespace

GlooInterface gloo_interface(bool multi_node) {
  // PyTorch's variable: a comma-separated list there; one interface here (the first).
  if (const char* v = std::getenv("GLOO_SOCKET_IFNAME"); v && *v) {
    std::string name = v;
    name = name.substr(0, name.find(','));
    return {.iface = name, .hostname = "", .why = name + " (GLOO_SOCKET_IFNAME)"};
  }
  if (!multi_node) return {.iface = "", .hostname = "127.0.0.1", .why = "127.0.0.1 (one node)"};
  if (const char* m = std::getenv("MASTER_ADDR"); m && *m) {
    const std::string a = address_routing_to(m);
    if (!a.empty())
      return {.iface = "", .hostname = a, .why = fmt::format("{} (routes to MASTER_ADDR {})", a, m)};
  }
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return {.iface = "", .hostname = name, .why = fmt::format("{} (this host's name)", name)};
}

namespace {

// gloo's TCP pairs write with writev, which raises SIGPIPE when the peer's process has died,
// and SIGPIPE's default action kills this rank before gloo can report the closed connection
// as an error naming the peer. Python ignores SIGPIPE at start-up, which is why PyTorch's gloo
// ranks never meet it; a C++ program has to ask: ignored here, unless the program installed a
// handler of its own.
void ignore_sigpipe_unless_handled() {
  struct sigaction now {};
  if (::sigaction(SIGPIPE, nullptr, &now) == 0 && now.sa_handler == SIG_DFL)
    ::signal(SIGPIPE, SIG_IGN);
}

}  // namespace

std::shared_ptr<gloo::Context> make_gloo_context(std::shared_ptr<Store> store, int rank, int size,
                                                 Seconds timeout, bool multi_node) {
  ignore_sigpipe_unless_handled();
  const GlooInterface where = gloo_interface(multi_node);
  gloo::transport::tcp::attr attr;
  attr.iface = where.iface;
  attr.hostname = where.hostname;
  std::shared_ptr<gloo::transport::Device> device;
  try {
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    DPLAB_FAIL("gloo: cannot listen on {}: {} (set GLOO_SOCKET_IFNAME to an interface that "
               "the other nodes reach; docs/gloo.md)",
               where.why, e.what());
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(ms);
  GlooStore gloo_store(std::move(store));
  try {
    context->connectFullMesh(gloo_store, device);
  } catch (const gloo::Exception& e) {
    throw CommError(fmt::format("rank {}: gloo could not connect to the other {} ranks within "
                                "{:.1f} s from {}: {}",
                                rank, size - 1, timeout.count(), where.why, e.what()));
  }
  return context;
}

namespace {

class GlooTransport final : public Transport {
 public:
  GlooTransport(std::shared_ptr<gloo::Context> context, std::shared_ptr<Store> status,
                std::vector<int> peers, Seconds timeout, std::size_t segment_bytes)
      : context_(std::move(context)), status_(std::move(status)), timeout_(timeout),
        segment_(segment_bytes) {
    DPLAB_CHECK(segment_ >= 8 && segment_ % 8 == 0,
                "gloo transport: segment_bytes must be a positive multiple of 8, got {}", segment_);
    for (int p : peers) {
      DPLAB_CHECK(p >= 0 && p < size() && p != rank(),
                  "gloo transport: peer {} is not another rank of [0, {})", p, size());
      Link& l = links_[p];
      for (int k = 0; k < kGlooDepth; ++k) {
        l.send_mem[k].resize(8 + segment_);
        l.recv_mem[k].resize(8 + segment_);
        l.send[k] = context_->createUnboundBuffer(l.send_mem[k].data(), l.send_mem[k].size());
        l.recv[k] = context_->createUnboundBuffer(l.recv_mem[k].data(), l.recv_mem[k].size());
        post_recv(p, l, k);  // posted ahead: the peer's first segments land at once
      }
    }
  }
  ~GlooTransport() override {
    // Sends still in flight finish first (their peers have posted the receives); a peer
    // that is gone ends them with an error, which nobody is left to hear.
    for (auto& [peer, l] : links_)
      for (int k = 0; k < kGlooDepth; ++k)
        if (l.send_pending[k]) try {
            l.send[k]->waitSend(std::chrono::milliseconds(1000));
          } catch (const std::exception&) {
          }
  }

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }
  const std::string& name() const override { return name_; }
  std::size_t segment_bytes() const override { return segment_; }
  void set_context(const std::string& collective) override { collective_ = collective; }

  void send_segment(int peer, const void* src, std::size_t len) override {
    DPLAB_CHECK(len <= segment_, "gloo transport: a segment holds at most {} bytes, got {}",
                segment_, len);
    Link& l = link(peer);
    const int k = static_cast<int>(l.sent++ % kGlooDepth);
    if (l.send_pending[k]) {
      wait(peer, "send to", [&] { l.send[k]->waitSend(ms()); });
      l.send_pending[k] = false;
    }
    const uint64_t n = len;
    std::memcpy(l.send_mem[k].data(), &n, 8);
    if (len) std::memcpy(l.send_mem[k].data() + 8, src, len);
    wait(peer, "send to", [&] { l.send[k]->send(peer, kSlot, 0, 8 + len); });
    l.send_pending[k] = true;
  }

  void recv_segment(int peer,
                    const std::function<void(const void* data, std::size_t len)>& use) override {
    Link& l = link(peer);
    const int k = static_cast<int>(l.received++ % kGlooDepth);
    if (!l.recv_posted[k]) fail(peer, "receive from", "its connection was closed: " + l.post_error);
    wait(peer, "receive from", [&] { l.recv[k]->waitRecv(ms()); });
    uint64_t n = 0;
    std::memcpy(&n, l.recv_mem[k].data(), 8);
    if (n > segment_)
      throw CommError(fmt::format("rank {}: gloo transport: rank {} sent a segment of {} bytes, "
                                  "more than the {} this group's segments hold",
                                  rank(), peer, n, segment_));
    use(l.recv_mem[k].data() + 8, n);
    post_recv(peer, l, k);  // the buffer is free again: post it for a later segment
  }

  void mark_failed(const std::string& why) override {
    try {
      status_->set(fmt::format("failed/{}", rank()), why);
    } catch (const std::exception&) {
    }
    close_all();
  }
  void mark_left() override {}

 private:
  static constexpr uint64_t kSlot = 1;  // this context carries nothing else

  struct Link {
    std::vector<char> send_mem[kGlooDepth], recv_mem[kGlooDepth];
    std::unique_ptr<gloo::transport::UnboundBuffer> send[kGlooDepth], recv[kGlooDepth];
    bool send_pending[kGlooDepth] = {};
    bool recv_posted[kGlooDepth] = {};
    std::string post_error;  // why a receive could not be posted again
    uint64_t sent = 0, received = 0;
  };

  Link& link(int peer) {
    auto it = links_.find(peer);
    DPLAB_CHECK(it != links_.end(),
                "gloo transport: rank {} has no link to rank {} (in {}): this transport "
                "links the ranks of other nodes only",
                rank(), peer, collective_);
    return it->second;
  }
  std::chrono::milliseconds ms() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(timeout_);
  }
  // Posts receive k from peer. A peer that has reset or closed its connection (it finished,
  // or died, perhaps before this rank's constructor ran) refuses the post; that matters only
  // if we wait on that buffer, and then the wait fails naming the peer (recv_segment).
  void post_recv(int peer, Link& l, int k) {
    try {
      l.recv[k]->recv(peer, kSlot);
      l.recv_posted[k] = true;
    } catch (const gloo::Exception& e) {
      l.recv_posted[k] = false;
      l.post_error = e.what();
    }
  }
  // Runs one gloo call; any failure becomes a CommError naming both ranks and the collective.
  template <class F>
  void wait(int peer, const char* what, F&& f) {
    try {
      f();
    } catch (const gloo::Exception& e) {
      fail(peer, what, e.what());
    }
  }
  // The one message of every failure: this rank, what it did with which peer, in which
  // collective, gloo's words, and the reason a failed rank filed.
  [[noreturn]] void fail(int peer, const char* what, const std::string& gloo_says) {
    std::string reason = failure_of(peer);
    throw CommError(fmt::format(
        "rank {}: gloo transport: {} rank {} in {} failed{}: {}{}", rank(), what, peer,
        collective_,
        gloo_says.find("imed out") != std::string::npos
            ? fmt::format(" (no progress within the timeout, {:.1f} s)", timeout_.count())
            : "",
        gloo_says, reason.empty() ? "" : "; " + reason));
  }
  // What a failed rank filed, the awaited peer's first; "" when nobody filed.
  std::string failure_of(int peer) {
    try {
      std::vector<int> order{peer};
      for (int r = 0; r < size(); ++r)
        if (r != peer && r != rank()) order.push_back(r);
      for (int r : order)
        if (status_->check({fmt::format("failed/{}", r)}))
          return fmt::format("rank {} failed: {}", r, status_->get(fmt::format("failed/{}", r)));
    } catch (const std::exception&) {
    }
    return "";
  }
  void close_all() {
    for (auto& [peer, l] : links_) try {
        context_->getPair(peer)->close();
      } catch (const std::exception&) {
      }
  }

  std::shared_ptr<gloo::Context> context_;
  std::shared_ptr<Store> status_;
  Seconds timeout_;
  std::size_t segment_;
  std::map<int, Link> links_;
  std::string collective_ = "(no collective yet)";
  std::string name_ = "gloo";
};

}  // namespace

std::unique_ptr<Transport> make_gloo_transport(std::shared_ptr<gloo::Context> context,
                                               std::shared_ptr<Store> status,
                                               std::vector<int> peers, Seconds timeout,
                                               std::size_t segment_bytes) {
  DPLAB_CHECK(context != nullptr && status != nullptr, "gloo transport: no context or store");
  return std::make_unique<GlooTransport>(std::move(context), std::move(status), std::move(peers),
                                         timeout, segment_bytes);
}

}  // namespace dplab::parallel
