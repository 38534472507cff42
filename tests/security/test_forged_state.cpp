// test_forged_state.cpp: what a rank does with state it did not make. A shared-block record
// forged into the store (pointing at a regular file, a short file, a FIFO, an unsealed memfd,
// a path) makes no rank open, map or write anything, and its message echoes none of the
// file; a rank whose rank 0 has gone says so. A checkpoint refused for any part leaves the
// model, the optimizer and the scaler as they were.
// Read next: parallel/transport/shm_transport.cpp, framework/io/checkpoint.cpp.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "framework/amp/grad_scaler.h"
#include "framework/dplab.h"
#include "framework/io/checkpoint.h"
#include "framework/io/safetensors.h"
#include "framework/nn/layers.h"
#include "framework/optim/sgd.h"
#include "parallel/rendezvous/hash_store.h"
#include "parallel/rendezvous/prefix_store.h"
#include "parallel/transport/shm_transport.h"

using namespace dplab;
namespace fs = std::filesystem;
namespace par = dplab::parallel;

namespace {

std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

const std::size_t kBlock = par::mailbox_bytes(2, par::kSegmentBytes);

// Rank 1 of 2 meets a store whose shared-block record is `record`; its error ("" if none).
std::string rank1_with_record(const std::string& record) {
  auto store = std::make_shared<par::HashStore>(par::Seconds(1.0));
  store->set("pg/shm_block", record);
  par::PrefixStore group("pg", store);  // the group's view, as create_process_group makes it
  try {
    par::make_shm_transport(group, 1, 2, par::Seconds(1.0), par::kSegmentBytes);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A record that names fd in this process, with its true device and inode (a forger who
// knows them: the strongest forgery short of a real dplab block).
std::string record_for(int fd) {
  struct stat st {};
  fstat(fd, &st);
  return fmt::format("{} {} {} {} {}", getpid(), fd, st.st_dev, st.st_ino, boot_id());
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("shm: a forged shared-block record makes no rank open, map or write a file") {
  const fs::path dir = fs::temp_directory_path() / fmt::format("dplab_forged_{}", getpid());
  fs::create_directories(dir);
  // a file of exactly the block's size (so only its kind gives it away), one of 9 bytes
  // (which once killed rank 1 with SIGBUS), both full of a secret that must not be echoed
  std::string secret;
  while (secret.size() < kBlock) secret += "SECRET-LINE-OF-A-STRANGERS-FILE\n";
  secret.resize(kBlock);
  for (const auto& [name, content] :
       {std::pair<std::string, std::string>{"big", secret}, {"short", "SECRET-9!"}}) {
    const fs::path p = dir / name;
    std::ofstream(p, std::ios::binary) << content;
    const auto before = fs::last_write_time(p);
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    const std::string err = rank1_with_record(record_for(fd));
    ::close(fd);
    CAPTURE(err);
    CHECK(err.find("rank 1: the shared block named in the store") != std::string::npos);
    CHECK(err.find("is not rank 0's") != std::string::npos);
    CHECK(err.find(name == "big" ? "it is not a memfd of dplab's" : "it holds 9 bytes") !=
          std::string::npos);
    CHECK(err.find("SECRET") == std::string::npos);
    CHECK(read_all(p) == content);
    CHECK(fs::last_write_time(p) == before);
  }
  // a FIFO: not a regular file, refused before any open (which could block)
  const fs::path fifo = dir / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  int ffd = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  REQUIRE(ffd >= 0);
  CHECK(rank1_with_record(record_for(ffd)).find("it is not a regular file") != std::string::npos);
  ::close(ffd);
  // a memfd with dplab's name and the right size, but not sealed as rank 0 seals its block
  int mfd = memfd_create("dplab-mailbox", MFD_CLOEXEC);
  REQUIRE(ftruncate(mfd, static_cast<off_t>(kBlock)) == 0);
  CHECK(rank1_with_record(record_for(mfd)).find("or is not sealed as rank 0 seals its block") !=
        std::string::npos);
  ::close(mfd);
  // a path where the record should be: nothing is opened
  CHECK(rank1_with_record("/etc/passwd")
            .find("the store's shared-block record is malformed "
                  "(expected \"pid fd dev inode boot_id\"); refusing "
                  "to open anything") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("shm: a rank whose rank 0 has gone says that rank 0 has gone") {
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);  // a pid that ran here and is gone
  const std::string err = rank1_with_record(fmt::format("{} 5 1 1 {}", child, boot_id()));
  CHECK_MESSAGE(err.find(fmt::format("rank 1: rank 0 (pid {}) has exited before this rank could "
                                     "map its shared block; rank 0's own error says why",
                                     child)) != std::string::npos,
                err);
  CHECK(err.find("/proc/") == std::string::npos);
  // rank 0 alive (this process) but its descriptor closed: it gave up waiting
  const std::string closed =
      rank1_with_record(fmt::format("{} 987654 1 1 {}", getpid(), boot_id()));
  CHECK_MESSAGE(closed.find("closed its shared block before this rank mapped it: rank 0 gave up "
                            "waiting") != std::string::npos,
                closed);
  CHECK(rank1_with_record(fmt::format("{} 5 1 1 another-machine", getpid()))
            .find("rank 0 runs on another machine") != std::string::npos);
}

namespace {

struct Trained {
  std::shared_ptr<nn::Linear> model = std::make_shared<nn::Linear>(3, 2);
  optim::SGD opt{model->parameters(), {.lr = 0.1, .momentum = 0.9}};
  amp::GradScaler scaler{{.init_scale = 1024.0, .growth_interval = 3}};
  void step(float seed) {
    opt.zero_grad();
    Tensor x = full({4, 3}, seed);
    sum(model->forward(x)).backward();
    scaler.step(opt);
    scaler.update();
  }
  std::vector<float> weights() const { return model->weight.to_vector<float>(); }
  std::vector<float> momentum() const {
    StateDict t;
    Metadata m;
    opt.state_dict(t, m);
    return t.at("state.0.momentum_buffer").to_vector<float>();
  }
};

}  // namespace

TEST_CASE("load_checkpoint: a file refused for any part leaves model, optimizer and scaler as they "
          "were") {
  manual_seed(3);
  Trained saved;
  saved.step(1.0f);
  saved.step(2.0f);
  const fs::path path =
      fs::temp_directory_path() / fmt::format("dplab_refused_{}.safetensors", getpid());
  Metadata extra{{"epoch", "2"}};
  saved.scaler.state_dict(extra);
  save_checkpoint(path.string(), *saved.model, &saved.opt, extra);
  Loaded file = load_safetensors(path.string());

  struct Edit {
    std::string key, value, message;
  };
  for (const Edit& e : std::vector<Edit>{
           {"optim.momentum", "nan", "\"optim.momentum\" should be a finite number, got \"nan\""},
           {"optim.type", "Adam", "this optimizer is SGD, the state dict is from Adam"},
           {"scaler.scale", "inf", "scale must be a finite value in (0, 3.40282e+38]"},
           {"scaler.growth_factor", "0", "growth_factor must be a finite value > 1, got 0"},
           {"scaler.growth_tracker", "7",
            "growth_tracker must lie in [0, growth_interval = 3), got 7"}}) {
    CAPTURE(e.key);
    Metadata meta = file.metadata;
    meta[e.key] = e.value;
    const fs::path bad = path.string() + ".bad";
    save_safetensors(bad.string(), file.tensors, meta);
    manual_seed(4);
    Trained fresh;
    fresh.step(3.0f);  // some state of its own to keep
    const auto w = fresh.weights(), m = fresh.momentum();
    const double s = fresh.scaler.get_scale();
    const int64_t tracker = fresh.scaler.growth_tracker();
    CHECK_THROWS_WITH_AS(
        load_checkpoint(bad.string(), *fresh.model, &fresh.opt, Device("cpu"), &fresh.scaler),
        doctest::Contains(e.message.c_str()), Error);
    CHECK_THROWS_WITH_AS(
        load_checkpoint(bad.string(), *fresh.model, &fresh.opt, Device("cpu"), &fresh.scaler),
        doctest::Contains("; nothing was loaded"), Error);
    CHECK(fresh.weights() == w);
    CHECK(fresh.momentum() == m);
    CHECK(fresh.scaler.get_scale() == s);
    CHECK(fresh.scaler.growth_tracker() == tracker);
    fs::remove(bad);
  }
  // and the unedited file loads all three
  Trained fresh;
  load_checkpoint(path.string(), *fresh.model, &fresh.opt, Device("cpu"), &fresh.scaler);
  CHECK(fresh.weights() == saved.weights());
  CHECK(fresh.momentum() == saved.momentum());
  CHECK(fresh.scaler.get_scale() == saved.scaler.get_scale());
  CHECK(fresh.scaler.growth_tracker() == saved.scaler.growth_tracker());
  fs::remove(path);
}
