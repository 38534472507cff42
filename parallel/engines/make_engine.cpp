// make_engine.cpp: the one file that picks an engine and a transport by name: the mpi, nccl
// or gloo engine, else dplab's engine over the thread transport (ranks are threads, a
// HashStore) or shm (processes); when the job spans nodes (ranks_per_node), over the node
// transport: shm (threads) inside a node, gloo's TCP wire between nodes. Wrapped in an
// emulated link when asked, and, with CUDA compiled, a factory for the cuda_ipc transport that
// every rank builds at its first collective on a CUDA tensor.
// Each part of the group's view of the store ("dplab/pg<k>", made by create_process_group)
// gets a view below it (the transports, the cuda_ipc transport, the watchdogs): no key is
// ever built from a prefix by hand, and two groups on one store never meet.
// Read next: dplab_engine.cpp, transport/transport.h.
#include "parallel/engines/make_engine.h"

#include "framework/error.h"
#include "parallel/engines/collective_engine.h"
#include "parallel/algorithms/cost.h"
#include "parallel/rendezvous/hash_store.h"
#include "parallel/rendezvous/prefix_store.h"
#include "parallel/rendezvous/tcp_store.h"
#include "parallel/transport/cuda_ipc_transport.h"
#include "parallel/transport/gloo_transport.h"
#include "parallel/transport/link_model.h"
#include "parallel/transport/node_transport.h"
#include "parallel/transport/shm_transport.h"
#include "parallel/transport/thread_transport.h"

namespace dplab::parallel {

bool is_external_engine(const std::string& engine) {
  return engine == "mpi" || engine == "nccl" || engine == "gloo";
}
bool is_known_engine(const std::string& engine) {
  if (is_external_engine(engine)) return true;
  for (Algorithm a : kAlgorithms)  // dplab's engine, named by its all-reduce algorithm
    if (algorithm_name(a) == engine) return true;
  return false;
}

namespace {

// What auto assumes of a link between nodes: TCP through the kernel on both sides, about
// 30 us per message and 10 Gbit/s (1.25 GB/s). Only ratios decide auto's choice; on a slower
// or faster network the crossover sizes move, not the answer far from them.
constexpr double kGlooLinkAlpha = 30e-6;
constexpr double kGlooLinkBeta = 1.0 / 1.25e9;

// With CUDA compiled: the cuda_ipc transport, made later, at the first CUDA collective, by
// all ranks at once; the store must live until then, so the factory holds it (a view of
// the group's: "dplab/pg<k>/cuda_ipc").
CudaTransportFactory cuda_ipc_factory(std::shared_ptr<Store> store,
                                      std::shared_ptr<PrefixStore> group_store, int rank,
                                      int world_size, bool threads,
                                      const EngineOptions& opts) {
  if (!cuda_ipc_compiled()) return nullptr;
  auto own = std::make_shared<PrefixStore>("cuda_ipc", std::move(group_store));
  return [store, own, rank, world_size, threads, timeout = opts.timeout,
          link_gbps = opts.link_gbps](int cuda_index) {
    Seconds before = store->timeout();
    own->set_timeout(timeout);  // a view passes its timeout down to the base store
    try {
      auto t = make_cuda_ipc_transport(*own, rank, world_size, cuda_index, threads, timeout);
      store->set_timeout(before);
      return link_gbps > 0 ? make_paced_transport(std::move(t), link_gbps) : std::move(t);
    } catch (...) {
      store->set_timeout(before);
      throw;
    }
  };
}

// The mpi watchdog's own store: a view ("<group>/watchdog") of a second connection to the same
// TCP store (the first may be busy in the main thread), or of the shared store itself when it
// needs no connection.
CollectiveWatchdog::Connect watchdog_store(const std::shared_ptr<Store>& store,
                                           const std::string& group_prefix) {
  const std::string prefix = group_prefix + "/watchdog";
  if (auto tcp = std::dynamic_pointer_cast<TCPStore>(store)) {
    return [tcp, prefix](Seconds timeout) -> std::shared_ptr<Store> {
      return std::make_shared<PrefixStore>(prefix, tcp->connect_again(timeout));
    };
  }
  auto view = std::make_shared<PrefixStore>(prefix, store);
  return [view](Seconds) -> std::shared_ptr<Store> { return view; };
}

// Across nodes: shm (threads) among this node's ranks, gloo's TCP wire to the others, one
// segment size for both. Each part has its own view: "<group>/node<k>" (one shm block per
// node), "<group>/gloo_transport" (gloo's addresses, and the reasons failed ranks file) and
// "<group>/hang" (the hang reports across nodes).
std::unique_ptr<Transport> node_transport(const std::shared_ptr<PrefixStore>& group_store, int rank,
                                          int world_size, bool threads,
                                          const EngineOptions& opts) {
  const int per_node = opts.ranks_per_node, node = rank / per_node;
  const std::size_t slot = opts.segment_bytes ? opts.segment_bytes : shm_segment_bytes(per_node);
  auto local_store = std::make_shared<PrefixStore>(fmt::format("node{}", node), group_store);
  auto local = threads ? make_thread_transport(*local_store, rank % per_node, per_node,
                                               opts.timeout, slot)
                       : make_shm_transport(*local_store, rank % per_node, per_node,
                                            opts.timeout, slot);
  auto gloo_store = std::make_shared<PrefixStore>("gloo_transport", group_store);
  auto context = make_gloo_context(gloo_store, rank, world_size, opts.timeout, true);
  std::vector<int> others;
  for (int r = 0; r < world_size; ++r)
    if (r / per_node != node) others.push_back(r);
  auto remote = make_gloo_transport(std::move(context), gloo_store, std::move(others),
                                    opts.timeout, slot);
  return make_node_transport(std::move(local), std::move(remote), rank, world_size, per_node,
                             std::make_shared<PrefixStore>("hang", group_store), opts.timeout);
}

// What every rank's options must say, before anything is built (messages name the call users
// make: create_process_group).
void check_options(int world_size, const EngineOptions& opts) {
  DPLAB_CHECK(is_known_engine(opts.engine),
              "create_process_group: engine must be \"ring\", "
              "\"star\", \"recursive_doubling\", \"halving_doubling\", \"one_shot\", "
              "\"hierarchical\", \"auto\", \"mpi\", \"nccl\" or \"gloo\", got \"{}\"",
              opts.engine);
  DPLAB_CHECK(opts.link_gbps >= 0,
              "create_process_group: link_gbps must be >= 0 (0: no "
              "emulated link), got {}",
              opts.link_gbps);
  DPLAB_CHECK(opts.segment_bytes % 8 == 0 && opts.segment_bytes <= (std::size_t{64} << 20),
              "create_process_group: segment_bytes must be a multiple of 8 up to 64 MiB (0: the "
              "transport's default), got {}",
              opts.segment_bytes);
  DPLAB_CHECK(opts.ranks_per_node == 0 ||
                  (opts.ranks_per_node > 0 && world_size % opts.ranks_per_node == 0),
              "create_process_group: ranks_per_node must be 0 (one node) or divide world_size "
              "{} (every node runs as many ranks), got {}",
              world_size, opts.ranks_per_node);
  DPLAB_CHECK(opts.link_gbps == 0 || !is_external_engine(opts.engine),
              "create_process_group: an emulated link (link_gbps = {}) needs one of dplab's "
              "engines (ring, star, ...); the {} engine moves its bytes itself",
              opts.link_gbps, opts.engine);
}

}  // namespace

std::unique_ptr<CollectiveEngine> make_engine(std::shared_ptr<Store> store,
                                              const std::string& group_prefix, int rank,
                                              int world_size, const EngineOptions& opts) {
  check_options(world_size, opts);
  auto group_store = std::make_shared<PrefixStore>(group_prefix, store);
  // mpi, nccl: an existing engine moves the bytes
  if (opts.engine == "mpi")
    return make_mpi_engine(rank, world_size, opts.timeout, watchdog_store(store, group_prefix));
  if (opts.engine == "nccl") return make_nccl_engine(*group_store, rank, world_size, opts.timeout);
  const NodeLayout nodes{world_size, opts.ranks_per_node};
  const bool multi_node = nodes.nodes() > 1;
  // across nodes gloo's wire, unless the nodes are pretend ones that share memory
  const bool over_network = multi_node && !opts.nodes_share_memory;
  if (opts.engine == "gloo") {
    auto view = std::make_shared<PrefixStore>("gloo", group_store);
    return make_gloo_engine(view, rank, world_size, opts.timeout, multi_node,
                            watchdog_store(store, group_prefix));
  }
  DPLAB_CHECK(!over_network || gloo_built(),
              "create_process_group: the '{}' engine across nodes ({} ranks, {} per node) needs "
              "gloo's wire between the nodes, and dplab was built without gloo (install "
              "libgloo-dev, `meson setup --reconfigure -Dgloo=enabled build`); or use the 'mpi' "
              "engine (started by mpirun)",
              opts.engine, world_size, opts.ranks_per_node);
  Seconds saved = store->timeout();
  group_store->set_timeout(opts.timeout);  // a view passes its timeout down to the base store
  std::unique_ptr<Transport> transport;
  const bool threads = dynamic_cast<HashStore*>(store.get()) != nullptr;
  try {
    const std::size_t slot = opts.segment_bytes;
    if (over_network)
      transport = node_transport(group_store, rank, world_size, threads, opts);
    else if (threads)
      transport = make_thread_transport(*group_store, rank, world_size, opts.timeout,
                                        slot ? slot : kSegmentBytes);
    else
      transport = make_shm_transport(*group_store, rank, world_size, opts.timeout,
                                     slot ? slot : shm_segment_bytes(world_size));
  } catch (...) {
    store->set_timeout(saved);
    throw;
  }
  store->set_timeout(saved);
  // the emulated link is the machines' network: with nodes, only hops between them cross it
  std::function<bool(int)> across;
  if (multi_node)
    across = [nodes, rank](int peer) { return nodes.node_of(peer) != nodes.node_of(rank); };
  if (opts.link_gbps > 0)
    transport = make_paced_transport(std::move(transport), opts.link_gbps, across);
  // what auto weighs: the shm transport's hand-off and copy costs, or the emulated link's
  // bandwidth where that is slower (between nodes only, when there are nodes)
  LinkCost link = shm_link_cost(cpu_cores());
  link.segment = double(transport->segment_bytes());
  NodeLinks links{.ranks_per_node = opts.ranks_per_node, .intra = link, .inter = link};
  if (over_network) {  // between nodes a TCP link: its latency and rate
    links.inter.alpha = std::max(link.alpha, kGlooLinkAlpha);
    links.inter.beta = std::max(link.beta, kGlooLinkBeta);
  }
  if (opts.link_gbps > 0)
    links.inter.beta = std::max(links.inter.beta, 1.0 / link_bytes_per_s(opts.link_gbps));
  if (!multi_node) links.intra = links.inter;
  return make_dplab_engine(std::move(transport), algorithm_from_name(opts.engine),
                           cuda_ipc_factory(store, group_store, rank, world_size, threads, opts),
                           links);
}

}  // namespace dplab::parallel
