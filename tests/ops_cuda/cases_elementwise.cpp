// cases_elementwise.cpp: the parity tables of ops/elementwise.cpp and ops/reduce.cpp.
// Shapes are odd on purpose: sizes that are not multiples of 32 or 256 (partial warps and
// blocks, grid-stride tails), broadcasting along each axis in turn, leading broadcast,
// size-1 dims and 0-d tensors. Ties (integer-valued floats) check that max / argmax /
// maximum break ties the same way on every backend.
// Read next: cases_linalg_shape.cpp.
#include "tests/ops_cuda/parity.h"

namespace dplab::parity {
namespace {

// Broadcast patterns for binary ops: (a, b), each axis broadcast somewhere.
// clang-format off
const std::vector<std::pair<Shape, Shape>> kPatterns = {
  // a           b
    {{37, 45},   {37, 45}},   // same shape, 1665 elements: a partial last block
    {{3, 1, 5},  {4, 1}},     // -> [3, 4, 5]: a broadcasts along dim 1, b along 0 and 2
    {{1, 7},     {6, 1}},     // -> [6, 7]: an outer product of broadcasts
    {{5},        {2, 3, 5}},  // leading broadcast of a
    {{2, 3, 33}, {1, 3, 1}},  // b broadcasts along the first and the last dim
    {{},         {33}},       // a 0-d tensor against a vector
    {{1, 1, 1},  {2, 3, 4}},  // all size-1 dims
};
// clang-format on

std::string shapes_name(const char* op, const Shape& a, const Shape& b) {
  return std::string(op) + " " + shape_str(a) + " " + shape_str(b);
}

}  // namespace

std::vector<OpCase> elementwise_cases() {
  std::vector<OpCase> t;
  for (const auto& [sa, sb] : kPatterns) {
    // clang-format off
    //           name                            covers       inputs                f, tol
    t.push_back({shapes_name("add", sa, sb),     {"add"},     {x(sa), x(sb)},       [](const V& v) { return V{add(v[0], v[1])}; }, kSum});
    t.push_back({shapes_name("sub", sa, sb),     {"sub"},     {x(sa), x(sb)},       [](const V& v) { return V{sub(v[0], v[1])}; }, kSum});
    t.push_back({shapes_name("mul", sa, sb),     {"mul"},     {x(sa), x(sb)},       [](const V& v) { return V{mul(v[0], v[1])}; }, kSum});
    t.push_back({shapes_name("div", sa, sb),     {"div"},     {x(sa), pos(sb)},     [](const V& v) { return V{div(v[0], v[1])}; }, kSum});
    t.push_back({shapes_name("pow", sa, sb),     {"pow"},     {pos(sa), x(sb)},     [](const V& v) { return V{pow(v[0], v[1])}; }, kSum});
    t.push_back({shapes_name("maximum", sa, sb), {"maximum"}, {ties(sa), ties(sb)}, [](const V& v) { return V{maximum(v[0], v[1])}; }, kSum});
    t.push_back({shapes_name("eq", sa, sb),      {"eq"},      {ties(sa), ties(sb)}, [](const V& v) { return V{eq(v[0], v[1])}; }});
    // clang-format on
  }
  // maximum(a, a): every element ties, and the whole gradient goes to the first argument.
  t.push_back({"maximum with itself", {"maximum"}, {x({9, 11})}, [](const V& v) {
                 return V{maximum(v[0], v[0])};
               }});

  const Shape s{3, 333};  // 999 elements
  // clang-format off
  //           name                         covers                               inputs           f
  t.push_back({"add_scalar",                {"add_scalar"},                      {x(s)},          [](const V& v) { return V{add_scalar(v[0], 1.5f)}; }});
  t.push_back({"mul_scalar",                {"mul_scalar"},                      {x(s)},          [](const V& v) { return V{mul_scalar(v[0], -0.75f)}; }});
  t.push_back({"pow x^2",                   {"pow"},                             {x(s)},          [](const V& v) { return V{pow(v[0], 2.0f)}; }});
  t.push_back({"pow x^3 (negative bases)",  {"pow"},                             {x(s)},          [](const V& v) { return V{pow(v[0], 3.0f)}; }});
  t.push_back({"pow x^1.7",                 {"pow"},                             {pos(s)},        [](const V& v) { return V{pow(v[0], 1.7f)}; }});
  t.push_back({"neg",                       {"neg"},                             {x(s)},          [](const V& v) { return V{neg(v[0])}; }});
  t.push_back({"exp",                       {"exp"},                             {x(s)},          [](const V& v) { return V{exp(v[0])}; }});
  t.push_back({"log",                       {"log"},                             {pos(s)},        [](const V& v) { return V{log(v[0])}; }});
  t.push_back({"sqrt",                      {"sqrt"},                            {pos(s)},        [](const V& v) { return V{sqrt(v[0])}; }});
  t.push_back({"abs",                       {"abs"},                             {x(s)},          [](const V& v) { return V{abs(v[0])}; }});
  t.push_back({"relu",                      {"relu"},                            {x(s)},          [](const V& v) { return V{relu(v[0])}; }});
  t.push_back({"relu of ties (zeros)",      {"relu"},                            {ties({7, 13})}, [](const V& v) { return V{relu(v[0])}; }});
  t.push_back({"sigmoid",                   {"sigmoid"},                         {x(s)},          [](const V& v) { return V{sigmoid(v[0])}; }});
  t.push_back({"tanh",                      {"tanh"},                            {x(s)},          [](const V& v) { return V{tanh(v[0])}; }});
  t.push_back({"scalar sugar 2 - 3x + x/4", {"add_scalar", "mul_scalar", "neg"}, {x({65})},       [](const V& v) { return V{2.0f - v[0] * 3.0f + v[0] / 4.0f}; }});
  // A 0-d tensor through a unary op and back.
  t.push_back({"exp of a 0-d tensor",       {"exp"},                             {x({})},         [](const V& v) { return V{exp(v[0])}; }});
  // clang-format on
  return t;
}

std::vector<OpCase> reduce_cases() {
  std::vector<OpCase> t;
  const Shape s{4, 37, 5};
  t.push_back({"sum all", {"sum"}, {x(s)}, [](const V& v) { return V{sum(v[0])}; }, kSum});
  for (bool keep : {false, true}) {
    const std::string k = keep ? " keepdim" : "";
    for (int64_t d : {0, 1, 2, -1}) {
      t.push_back({"sum dim " + std::to_string(d) + k,
                   {"sum"},
                   {x(s)},
                   [d, keep](const V& v) { return V{sum(v[0], {d}, keep)}; },
                   kSum});
    }
    // clang-format off
    //           name                            covers    inputs  f, tol
    t.push_back({"sum dims {0, 2}" + k,          {"sum"},  {x(s)}, [keep](const V& v) { return V{sum(v[0], {0, 2}, keep)}; }, kSum});
    t.push_back({"sum dims {0, 1, 2}" + k,       {"sum"},  {x(s)}, [keep](const V& v) { return V{sum(v[0], {2, 0, 1}, keep)}; }, kSum});
    t.push_back({"mean dim 1" + k,               {"mean"}, {x(s)}, [keep](const V& v) { return V{mean(v[0], {1}, keep)}; }, kSum});
    t.push_back({"var dims {0, 2} unbiased" + k, {"var"},  {x(s)}, [keep](const V& v) { return V{var(v[0], {0, 2}, true, keep)}; }, kSum});
    t.push_back({"var dim -1 biased" + k,        {"var"},  {x(s)}, [keep](const V& v) { return V{var(v[0], {-1}, false, keep)}; }, kSum});
    // clang-format on
    for (int64_t d : {0, 1, 2}) {
      t.push_back({"max dim " + std::to_string(d) + k + " (ties)",
                   {"max"},
                   {ties(s)},
                   [d, keep](const V& v) {
        MaxResult m = max(v[0], d, keep);
        return V{m.values, m.indices};
                   }});
      t.push_back({"argmax dim " + std::to_string(d) + k + " (ties)",
                   {"argmax"},
                   {ties(s)},
                   [d, keep](const V& v) { return V{argmax(v[0], d, keep)}; }});
    }
  }
  // clang-format off
  //           name                                 covers      inputs          f, tol
  t.push_back({"mean all",                          {"mean"},   {x(s)},         [](const V& v) { return V{mean(v[0])}; }, kSum});
  t.push_back({"max all",                           {"max"},    {x(s)},         [](const V& v) { return V{max(v[0])}; }});
  t.push_back({"max all (ties share the gradient)", {"max"},    {ties(s)},      [](const V& v) { return V{max(v[0])}; }});
  // Long rows (a warp per row walks 1000 values) and long columns (a thread per column).
  t.push_back({"sum of long rows",                  {"sum"},    {x({7, 1000})}, [](const V& v) { return V{sum(v[0], {1})}; }, kSum});
  t.push_back({"sum of long columns",               {"sum"},    {x({1000, 7})}, [](const V& v) { return V{sum(v[0], {0})}; }, kSum});
  t.push_back({"argmax of long rows",               {"argmax"}, {x({7, 1000})}, [](const V& v) { return V{argmax(v[0], 1)}; }});
  // clang-format on
  t.push_back({"max of long rows", {"max"}, {x({3, 777})}, [](const V& v) {
                 MaxResult m = max(v[0], -1);
                 return V{m.values, m.indices};
               }});
  // sum_to: the adjoint of broadcasting, to trailing-aligned shapes.
  // clang-format off
  //           name                         covers      inputs          f, tol
  t.push_back({"sum_to [3,4,5] -> [4,1]",   {"sum_to"}, {x({3, 4, 5})}, [](const V& v) { return V{sum_to(v[0], {4, 1})}; }, kSum});
  t.push_back({"sum_to [3,4,5] -> [5]",     {"sum_to"}, {x({3, 4, 5})}, [](const V& v) { return V{sum_to(v[0], {5})}; }, kSum});
  t.push_back({"sum_to [3,4,5] -> [1,1,1]", {"sum_to"}, {x({3, 4, 5})}, [](const V& v) { return V{sum_to(v[0], {1, 1, 1})}; }, kSum});
  // clang-format on
  return t;
}

}  // namespace dplab::parity
