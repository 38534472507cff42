// cuda_ipc_transport.cpp: where the slots of a link live when the tensors are on a GPU, and
// how bytes get into them. The protocol (counters, futex waits, failed/left/dead peers) is
// mailbox_transport.cpp's, untouched: this file only overrides slot_fill / slot_view /
// slot_read_done and sets up and tears down the shared GPU buffers. The comment above
// CudaIpcTransport says how CUDA's IPC rules are met.
// Read next: ../engines/dplab_engine.cpp (transport_for), ../algorithms/ring.cpp.
#include "parallel/transport/cuda_ipc_transport.h"

#include <cuda_runtime.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "framework/backend/cuda/cuda_allocator.h"
#include "framework/backend/cuda/cuda_check.h"
#include "framework/backend/cuda/cuda_devices.h"
#include "framework/error.h"
#include "parallel/transport/mailbox_transport.h"
#include "parallel/transport/shm_transport.h"
#include "parallel/transport/thread_transport.h"

namespace dplab::parallel {
namespace {

constexpr std::size_t kCudaSegmentBytes = std::size_t{4} << 20;  // one GPU slot
constexpr int kMaxIpcRanks = 64;                                 // bits of `released_by`
constexpr auto kReleaseWait = std::chrono::seconds(5);           // at teardown, at most

// Per rank, in the block after the mailbox: bit s is set once rank s closed our buffer.
struct alignas(64) IpcStatus {
  std::atomic<uint64_t> released_by;
};

std::size_t block_bytes(int size) {
  return mailbox_bytes(size, 0) + static_cast<std::size_t>(size) * sizeof(IpcStatus);
}

std::string to_hex(const void* p, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i)
    out += fmt::format("{:02x}", static_cast<const uint8_t*>(p)[i]);
  return out;
}

void from_hex(const std::string& hex, void* p, std::size_t n, int peer) {
  DPLAB_CHECK(hex.size() == 2 * n,
              "cuda_ipc: rank {} published a {}-character handle, expected "
              "{} (hex of a cudaIpcMemHandle_t)",
              peer, hex.size(), 2 * n);
  for (std::size_t i = 0; i < n; ++i)
    static_cast<uint8_t*>(p)[i] =
        static_cast<uint8_t>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
}

// What a rank publishes about its slot buffer: "pid offset pointer handle-hex".
struct Published {
  long pid = 0;
  std::size_t offset = 0;
  std::uintptr_t pointer = 0;
  cudaIpcMemHandle_t handle{};
};

// Layout: rank r owns one buffer of N * kSlots * kCudaSegmentBytes bytes; part [s] holds the
// kSlots slots of the link s -> r (the part for s = r is unused: it keeps indexing plain).
// Receivers own their slots, so a receiver's reduce or copy reads local memory, and the
// sender's cudaMemcpyAsync is the one move across processes (and GPUs, when ranks have one
// each: peer access is turned on lazily by cudaIpcOpenMemHandle).
//
// Streams: a collective runs on the device's communication stream, not the compute stream
// the backward kernels use (PyTorch DDP's pattern with NCCL). set_context, which opens every
// collective, records an event on the compute stream (the bucket's gradients are queued
// there) and makes the comm stream wait for it; it also opens a CommStreamScope, so the
// reduce kernels and copies the collective queues go on the comm stream. end_collective
// records an event on the comm stream and makes the compute stream wait for it (the
// optimizer then reads finished sums) and closes the scope.
// Completion: the mailbox's counters live in host memory, so the sender waits for its copy
// (an event recorded right after it) before bumping `written`, and the receiver for its
// reduce kernel before bumping `consumed`. Both wait on the comm stream only: backward
// kernels queued meanwhile on the compute stream delay neither this rank nor its peers.
// Interprocess events (cudaIpcGetEventHandle) with device-side flags would also spare the
// host these waits (~10 us each), so GPU slots are 4 MiB (32x the shm ones) to keep them
// small next to the copy.
//
// CUDA's IPC rules, and how they are met:
//  - a handle names the base of a cudaMalloc allocation: the slot buffer comes from the
//    caching allocator, so we export cuda_block_base() and publish the offset beside it;
//  - a process cannot open its own handle: a peer with our pid uses the raw pointer;
//  - the exporter keeps the buffer alive until importers close it: each rank flags the
//    peers whose buffers it closed (shm, after the mailbox); a buffer goes back to the cache
//    only when every peer has let go or died, else it stays reserved until exit (reported).
//    Thread ranks (one process) never wait for that: their transports are often destroyed
//    one after another by one thread, so the first could only time out waiting for the
//    next. A buffer that same-process peers still use is handed to a process-wide list,
//    holding the shared block alive, and freed by whichever transport of the group is
//    destroyed last (sweep_deferred).
// Cleanup: GPU memory and IPC mappings die with the process; the shared block is a memfd
// that nothing names (shm_transport.h), so a crash leaves nothing to trip over.
// A slot buffer whose same-process peers had not let go when its transport was destroyed.
struct DeferredFree {
  std::shared_ptr<void> owner;  // keeps the heap block (and so `status`) alive
  IpcStatus* status = nullptr;  // its released_by bits
  uint64_t all = 0;             // the bits that must be set before the free
  int device = 0;
  void* buffer = nullptr;
};
std::mutex g_deferred_mu;
std::vector<DeferredFree>& deferred() {
  static auto* list = new std::vector<DeferredFree>();  // never destroyed: used at exit
  return *list;
}
// Frees every deferred buffer that all its peers have now released.
void sweep_deferred() {
  std::lock_guard<std::mutex> lock(g_deferred_mu);
  auto& list = deferred();
  for (std::size_t i = 0; i < list.size();) {
    if ((list[i].status->released_by.load(std::memory_order_acquire) & list[i].all) ==
        list[i].all) {
      try {
        cuda::cache_free(list[i].device, list[i].buffer);
      } catch (const std::exception&) {
        // only if the allocator's table is gone, at exit
      }
      list[i] = std::move(list.back());
      list.pop_back();
    } else {
      ++i;
    }
  }
}

class CudaIpcTransport final : public MailboxTransport {
 public:
  CudaIpcTransport(std::shared_ptr<void> owner, void* memory, int rank, int size, Seconds timeout,
                   int device, bool threads)
      : MailboxTransport(owner, memory, rank, size, timeout, "cuda_ipc", 0),
        owner_(std::move(owner)), threads_(threads), device_(device),
        peers_(static_cast<std::size_t>(size)) {
    ipc_ = reinterpret_cast<IpcStatus*>(static_cast<std::byte*>(memory) + mailbox_bytes(size, 0));
    dev_ = &cuda::bind(device);
    CUDA_CHECK(cudaEventCreateWithFlags(&compute_ready_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&comm_done_, cudaEventDisableTiming));
    if (size > 1)
      mine_ = static_cast<std::byte*>(cuda::cache_allocate(device, part_bytes() * size));
  }

  ~CudaIpcTransport() override;

  std::size_t segment_bytes() const override { return kCudaSegmentBytes; }

  // Opens a collective: the comm stream waits for the compute stream's work so far (the
  // gradients), and this thread's kernels for our device go on the comm stream until
  // end_collective.
  void set_context(const std::string& collective) override {
    MailboxTransport::set_context(collective);
    if (scope_) return;  // already open (a collective made of several)
    cuda::bind(device_);
    CUDA_CHECK(cudaEventRecord(compute_ready_, dev_->stream));
    CUDA_CHECK(cudaStreamWaitEvent(dev_->comm_stream, compute_ready_, 0));
    scope_.emplace(device_);
  }
  // Closes it: the compute stream waits for everything the collective queued.
  void end_collective() override {
    if (!scope_) return;
    scope_.reset();
    cuda::bind(device_);
    CUDA_CHECK(cudaEventRecord(comm_done_, dev_->comm_stream));
    CUDA_CHECK(cudaStreamWaitEvent(dev_->stream, comm_done_, 0));
  }

  // Publishes our buffer and opens every peer's. Collective.
  void connect(Store& store);

 protected:
  // Copies into the peer's slot on the comm stream, and waits for that copy only: the bytes
  // are there on return.
  void slot_fill(int to, uint32_t index, const void* src, std::size_t len) override {
    if (len == 0) return;  // a token (barrier): nothing to copy
    cuda::bind(device_);
    std::byte* dst = peers_[to].slots + (index % kSlots) * kCudaSegmentBytes;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, len, cudaMemcpyDefault, cuda::stream_for(*dev_)));
    wait_comm();
  }
  // A device pointer: the collectives reduce or copy it with the CUDA backend (on the comm
  // stream, inside the collective's scope).
  const void* slot_view(int from, uint32_t index) override {
    return mine_ + from * part_bytes() + (index % kSlots) * kCudaSegmentBytes;
  }
  // The reduce kernel (or copy) queued by use() must be done before the slot is refilled.
  void slot_read_done() override { wait_comm(); }

 private:
  // Waits for the work queued so far on the stream this thread's collective uses (the comm
  // stream inside a collective), never for the compute stream's backlog.
  void wait_comm() {
    CUDA_CHECK(cudaEventRecord(comm_done_, cuda::stream_for(*dev_)));
    CUDA_CHECK(cudaEventSynchronize(comm_done_));
  }
  static std::size_t part_bytes() { return kSlots * kCudaSegmentBytes; }
  Published read_published(Store& store, const std::string& key, int peer);

  struct Peer {
    std::byte* slots = nullptr;  // the kSlots slots of the link me -> peer, in peer's buffer
    void* opened = nullptr;      // what cudaIpcOpenMemHandle returned (to close), if opened
  };
  std::shared_ptr<void> owner_;  // the mailbox block, for DeferredFree
  bool threads_;                 // every peer is a thread of this process
  int device_;
  cuda::LogicalDevice* dev_ = nullptr;
  cudaEvent_t compute_ready_ = nullptr;         // compute stream -> comm stream, per collective
  cudaEvent_t comm_done_ = nullptr;             // comm stream -> host and compute stream
  std::optional<cuda::CommStreamScope> scope_;  // open between set_context and end_collective
  std::byte* mine_ = nullptr;  // my buffer: the slots of every link that ends at me
  std::vector<Peer> peers_;
  IpcStatus* ipc_ = nullptr;
};

Published CudaIpcTransport::read_published(Store& store, const std::string& key, int peer) {
  std::istringstream in(store.get(key));
  Published p;
  std::string hex;
  in >> p.pid >> p.offset >> p.pointer >> hex;
  DPLAB_CHECK(!in.fail(),
              "cuda_ipc: rank {} found no \"pid offset pointer handle\" under {} "
              "(rank {} published something else)",
              rank(), key, peer);
  from_hex(hex, &p.handle, sizeof(p.handle), peer);
  return p;
}

void CudaIpcTransport::connect(Store& store) {
  const int me = rank(), n = size();
  if (n == 1) return;
  // A handle names a whole cudaMalloc block: export its base, tell peers where we are in it.
  std::size_t offset = 0;
  void* base = cuda_block_base(mine_, &offset);
  cuda::bind(device_);
  cudaIpcMemHandle_t handle;
  CUDA_CHECK(cudaIpcGetMemHandle(&handle, base));
  store.set(fmt::format("buffer/{}", me),
            fmt::format("{} {} {} {}", static_cast<long>(getpid()), offset,
                        reinterpret_cast<std::uintptr_t>(mine_), to_hex(&handle, sizeof(handle))));
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    Published pub = read_published(store, fmt::format("buffer/{}", p), p);
    std::byte* theirs = nullptr;
    if (pub.pid == static_cast<long>(getpid())) {
      // same process (thread ranks): CUDA refuses to open our own handle; the pointer works
      theirs = reinterpret_cast<std::byte*>(pub.pointer);
    } else {
      void* opened = nullptr;
      cudaError_t err = cudaIpcOpenMemHandle(&opened, pub.handle, cudaIpcMemLazyEnablePeerAccess);
      if (err != cudaSuccess) {
        cudaGetLastError();
        throw CudaError(fmt::format(
            "rank {} (cuda:{}): cuda_ipc could not open rank {}'s slot buffer (pid {}): "
            "cudaIpcOpenMemHandle failed: {} ({}); the ranks must see the same GPUs, with peer "
            "access between them when they differ",
            me, device_, p, pub.pid, cudaGetErrorName(err), cudaGetErrorString(err)));
      }
      peers_[p].opened = opened;
      theirs = static_cast<std::byte*>(opened) + pub.offset;
    }
    peers_[p].slots = theirs + me * part_bytes();  // link me -> p: part [me] of p's buffer
  }
}

CudaIpcTransport::~CudaIpcTransport() {
  const int me = rank(), n = size();
  scope_.reset();  // a collective that threw never reached end_collective
  if (cudaEventDestroy(compute_ready_) != cudaSuccess) cudaGetLastError();
  if (cudaEventDestroy(comm_done_) != cudaSuccess) cudaGetLastError();
  // Importer: let go of every peer's buffer, then say so (even where opening failed, so the
  // exporter does not wait for us). A destructor must not throw: errors are only cleared.
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    if (peers_[p].opened != nullptr && cudaIpcCloseMemHandle(peers_[p].opened) != cudaSuccess)
      cudaGetLastError();
    ipc_[p].released_by.fetch_or(uint64_t{1} << me, std::memory_order_acq_rel);
  }
  sweep_deferred();  // our release may have been the last one a same-process buffer awaited
  if (mine_ == nullptr) return;
  // Exporter: wait until every peer has closed our buffer or died, at most kReleaseWait;
  // peers in this process (thread ranks) are not waited for: see DeferredFree.
  const uint64_t all = (n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1) & ~(uint64_t{1} << me);
  const uint64_t same_process = threads_ ? all : 0;
  auto deadline = std::chrono::steady_clock::now() + kReleaseWait;
  uint64_t missing = all;
  for (;;) {
    missing = all & ~ipc_[me].released_by.load(std::memory_order_acquire) & ~same_process;
    for (int p = 0; p < n; ++p)
      if (((missing >> p) & 1) && status(p).pid != 0 && !pid_alive(status(p).pid))
        missing &= ~(uint64_t{1} << p);  // a dead process holds no mapping any more
    if (missing == 0 || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (missing == 0 && same_process != 0) {
    std::lock_guard<std::mutex> lock(g_deferred_mu);
    deferred().push_back({owner_, &ipc_[me], all, device_, mine_});
    mine_ = nullptr;
  }
  if (mine_ == nullptr) {
    sweep_deferred();  // frees it now if the peers in this process are already gone
    return;
  }
  if (missing != 0) {
    // A live peer may still write into it: never hand it to another tensor. Reported, since
    // the memory stays reserved until this process exits.
    std::fprintf(stderr,
                 "dplab: rank %d: cuda_ipc keeps its %zu-byte slot buffer on cuda:%d "
                 "until exit: peers (bitmask %#" PRIx64 ") had not closed it after %lld s\n",
                 me, part_bytes() * n, device_, missing,
                 static_cast<long long>(kReleaseWait.count()));
    return;
  }
  try {
    cuda::cache_free(device_, mine_);
  } catch (const std::exception&) {
    // only if the allocator's table is gone, at exit: the driver frees it with the process
  }
}

}  // namespace

bool cuda_ipc_compiled() { return true; }

std::unique_ptr<Transport> make_cuda_ipc_transport(Store& store, int rank, int size,
                                                   int cuda_device, bool threads, Seconds timeout) {
  DPLAB_CHECK(size <= kMaxIpcRanks, "cuda_ipc: at most {} ranks share GPU buffers, got {}",
              kMaxIpcRanks, size);
  MakeMailbox make = [&](std::shared_ptr<void> owner, void* memory) {
    return std::make_unique<CudaIpcTransport>(std::move(owner), memory, rank, size, timeout,
                                              cuda_device, threads);
  };
  const std::size_t bytes = block_bytes(size);
  std::unique_ptr<MailboxTransport> t = threads ? make_heap_mailbox(store, rank, size, bytes, make)
                                                : make_shm_mailbox(store, rank, size, bytes, make);
  static_cast<CudaIpcTransport&>(*t).connect(store);
  return t;
}

}  // namespace dplab::parallel
