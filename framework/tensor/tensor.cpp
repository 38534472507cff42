// tensor.cpp: the Tensor handle's own methods: construction, element access, copies
// between devices, in-place updates, and the autograd entry points. Everything that is an
// op (reshape, arithmetic, ...) forwards to framework/ops/.
#include "framework/tensor/tensor.h"

#include <cstring>

#include "framework/autograd/engine.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/node.h"
#include "framework/backend/backend.h"
#include "framework/ops/ops.h"

namespace dplab {

std::string shape_str(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Tensor Tensor::empty(const Shape& shape, TensorOptions opts) {
  for (int64_t d : shape)
    DPLAB_CHECK(d >= 0, "empty: negative dimension in shape {}", shape_str(shape));
  DPLAB_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), "tensors have at most {} dims, got {}",
              kMaxDims, shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->dtype = opts.dtype;
  impl->storage = std::make_shared<Storage>(
      opts.device, static_cast<size_t>(shape_numel(shape)) * element_size(opts.dtype));
  Tensor t(std::move(impl));
  if (opts.requires_grad) t.requires_grad_(true);
  return t;
}

int64_t Tensor::size(int64_t d) const {
  int64_t n = dim();
  int64_t k = d < 0 ? d + n : d;
  DPLAB_CHECK(k >= 0 && k < n, "size({}): tensor of shape {} has {} dims", d, shape_str(shape()),
              n);
  return impl().shape[k];
}

void* Tensor::raw_data() const {
  auto* base = static_cast<char*>(impl().storage->data());
  return base == nullptr ? nullptr
                         : base + impl().offset * static_cast<int64_t>(element_size(dtype()));
}

// ---- copies between devices ----

namespace {
// Copies nbytes from src to dst, whatever devices they are on.
void copy_bytes(Device dst_dev, void* dst, Device src_dev, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  if (dst_dev.kind == src_dev.kind) {
    backend_for(dst_dev).copy_device(dst_dev, dst, src_dev, src, nbytes);
  } else if (src_dev.is_cpu()) {
    backend_for(dst_dev).copy_from_host(dst_dev, dst, src, nbytes);
  } else {
    backend_for(src_dev).copy_to_host(src_dev, dst, src, nbytes);
  }
}
}  // namespace

Tensor Tensor::contiguous_copy_on(Device d) const {
  Tensor out = Tensor::empty(shape(), {.dtype = dtype(), .device = d});
  copy_bytes(d, out.raw_data(), device(), raw_data(), static_cast<size_t>(nbytes()));
  return out;
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  DPLAB_CHECK(dtype() == dtype_of<T>() || (sizeof(T) == 2 && is_low_precision(dtype())),
              "to_vector<{}>: tensor is {}", dtype_name(dtype_of<T>()), dtype_name(dtype()));
  std::vector<T> v(static_cast<size_t>(numel()));
  copy_bytes(Device("cpu"), v.data(), device(), raw_data(), static_cast<size_t>(nbytes()));
  return v;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<uint16_t> Tensor::to_vector<uint16_t>() const;  // float16 / bfloat16 bits

namespace {
double read_element(const Tensor& t, int64_t flat) {
  if (is_low_precision(t.dtype()))
    return read_element(t.detach().to(DType::Float32), flat);  // the backend converts
  if (t.dtype() == DType::Float32) {
    float v;
    copy_bytes(Device("cpu"), &v, t.device(), t.data<float>() + flat, sizeof v);
    return v;
  }
  int64_t v;
  copy_bytes(Device("cpu"), &v, t.device(), t.data<int64_t>() + flat, sizeof v);
  return static_cast<double>(v);
}
}  // namespace

float Tensor::item() const {
  DPLAB_CHECK(numel() == 1, "item(): expected a tensor with one element, got shape {}",
              shape_str(shape()));
  return static_cast<float>(read_element(*this, 0));
}

int64_t Tensor::item_int() const {
  DPLAB_CHECK(numel() == 1, "item_int(): expected a tensor with one element, got shape {}",
              shape_str(shape()));
  return static_cast<int64_t>(read_element(*this, 0));
}

float Tensor::at(std::initializer_list<int64_t> index) const {
  DPLAB_CHECK(static_cast<int64_t>(index.size()) == dim(),
              "at(): {} indices for a tensor of shape {}", index.size(), shape_str(shape()));
  int64_t flat = 0, k = 0;
  for (int64_t i : index) {
    DPLAB_CHECK(i >= 0 && i < shape()[k], "at(): index {} out of range for dim {} of shape {}", i,
                k, shape_str(shape()));
    flat = flat * shape()[k] + i;
    ++k;
  }
  return static_cast<float>(read_element(*this, flat));
}

Tensor Tensor::to(Device d) const { return d == device() ? *this : to_device(*this, d); }

Tensor Tensor::to(DType t) const { return t == dtype() ? *this : dplab::cast(*this, t); }

Tensor Tensor::clone() const { return dplab::clone(*this); }

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->offset = impl_->offset;
  impl->shape = impl_->shape;
  impl->dtype = impl_->dtype;
  return Tensor(std::move(impl));
}

// ---- views and shape ops forward to ops/shape.cpp ----
Tensor Tensor::reshape(const Shape& s) const { return dplab::reshape(*this, s); }
Tensor Tensor::flatten(int64_t start, int64_t end) const {
  int64_t n = dim();
  if (n == 0) return reshape({1});
  int64_t s = start < 0 ? start + n : start, e = end < 0 ? end + n : end;
  DPLAB_CHECK(s >= 0 && e < n && s <= e, "flatten({}, {}): bad dims for shape {}", start, end,
              shape_str(shape()));
  Shape out(shape().begin(), shape().begin() + s);
  int64_t mid = 1;
  for (int64_t i = s; i <= e; ++i) mid *= shape()[i];
  out.push_back(mid);
  out.insert(out.end(), shape().begin() + e + 1, shape().end());
  return reshape(out);
}
Tensor Tensor::narrow(int64_t start, int64_t length) const {
  return dplab::narrow(*this, 0, start, length);
}
std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t d) const {
  return dplab::chunk(*this, chunks, d);
}
std::vector<Tensor> Tensor::split(int64_t size, int64_t d) const {
  return dplab::split(*this, size, d);
}
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return dplab::transpose(*this, d0, d1); }
Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  return dplab::permute(*this, dims);
}

// ---- autograd ----

Tensor& Tensor::requires_grad_(bool on) {
  DPLAB_CHECK(is_leaf(), "requires_grad_(): only leaf tensors can change requires_grad; "
                         "use detach() to make a leaf");
  DPLAB_CHECK(!on || is_floating(dtype()),
              "requires_grad_(): only floating tensors (float32, "
              "float16, bfloat16) can require gradients, this one is {}",
              dtype_name(dtype()));
  impl().requires_grad = on;
  return *this;
}

void Tensor::set_grad(const Tensor& g) {
  if (!g.defined()) {
    impl().grad.reset();
    return;
  }
  DPLAB_CHECK(g.shape() == shape() && g.device() == device(),
              "set_grad: gradient must match the tensor: expected {} on {}, got {} on {}",
              shape_str(shape()), device(), shape_str(g.shape()), g.device());
  impl().grad = g.impl_ptr();
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  run_backward(*this, grad, retain_graph);
}

void Tensor::retain_grad() {
  DPLAB_CHECK(requires_grad(), "retain_grad(): tensor does not require grad");
  if (is_leaf()) return;  // leaves keep their .grad anyway
  impl().retains_grad = true;
  grad_fn()->retained_output = impl_ptr();
}

void Tensor::register_hook(TensorHook hook) {
  DPLAB_CHECK(requires_grad(), "register_hook(): tensor does not require grad");
  if (is_leaf()) impl().leaf_hooks.push_back(std::move(hook));
  else grad_fn()->pre_hooks.push_back(std::move(hook));
}

void Tensor::register_post_accumulate_grad_hook(PostAccumulateHook hook) {
  DPLAB_CHECK(is_leaf() && requires_grad(),
              "register_post_accumulate_grad_hook(): only for leaves that require grad");
  impl().post_accumulate_hooks.push_back(std::move(hook));
}

// ---- in-place updates ----

namespace {
void check_inplace(const Tensor& t, const char* what) {
  DPLAB_CHECK(!(grad_enabled() && t.requires_grad() && t.is_leaf()),
              "{}: in-place update of a leaf that requires grad; wrap it in NoGradGuard", what);
}
}  // namespace

Tensor& Tensor::zero_() { return fill_(0.0); }

Tensor& Tensor::fill_(double value) {
  check_inplace(*this, "fill_");
  backend_for(device()).fill(dtype(), raw_data(), numel(), value);
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace(*this, "copy_");
  DPLAB_CHECK(src.shape() == shape() && src.dtype() == dtype(),
              "copy_: expected a source of shape {} and {}, got {} and {}", shape_str(shape()),
              dtype_name(dtype()), shape_str(src.shape()), dtype_name(src.dtype()));
  copy_bytes(device(), raw_data(), src.device(), src.raw_data(), static_cast<size_t>(nbytes()));
  return *this;
}

Tensor& Tensor::add_(const Tensor& other, float alpha) {
  check_inplace(*this, "add_");
  DPLAB_CHECK(other.device() == device(), "add_: tensors on different devices: {} and {}", device(),
              other.device());
  DPLAB_CHECK(other.shape() == shape() && is_floating(dtype()) && is_floating(other.dtype()),
              "add_: expected a floating tensor of shape {}, got {} {}", shape_str(shape()),
              dtype_name(other.dtype()), shape_str(other.shape()));
  if (dtype() != DType::Float32 || other.dtype() != DType::Float32) {
    // 16-bit: add in float32, round once into this tensor's dtype
    NoGradGuard no_grad;
    Tensor sum32 = dplab::add(detach().to(DType::Float32),
                              dplab::mul_scalar(other.detach().to(DType::Float32), alpha));
    Tensor rounded = sum32.to(dtype());
    copy_bytes(device(), raw_data(), device(), rounded.raw_data(), static_cast<size_t>(nbytes()));
    return *this;
  }
  Backend& be = backend_for(device());
  Strided flat{.ndim = 1, .shape = {numel()}, .strides = {1}};
  if (alpha == 1.0f) {
    be.binary(BinaryOp::Add, data<float>(), flat, other.data<float>(), flat, data<float>());
  } else {
    Tensor scaled = Tensor::empty(shape(), options());
    be.unary(UnaryOp::MulScalar, other.data<float>(), scaled.data<float>(), numel(), alpha);
    be.binary(BinaryOp::Add, data<float>(), flat, scaled.data<float>(), flat, data<float>());
  }
  return *this;
}

Tensor& Tensor::mul_(float s) {
  check_inplace(*this, "mul_");
  DPLAB_CHECK(is_floating(dtype()), "mul_: expected a floating tensor, got {}",
              dtype_name(dtype()));
  if (dtype() != DType::Float32) {
    NoGradGuard no_grad;
    Tensor rounded = dplab::mul_scalar(detach(), s);
    copy_bytes(device(), raw_data(), device(), rounded.raw_data(), static_cast<size_t>(nbytes()));
    return *this;
  }
  backend_for(device()).unary(UnaryOp::MulScalar, data<float>(), data<float>(), numel(), s);
  return *this;
}

// ---- sugar ----
Tensor Tensor::sum() const { return dplab::sum(*this); }
Tensor Tensor::mean() const { return dplab::mean(*this); }
Tensor Tensor::matmul(const Tensor& o) const { return dplab::matmul(*this, o); }
Tensor Tensor::relu() const { return dplab::relu(*this); }
Tensor Tensor::exp() const { return dplab::exp(*this); }
Tensor Tensor::log() const { return dplab::log(*this); }
Tensor Tensor::pow(float p) const { return dplab::pow(*this, p); }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, float s) { return add_scalar(a, s); }
Tensor operator-(const Tensor& a, float s) { return add_scalar(a, -s); }
Tensor operator*(const Tensor& a, float s) { return mul_scalar(a, s); }
Tensor operator/(const Tensor& a, float s) { return mul_scalar(a, 1.0f / s); }
Tensor operator*(float s, const Tensor& a) { return mul_scalar(a, s); }
Tensor operator+(float s, const Tensor& a) { return add_scalar(a, s); }
Tensor operator-(float s, const Tensor& a) { return add_scalar(neg(a), s); }
Tensor operator-(const Tensor& a) { return neg(a); }

}  // namespace dplab
