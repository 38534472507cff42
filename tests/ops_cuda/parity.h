// parity.h: "this op on device A gives what it gives on device B", table-driven (needle's
// device-parametrised tests, llm.c's |got - ref| <= atol + rtol*|ref| against the CPU).
// An OpCase names the ops it covers, its inputs (shape, kind of values) and a map from
// inputs to outputs. run_case() draws the inputs once on the CPU, copies them to both
// devices as leaves, compares every output, backpropagates the same upstream gradient on
// both and compares every input's gradient. Used by test_ops_cuda.cpp (cpu vs cuda:0) and
// test_ops_parity_cpu.cpp (cpu:0 vs cpu:1, bit for bit, runs everywhere: keeps the tables
// honest). Read next: cases_elementwise.cpp, then test_ops_cuda.cpp.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "framework/ops/ops.h"

namespace dplab::parity {

using V = std::vector<Tensor>;

// How an input's values are drawn (on the CPU, from a seed, so both devices see the same).
enum class Kind {
  Normal,    // N(0, 1): float, requires grad
  Positive,  // U[0.5, 2): float, requires grad (log, sqrt, divisors, pow bases)
  Ties,      // integers in [-2, 2] as float, requires grad: many equal values (max, argmax)
  Const,     // N(0, 1), float, no grad (running stats, targets of mse)
  Index,     // int64 in [0, high): labels and indices
};

struct In {
  Shape shape;
  Kind kind = Kind::Normal;
  int64_t high = 0;  // Index only
};
inline In x(Shape s) { return {std::move(s), Kind::Normal}; }
inline In pos(Shape s) { return {std::move(s), Kind::Positive}; }
inline In ties(Shape s) { return {std::move(s), Kind::Ties}; }
inline In cst(Shape s) { return {std::move(s), Kind::Const}; }
inline In idx(Shape s, int64_t high) { return {std::move(s), Kind::Index, high}; }

// Tolerance of one case: |got - ref| <= atol + rtol * |ref|. The default suits ops whose
// two implementations do the same float operations up to libm's last bit; reductions,
// GEMMs and softmax sums add in another order and get kSum.
struct Tol {
  double atol = 1e-5, rtol = 1e-5;
};
inline constexpr Tol kSum{1e-4, 1e-4};
inline constexpr Tol kGemm{1e-4, 1e-3};

struct OpCase {
  std::string name;                 // what a failure prints: "add [3,1,5] + [4,1]"
  std::vector<std::string> covers;  // names of ops.h functions this case exercises
  std::vector<In> inputs;
  std::function<V(const V&)> f;  // runs on whatever device the inputs are on
  Tol tol = {};
};

// The inputs of a case on device d: same values whatever d, leaves, float ones (not Const)
// requiring grad. seed picks the values.
V make_inputs(const std::vector<In>& spec, Device d, uint64_t seed);

// Runs c on device a and on device b and checks outputs and input gradients.
// exact: demand bit-identical results (two logical CPU devices run the same kernels).
void run_case(const OpCase& c, Device a, Device b, bool exact);
// Every case of a table; an exception in one case fails that case and the rest still run.
void run_table(const std::vector<OpCase>& table, Device a, Device b, bool exact);

// Counts elements of got outside the tolerance of ref (float32 or int64, same shape, any
// device) and reports the first, naming `what`. exact: equal bits (NaN equals NaN).
void check_close(const Tensor& got, const Tensor& ref, const std::string& what, Tol tol,
                 bool exact);

// ---- the tables (cases_*.cpp) ----
std::vector<OpCase> elementwise_cases();   // binary with broadcasting, scalar and unary ops
std::vector<OpCase> reduce_cases();        // sum, mean, var, max, argmax, sum_to
std::vector<OpCase> linalg_shape_cases();  // matmul, linear, views and copies, indexing
std::vector<OpCase> nn_cases();            // softmax family, losses, conv, pooling, batch norm
// gelu, layer_norm, embedding, causal_softmax, 4-d / transposed matmul, attention
std::vector<OpCase> transformer_cases();

// ---- checks that are not one op on fixed inputs (cases_special.cpp) ----
// Factories on d equal the CPU's for the same generator seed (values are drawn on the host).
void check_factories(Device d);
// Dropout on d: the same seed gives the CPU's mask (drawn on the host, as nn_norm.cpp
// promises), a seed reproduces itself on d, the kept fraction is 1-p, eval is identity.
void check_dropout(Device d);
// Binary ops given one tensor on cpu:0 and one on `other` throw an Error naming both devices.
void check_mixed_devices(Device other);
// SGD (momentum, dampening, nesterov, weight decay), Adam and AdamW: three steps on d from
// the CPU's start and gradients, parameters and every state tensor compared.
void check_optimizers(Device d, bool exact);
// Embedding ids out of range on d throw the CPU's message (a GPU flags them in the kernel);
// causal_softmax and layer_norm refuse bad shapes on d.
void check_transformer_errors(Device d);
// The names of ops.h functions the special checks above cover.
std::vector<std::string> special_covers();

// ---- training steps of the example models (train_parity.cpp) ----
// `steps` SGD-momentum steps of models::make_model(name) ("mlp" or "cnn") on a fixed batch,
// on the CPU and on d from the same initial weights: each loss and every parameter compared.
void check_training_steps(const std::string& name, Device d, int steps, bool exact);

}  // namespace dplab::parity
