// layers_container.cpp: Sequential and describe(), the tree printer.
// Sequential names its children "0", "1", ... as torch.nn.Sequential does, so a model
// built as Sequential(Linear, ReLU, Linear) has the keys 0.weight, 0.bias, 2.weight, 2.bias.
// Read next: models/mlp.h (a Sequential subclass).
#include <string>

#include "framework/nn/layers.h"

namespace dplab::nn {

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& m : modules) push_back(m);
}

Sequential::Sequential(const std::vector<std::shared_ptr<Module>>& modules) {
  for (const auto& m : modules) push_back(m);
}

void Sequential::push_back(std::shared_ptr<Module> m) {
  register_module(std::to_string(size()), std::move(m));
}

std::shared_ptr<Module> Sequential::operator[](size_t i) const {
  DPLAB_CHECK(i < size(), "Sequential: index {} out of range for {} modules", i, size());
  return children()[i];
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (auto& [n, m] : own_children()) y = m->forward(y);
  return y;
}

std::shared_ptr<Module> Sequential::make_empty_copy() const {
  auto copy = std::make_shared<Sequential>();
  for (const auto& m : children()) copy->push_back(m->make_empty_copy());
  return copy;
}

namespace {
// PyTorch's _addindent: every line after the first is indented by two more spaces.
std::string indent_tail(const std::string& s) {
  std::string out;
  for (char c : s) {
    out += c;
    if (c == '\n') out += "  ";
  }
  return out;
}
}  // namespace

std::string describe(const Module& m) {
  auto children = m.named_children();
  if (children.empty()) return m.name();
  std::string s = m.name() + "(\n";
  for (const auto& [n, c] : children) s += "  (" + n + "): " + indent_tail(describe(*c)) + "\n";
  return s + ")";
}

}  // namespace dplab::nn
