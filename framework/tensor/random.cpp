// random.cpp: xoshiro256** seeded by splitmix64; Box-Muller for normals.
#include "framework/tensor/random.h"

#include <cmath>

namespace dplab {
namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

void Generator::manual_seed(uint64_t seed) {
  seed_ = seed;
  uint64_t x = seed;
  for (auto& s : s_) s = splitmix64(x);
  has_spare_ = false;
}

uint64_t Generator::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

// 24 random bits / 2^24: exactly representable floats in [0, 1).
float Generator::uniform() { return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f); }

float Generator::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  // Box-Muller in double, so the result does not depend on float rounding of log/cos.
  double u1 = (static_cast<double>(next_u64() >> 11) + 1.0) * (1.0 / 9007199254740992.0);  // (0,1]
  double u2 = static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0);
  double r = std::sqrt(-2.0 * std::log(u1));
  double theta = 2.0 * M_PI * u2;
  spare_ = static_cast<float>(r * std::sin(theta));
  has_spare_ = true;
  return static_cast<float>(r * std::cos(theta));
}

int64_t Generator::randint(int64_t low, int64_t high) {
  uint64_t span = static_cast<uint64_t>(high - low);
  // rejection sampling: no modulo bias
  uint64_t limit = UINT64_MAX - UINT64_MAX % span;
  uint64_t v;
  do {
    v = next_u64();
  } while (v >= limit);
  return low + static_cast<int64_t>(v % span);
}

Generator& default_generator() {
  static Generator g(0);
  return g;
}

std::mutex& default_generator_mutex() {
  static std::mutex m;
  return m;
}

void manual_seed(uint64_t seed) {
  std::lock_guard lock(default_generator_mutex());
  default_generator().manual_seed(seed);
}

}  // namespace dplab
