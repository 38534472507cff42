// module.cpp: nn::Module (see module.h). Everything recursive is one pre-order walk over the
// module tree (this module's own tensors, then each child's, in registration order), which
// is exactly the order of PyTorch's named_parameters() and state_dict(), so keys match.
// Moving (to) and copying (clone_to, load_state_dict) never go through autograd.
// Read next: layers.h.
#include "framework/nn/module.h"

#include <fmt/format.h>

#include <functional>
#include <set>

#include "framework/autograd/grad_mode.h"
#include "framework/nn/init.h"

namespace dplab::nn {

namespace {

std::string join_name(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// Pre-order walk: f(prefix, module) for this module, then its children, depth first.
void walk(const Module& m, const std::string& prefix,
          const std::function<void(const std::string&, const Module&)>& f) {
  f(prefix, m);
  for (const auto& [name, child] : const_cast<Module&>(m).own_children())
    walk(*child, join_name(prefix, name), f);
}

// Every parameter then every buffer of each module, module by module: state_dict's order.
std::vector<std::pair<std::string, Tensor>> named_tensors(const Module& root) {
  std::vector<std::pair<std::string, Tensor>> out;
  walk(root, "", [&](const std::string& prefix, const Module& m) {
    auto& mm = const_cast<Module&>(m);
    for (const auto& [n, t] : mm.own_parameters()) out.emplace_back(join_name(prefix, n), t);
    for (const auto& [n, t] : mm.own_buffers()) out.emplace_back(join_name(prefix, n), t);
  });
  return out;
}

// Rebinds t's storage to a copy on d, in place: every handle to this TensorImpl (the
// layer's `weight` member, an optimizer's parameter list, the module's registry) sees the
// move. This is libtorch's set_data(); the old storage is freed when the last view dies.
void move_in_place(Tensor& t, Device d) {
  TensorImpl& impl = t.impl();
  if (t.device() != d) {
    Tensor moved = t.contiguous_copy_on(d);
    impl.storage = moved.impl().storage;
    impl.offset = moved.impl().offset;
  }
  if (impl.grad && Tensor(impl.grad).device() != d)
    impl.grad = Tensor(impl.grad).contiguous_copy_on(d).impl_ptr();
}

std::string join_list(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// Names are single path components, unique among a module's parameters, buffers, children.
void check_new_name(Module& m, const std::string& name, const char* what) {
  DPLAB_CHECK(!name.empty() && name.find('.') == std::string::npos,
              "{}: {}: expected a non-empty name without '.', got \"{}\"", m.name(), what, name);
  auto taken = [&](const auto& list) {
    for (const auto& [n, v] : list)
      if (n == name) return true;
    return false;
  };
  DPLAB_CHECK(!taken(m.own_parameters()) && !taken(m.own_buffers()) && !taken(m.own_children()),
              "{}: {}: the name \"{}\" is already used by a parameter, buffer or child", m.name(),
              what, name);
}

}  // namespace

Tensor Module::forward(const Tensor&) {
  DPLAB_FAIL("{}: forward(x) is not implemented; override forward() in the module", name());
}

void Module::register_child(const std::string& name, std::shared_ptr<Module> m) {
  DPLAB_CHECK(m != nullptr, "{}: register_module(\"{}\"): the module is null", this->name(), name);
  DPLAB_CHECK(m.get() != this, "{}: register_module(\"{}\"): a module cannot be its own child",
              this->name(), name);
  check_new_name(*this, name, "register_module");
  children_.emplace_back(name, std::move(m));
}

Tensor& Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  DPLAB_CHECK(t.defined(), "{}: register_parameter(\"{}\"): the tensor is undefined", this->name(),
              name);
  check_new_name(*this, name, "register_parameter");
  if (!t.is_leaf()) t = t.detach();  // a parameter is a leaf: the graph that made it is cut
  t.requires_grad_(requires_grad);
  params_.emplace_back(name, std::move(t));
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t) {
  DPLAB_CHECK(t.defined(), "{}: register_buffer(\"{}\"): the tensor is undefined", this->name(),
              name);
  check_new_name(*this, name, "register_buffer");
  buffers_.emplace_back(name, std::move(t));
  return buffers_.back().second;
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::set<const TensorImpl*> seen;  // a tied weight is one parameter, listed once
  walk(*this, "", [&](const std::string& prefix, const Module& m) {
    if (!recurse && &m != this) return;
    for (const auto& [n, t] : m.params_)
      if (seen.insert(t.impl_ptr().get()).second) out.emplace_back(join_name(prefix, n), t);
  });
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  walk(*this, "", [&](const std::string& prefix, const Module& m) {
    if (!recurse && &m != this) return;
    for (const auto& [n, t] : m.buffers_) out.emplace_back(join_name(prefix, n), t);
  });
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [n, c] : children_) out.push_back(c);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
  return children_;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules() {
  // The root may live on the stack: then hand out a non-owning pointer (aliasing
  // constructor with an empty owner) instead of throwing bad_weak_ptr.
  std::shared_ptr<Module> self = weak_from_this().lock();
  if (!self) self = std::shared_ptr<Module>(std::shared_ptr<Module>{}, this);
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out{{"", self}};
  std::function<void(const std::string&, const Module&)> add =
      [&](const std::string& prefix, const Module& m) {
    for (const auto& [n, c] : m.children_) {
      out.emplace_back(join_name(prefix, n), c);
      add(join_name(prefix, n), *c);
    }
  };
  add("", *this);
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::to(Device d) {
  for (auto& [n, t] : params_) move_in_place(t, d);
  for (auto& [n, t] : buffers_) move_in_place(t, d);
  for (auto& [n, c] : children_) c->to(d);
}

void Module::zero_grad(bool set_to_none) {
  for (Tensor& p : parameters()) {
    if (set_to_none) p.set_grad({});
    else if (Tensor g = p.grad(); g.defined()) g.zero_();
  }
}

StateDict Module::state_dict() const {
  StateDict sd;
  // detach(): the dict shares storage with the module (no copy) but carries no autograd.
  for (const auto& [n, t] : named_tensors(*this)) sd.insert(n, t.detach());
  return sd;
}

void Module::load_state_dict(const StateDict& sd, bool strict) {
  auto own = named_tensors(*this);
  std::vector<std::string> missing, unexpected, mismatched;
  std::set<std::string> own_names;
  for (const auto& [n, t] : own) {
    own_names.insert(n);
    if (!sd.contains(n)) {
      missing.push_back(n);
      continue;
    }
    const Tensor& src = sd.at(n);
    if (src.shape() != t.shape() || src.dtype() != t.dtype())
      mismatched.push_back(fmt::format("{} (expected {} {}, got {} {})", n, shape_str(t.shape()),
                                       dtype_name(t.dtype()), shape_str(src.shape()),
                                       dtype_name(src.dtype())));
  }
  for (const auto& k : sd.keys())
    if (!own_names.count(k)) unexpected.push_back(k);

  // As in PyTorch, strict=false forgives missing and unexpected keys but never a tensor
  // of the wrong shape: that one could not be loaded at all. Checked before any copy, so
  // a failed load leaves the module as it was.
  const bool bad = !mismatched.empty() || (strict && (!missing.empty() || !unexpected.empty()));
  if (bad) {
    std::string msg =
        fmt::format("{}: load_state_dict{} failed:", name(), strict ? "" : "(strict=false)");
    if (strict && !missing.empty()) msg += fmt::format("\n  missing keys: {}", join_list(missing));
    if (strict && !unexpected.empty())
      msg += fmt::format("\n  unexpected keys: {}", join_list(unexpected));
    if (!mismatched.empty())
      msg += fmt::format("\n  wrongly shaped keys: {}", join_list(mismatched));
    DPLAB_FAIL("{}", msg);
  }
  NoGradGuard no_grad;
  for (auto& [n, t] : own)
    if (sd.contains(n)) t.copy_(sd.at(n));
}

std::shared_ptr<Module> Module::make_empty_copy() const {
  DPLAB_FAIL("{}: make_empty_copy() is not implemented; modules used with clone_to() or "
             "DataParallel must return a new instance with the same configuration",
             name());
}

std::shared_ptr<Module> Module::clone_to(Device d) const {
  std::shared_ptr<Module> copy;
  {
    init::CloneScope scope(d);  // layers allocate on d and draw no random numbers
    copy = make_empty_copy();
  }
  DPLAB_CHECK(copy != nullptr, "{}: make_empty_copy() returned null", name());
  copy->to(d);  // for tensors a custom module made outside init::new_tensor

  auto src = named_tensors(*this);
  auto dst = named_tensors(*copy);
  auto keys = [](const auto& list) {
    std::vector<std::string> k;
    for (const auto& [n, t] : list) k.push_back(fmt::format("{} {}", n, shape_str(t.shape())));
    return k;
  };
  DPLAB_CHECK(keys(src) == keys(dst),
              "{}: make_empty_copy() built a module of another structure: expected [{}], got [{}]",
              name(), join_list(keys(src)), join_list(keys(dst)));
  {
    NoGradGuard no_grad;
    for (size_t i = 0; i < src.size(); ++i) dst[i].second.copy_(src[i].second);
  }
  // Same requires_grad on each parameter and the same train/eval flag on each module.
  std::vector<const Module*> from;
  std::vector<Module*> to;
  walk(*this, "", [&](const std::string&, const Module& m) { from.push_back(&m); });
  walk(*copy, "",
       [&](const std::string&, const Module& m) { to.push_back(const_cast<Module*>(&m)); });
  for (size_t i = 0; i < from.size() && i < to.size(); ++i) {
    to[i]->training_ = from[i]->training_;
    for (size_t k = 0; k < from[i]->params_.size() && k < to[i]->params_.size(); ++k)
      to[i]->params_[k].second.requires_grad_(from[i]->params_[k].second.requires_grad());
  }
  return copy;
}

Tensor& Module::parameter(const std::string& own_name) {
  for (auto& [n, t] : params_)
    if (n == own_name) return t;
  std::vector<std::string> names;
  for (auto& [n, t] : params_) names.push_back(n);
  DPLAB_FAIL("{}: no parameter \"{}\" (it has: {})", name(), own_name, join_list(names));
}

Tensor& Module::buffer(const std::string& own_name) {
  for (auto& [n, t] : buffers_)
    if (n == own_name) return t;
  std::vector<std::string> names;
  for (auto& [n, t] : buffers_) names.push_back(n);
  DPLAB_FAIL("{}: no buffer \"{}\" (it has: {})", name(), own_name, join_list(names));
}

}  // namespace dplab::nn
