#include "framework/nn/state_dict.h"

namespace dplab {

void StateDict::insert(const std::string& name, const Tensor& t) {
  for (auto& [k, v] : items_) {
    if (k == name) {
      v = t;
      return;
    }
  }
  items_.emplace_back(name, t);
}

bool StateDict::contains(const std::string& name) const {
  for (const auto& [k, v] : items_)
    if (k == name) return true;
  return false;
}

const Tensor& StateDict::at(const std::string& name) const {
  for (const auto& [k, v] : items_)
    if (k == name) return v;
  DPLAB_FAIL("state dict has no key \"{}\" (it has {} keys)", name, items_.size());
}

std::vector<std::string> StateDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : items_) out.push_back(k);
  return out;
}

}  // namespace dplab
