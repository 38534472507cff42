// tensor.h: the Tensor handle. A tensor is a shape, a dtype, a device and a window
// (offset + numel) into a contiguous, row-major Storage shared through std::shared_ptr.
// Views (reshape, flatten, narrow along dim 0, chunk along dim 0) share storage; anything
// that would need strides (transpose, permute) makes a contiguous copy instead, so every
// backend kernel only ever sees contiguous buffers.
// Autograd fields (requires_grad, grad, grad_fn) live here too; see autograd/node.h.
// Read next: autograd/node.h, ops/ops.h.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "framework/error.h"
#include "framework/tensor/device.h"
#include "framework/tensor/dtype.h"
#include "framework/tensor/storage.h"

namespace dplab {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "[2, 3]"
int64_t shape_numel(const Shape& s);

class Node;
class Tensor;
using TensorHook = std::function<Tensor(const Tensor& grad)>;  // may return a replacement
using PostAccumulateHook = std::function<void(Tensor& param)>;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  DType dtype = DType::Float32;

  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;      // accumulated gradient of a leaf
  std::shared_ptr<Node> grad_fn;         // the node that produced this tensor (non-leaf)
  std::weak_ptr<Node> grad_accumulator;  // a leaf's AccumulateGrad node, made on first use
  std::vector<TensorHook> leaf_hooks;
  std::vector<PostAccumulateHook> post_accumulate_hooks;
  bool retains_grad = false;  // non-leaf keeps its .grad (retain_grad())
};

struct TensorOptions {
  DType dtype = DType::Float32;
  Device device{};
  bool requires_grad = false;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
  // A fresh, uninitialised contiguous tensor. Counted in memory_stats(device).
  static Tensor empty(const Shape& shape, TensorOptions opts = {});

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return shape_numel(impl().shape); }
  int64_t nbytes() const { return numel() * static_cast<int64_t>(element_size(dtype())); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  TensorOptions options() const { return {.dtype = dtype(), .device = device()}; }

  // Raw pointer to the first element (device memory for CUDA tensors).
  void* raw_data() const;
  template <typename T>
  T* data() const {
    // uint16_t reads the bits of either 16-bit float (float16 or bfloat16)
    DPLAB_CHECK(dtype() == dtype_of<T>() || (sizeof(T) == 2 && is_low_precision(dtype())),
                "data<{}>(): tensor is {}", dtype_name(dtype_of<T>()), dtype_name(dtype()));
    return static_cast<T*>(raw_data());
  }

  // --- values, for tests and printing (copy to host when needed) ---
  float item() const;  // one element, float32 or int64 converted
  int64_t item_int() const;
  template <typename T>
  std::vector<T> to_vector() const;
  float at(std::initializer_list<int64_t> index) const;  // one element by index

  // --- copies and views ---
  Tensor to(Device d) const;  // same tensor if already there
  Tensor to(DType t) const;   // a cast; differentiable float->float only
  Tensor clone() const;       // differentiable deep copy
  Tensor detach() const;      // shares storage, cut from the graph
  Tensor contiguous_copy_on(Device d) const;
  Tensor reshape(const Shape& s) const;  // one -1 allowed; a view
  Tensor view(const Shape& s) const { return reshape(s); }
  Tensor flatten(int64_t start = 0, int64_t end = -1) const;
  Tensor narrow(int64_t start, int64_t length) const;  // rows [start, start+length) of dim 0
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor t() const { return transpose(0, 1); }

  // --- autograd ---
  bool requires_grad() const { return impl().requires_grad; }
  Tensor& requires_grad_(bool on = true);
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  Tensor grad() const { return Tensor(impl().grad); }
  void set_grad(const Tensor& g);  // checks shape/device
  const std::shared_ptr<Node>& grad_fn() const { return impl().grad_fn; }
  void backward(const Tensor& grad = {}, bool retain_graph = false) const;
  void retain_grad();
  // Runs when this tensor's gradient is computed; may return a replacement (or {} to keep).
  void register_hook(TensorHook hook);
  // Leaves only: runs once per backward, after the gradient has been accumulated into .grad.
  void register_post_accumulate_grad_hook(PostAccumulateHook hook);

  // --- in-place updates: for optimizers and no_grad code; never recorded by autograd ---
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& copy_(const Tensor& src);  // same shape; any devices
  Tensor& add_(const Tensor& other, float alpha = 1.0f);
  Tensor& mul_(float s);

  // --- arithmetic sugar, see ops/ops.h for the full list ---
  Tensor sum() const;
  Tensor mean() const;
  Tensor matmul(const Tensor& other) const;
  Tensor relu() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor pow(float p) const;

  TensorImpl& impl() const {
    DPLAB_CHECK(impl_ != nullptr, "use of an undefined Tensor");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, float s);
Tensor operator-(const Tensor& a, float s);
Tensor operator*(const Tensor& a, float s);
Tensor operator/(const Tensor& a, float s);
Tensor operator*(float s, const Tensor& a);
Tensor operator+(float s, const Tensor& a);
Tensor operator-(float s, const Tensor& a);
Tensor operator-(const Tensor& a);

// A short description with values, elided past 6 per dim:
// "tensor([[1.0000, 2.0000], [3.0000, 4.0000]], shape=[2, 2], device=cpu:0)"
std::string to_string(const Tensor& t);

}  // namespace dplab

template <>
struct fmt::formatter<dplab::Tensor> : fmt::formatter<std::string_view> {
  auto format(const dplab::Tensor& t, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(dplab::to_string(t), ctx);
  }
};
