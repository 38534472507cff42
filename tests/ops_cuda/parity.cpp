// parity.cpp: the one helper behind every op-parity table: draw inputs once, run the op on
// two devices, compare outputs, backpropagate the same upstream gradient on both, compare
// every input's gradient. See parity.h for the contract. Read next: cases_elementwise.cpp.
#include "tests/ops_cuda/parity.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <sstream>

#include "framework/tensor/random.h"

namespace dplab::parity {
namespace {

// Backward passes add reductions of their own (sum_to after broadcasting, the weighted sum
// that turns the outputs into one loss), so gradients get ten times the forward tolerance.
Tol grad_tol(Tol t) { return {10 * t.atol, 10 * t.rtol}; }

template <typename T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <typename T>
void compare(const std::vector<T>& got, const std::vector<T>& ref, const std::string& what, Tol tol,
             bool exact) {
  std::size_t bad = 0, first = 0;
  double worst = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double g = static_cast<double>(got[i]), r = static_cast<double>(ref[i]);
    bool ok;
    if (exact) ok = same_bits(got[i], ref[i]);
    else if (std::isnan(r)) ok = std::isnan(g);
    else ok = std::fabs(g - r) <= tol.atol + tol.rtol * std::fabs(r);
    if (!ok) {
      if (bad++ == 0) first = i;
      worst = std::max(worst, std::fabs(g - r));
    }
  }
  std::ostringstream msg;
  if (bad > 0) {
    msg << what << ": " << bad << " of " << ref.size() << " elements differ (atol " << tol.atol
        << ", rtol " << tol.rtol << (exact ? ", exact" : "") << "); first at " << first << ": got "
        << got[first] << ", reference " << ref[first] << "; worst |diff| " << worst;
  }
  CHECK_MESSAGE(bad == 0, msg.str());
}

}  // namespace

V make_inputs(const std::vector<In>& spec, Device d, uint64_t seed) {
  Generator gen(seed);
  V out;
  for (const In& in : spec) {
    Tensor t;
    switch (in.kind) {
      case Kind::Normal:
      case Kind::Const: t = randn(in.shape, {}, &gen); break;
      case Kind::Positive: t = uniform(in.shape, 0.5f, 2.0f, {}, &gen); break;
      case Kind::Ties: t = randint(-2, 3, in.shape, {}, &gen).to(DType::Float32); break;
      case Kind::Index: t = randint(0, in.high, in.shape, {}, &gen); break;
    }
    t = t.to(d).detach();  // a leaf on d whatever the path there
    if (in.kind != Kind::Index && in.kind != Kind::Const) t.requires_grad_(true);
    out.push_back(t);
  }
  return out;
}

void check_close(const Tensor& got, const Tensor& ref, const std::string& what, Tol tol,
                 bool exact) {
  REQUIRE_MESSAGE(got.defined() == ref.defined(), what << ": defined on one device only (reference "
                                                       << (ref.defined() ? "defined" : "undefined")
                                                       << ")");
  if (!ref.defined()) return;
  REQUIRE_MESSAGE(got.shape() == ref.shape(), what << ": shape " << shape_str(got.shape())
                                                   << ", reference " << shape_str(ref.shape()));
  REQUIRE_MESSAGE(got.dtype() == ref.dtype(), what << ": dtype " << dtype_name(got.dtype())
                                                   << ", reference " << dtype_name(ref.dtype()));
  if (ref.dtype() == DType::Int64) {
    compare(got.to_vector<int64_t>(), ref.to_vector<int64_t>(), what, tol, true);
  } else {
    compare(got.to_vector<float>(), ref.to_vector<float>(), what, tol, exact);
  }
}

void run_case(const OpCase& c, Device a, Device b, bool exact) {
  const uint64_t seed = std::hash<std::string>{}(c.name) % 100000;
  V in_a = make_inputs(c.inputs, a, seed), in_b = make_inputs(c.inputs, b, seed);
  V out_a = c.f(in_a), out_b = c.f(in_b);
  REQUIRE_MESSAGE(out_a.size() == out_b.size(), c.name << ": output counts differ");

  for (std::size_t k = 0; k < out_a.size(); ++k) {
    const std::string what = c.name + ": output " + std::to_string(k);
    check_close(out_b[k], out_a[k], what, c.tol, exact);
    // Whatever an op makes (a mask, an argmax) must land on its inputs' device.
    if (out_a[k].defined() && out_a[k].device() == a) {
      CHECK_MESSAGE(out_b[k].device() == b,
                    what << " is on " << out_b[k].device().str() << ", expected " << b.str());
    }
  }

  // One scalar loss: sum_k sum(out_k * w_k), w_k drawn once, so every output gets the same
  // upstream gradient w_k on both devices. Terms are summed on the CPU (to_device is
  // differentiable) because an op may legitimately put its output elsewhere.
  Generator wgen(seed + 1);
  Tensor loss_a, loss_b;
  for (std::size_t k = 0; k < out_a.size(); ++k) {
    if (!out_a[k].defined() || !out_a[k].requires_grad()) continue;
    REQUIRE_MESSAGE(out_b[k].requires_grad(),
                    c.name << ": output " << k << " requires grad on one device only");
    Tensor w = randn(out_a[k].shape(), {}, &wgen);
    Tensor ta = to_device(sum(mul(out_a[k], w.to(out_a[k].device()))), Device("cpu"));
    Tensor tb = to_device(sum(mul(out_b[k], w.to(out_b[k].device()))), Device("cpu"));
    loss_a = loss_a.defined() ? add(loss_a, ta) : ta;
    loss_b = loss_b.defined() ? add(loss_b, tb) : tb;
  }
  if (!loss_a.defined()) return;  // nothing differentiable (eq, argmax, ...)
  loss_a.backward();
  loss_b.backward();
  for (std::size_t i = 0; i < in_a.size(); ++i) {
    if (!in_a[i].requires_grad()) continue;
    check_close(in_b[i].grad(), in_a[i].grad(), c.name + ": gradient of input " + std::to_string(i),
                grad_tol(c.tol), exact);
  }
}

void run_table(const std::vector<OpCase>& table, Device a, Device b, bool exact) {
  for (const OpCase& c : table) {
    INFO("case: " << c.name << " (" << a.str() << " vs " << b.str() << ")");
    try {
      run_case(c, a, b, exact);
    } catch (const std::exception& e) {
      FAIL_CHECK(c.name << ": threw " << std::string(e.what()));
    }
  }
}

}  // namespace dplab::parity
