// state_dict.h: named tensors in registration order, PyTorch's state_dict.
// Module::state_dict() fills one ("fc1.weight", "bn.running_mean", ...), an optimizer adds
// its state, and a checkpoint (io/safetensors.h) writes it to disk and back.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "framework/tensor/tensor.h"

namespace dplab {

class StateDict {
 public:
  void insert(const std::string& name, const Tensor& t);  // replaces an existing name
  bool contains(const std::string& name) const;
  const Tensor& at(const std::string& name) const;  // throws Error naming the key
  std::vector<std::string> keys() const;
  size_t size() const { return items_.size(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::pair<std::string, Tensor>> items_;
};

// String metadata stored beside the tensors (safetensors' "__metadata__"): epoch, step,
// optimizer hyper-parameters.
using Metadata = std::map<std::string, std::string>;

}  // namespace dplab
