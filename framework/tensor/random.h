// random.h: a seedable generator that gives the same numbers on every platform.
// std::normal_distribution is implementation-defined, so dplab draws its own:
// splitmix64 seeds xoshiro256**, uniforms take the top 24 bits, normals use Box-Muller.
// Random tensors are drawn on the host and copied to their device, so CPU and CUDA
// runs with one seed see the same values.
#pragma once
#include <cstdint>
#include <mutex>

namespace dplab {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) { manual_seed(seed); }
  void manual_seed(uint64_t seed);
  uint64_t seed() const { return seed_; }
  uint64_t next_u64();
  float uniform();                             // [0, 1)
  float normal();                              // mean 0, std 1
  int64_t randint(int64_t low, int64_t high);  // [low, high)

 private:
  uint64_t seed_ = 0;
  uint64_t s_[4] = {};
  bool has_spare_ = false;
  float spare_ = 0;
};

// The generator factories use when none is passed; manual_seed reseeds it.
// Factories hold default_generator_mutex() while drawing, so threads may share it.
Generator& default_generator();
std::mutex& default_generator_mutex();
void manual_seed(uint64_t seed);

}  // namespace dplab
