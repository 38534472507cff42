// module.h: nn::Module, the libtorch C++ frontend's way without its macros.
//
//   struct Net : nn::Module {
//     std::shared_ptr<nn::Linear> fc1, fc2;
//     Net() { fc1 = register_module("fc1", std::make_shared<nn::Linear>(784, 10)); ... }
//     Tensor forward(const Tensor& x) override { return fc2->forward(relu(fc1->forward(x))); }
//   };
//
// parameters() walks children recursively in registration order, names are dotted
// ("fc1.weight"), Sequential children are "0", "1", ... so state dicts line up with
// PyTorch's and a safetensors file moves between the two.
// Read next: layers.h, then optim/optimizer.h.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/nn/state_dict.h"
#include "framework/tensor/tensor.h"

namespace dplab::nn {

class Module : public std::enable_shared_from_this<Module> {
 public:
  virtual ~Module() = default;

  // The usual single-input forward. Modules with other signatures add their own.
  virtual Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  Tensor& register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  Tensor& register_buffer(const std::string& name, Tensor t);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    register_child(name, m);
    return m;
  }

  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  // Every module of the tree, this one first ("" names the root).
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules();

  void train(bool on = true);  // recursive
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Moves parameters and buffers (and their .grad) to d, in place: the Tensor objects the
  // module holds are rebound, so re-fetch parameters() for an optimizer afterwards.
  void to(Device d);
  // Sets every parameter's .grad to undefined (PyTorch's set_to_none), or with false zeroes
  // it in place (keeps views, e.g. DDP's gradient_as_bucket_view).
  void zero_grad(bool set_to_none = true);

  // Parameters then buffers, dotted names in registration order (PyTorch's layout).
  StateDict state_dict() const;
  // strict: missing, unexpected or wrongly shaped keys give ONE error listing them all.
  // Values are copied into the existing tensors (whatever device the module is on).
  void load_state_dict(const StateDict& sd, bool strict = true);

  // A deep copy on device d (DataParallel's replicas): same structure, copied tensors.
  std::shared_ptr<Module> clone_to(Device d) const;
  // Subclasses implement: a new instance with the same configuration; clone_to() then
  // copies the tensors into it. Default: error saying the module must implement it.
  virtual std::shared_ptr<Module> make_empty_copy() const;

  virtual std::string name() const { return "Module"; }

  // Module surgery (parallel::convert_sync_batchnorm) swaps a child in own_children() and
  // then calls this. A module whose forward calls that child through a typed member of its
  // own (models::ResNet's bn1) overrides it: point the member at `replacement` and return
  // true. Rebinding a child to itself is a no-op that answers "can you rebind it?".
  virtual bool rebind_child(const std::string& name, const std::shared_ptr<Module>& replacement) {
    (void)name, (void)replacement;
    return false;
  }

  // Direct access for code that rebinds tensors (replication, SyncBN conversion, DDP).
  std::vector<std::pair<std::string, Tensor>>& own_parameters() { return params_; }
  std::vector<std::pair<std::string, Tensor>>& own_buffers() { return buffers_; }
  std::vector<std::pair<std::string, std::shared_ptr<Module>>>& own_children() { return children_; }
  Tensor& parameter(const std::string& own_name);  // this module's own, by name
  Tensor& buffer(const std::string& own_name);

 protected:
  void register_child(const std::string& name, std::shared_ptr<Module> m);
  bool training_ = true;

 private:
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

}  // namespace dplab::nn
