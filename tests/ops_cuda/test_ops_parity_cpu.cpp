// test_ops_parity_cpu.cpp: the parity tables of test_ops_cuda.cpp run on cpu:0 against cpu:1,
// which must agree bit for bit (the same kernels; only the memory accounting differs). This
// runs on every machine, so the tables are known to be well-formed (shapes, gradients, the
// helper itself) even where the CUDA suite is skipped. It also checks that the tables, with
// the special checks, name every op declared in framework/ops/ops.h: a new op without a
// parity case fails here. Read next: test_ops_cuda.cpp.
#include <doctest/doctest.h>

#include <fstream>
#include <regex>
#include <set>
#include <string>

#include "tests/ops_cuda/parity.h"

using namespace dplab;
using namespace dplab::parity;

namespace {

const Device kCpu("cpu"), kOther("cpu:1");

// The function names ops.h declares (lines "Tensor name(", "std::vector<Tensor> name(", ...).
std::set<std::string> ops_in_header() {
  std::ifstream f(DPLAB_OPS_H);
  REQUIRE_MESSAGE(f.good(), "cannot read " << DPLAB_OPS_H);
  const std::regex decl(R"(^(?:Tensor|std::vector<Tensor>|MaxResult|Shape)\s+(\w+)\()");
  std::set<std::string> names;
  std::smatch m;
  for (std::string line; std::getline(f, line);) {
    if (std::regex_search(line, m, decl)) names.insert(m[1]);
  }
  return names;
}

}  // namespace

TEST_CASE("the parity tables cover every op of ops.h") {
  std::set<std::string> covered;
  for (const auto& table : {elementwise_cases(), reduce_cases(), linalg_shape_cases(), nn_cases(),
                            transformer_cases()}) {
    for (const OpCase& c : table) covered.insert(c.covers.begin(), c.covers.end());
  }
  for (const std::string& s : special_covers()) covered.insert(s);
  const std::set<std::string> declared = ops_in_header();
  // As of this commit ops.h declares 66 distinct names; the count guards the regex itself.
  CHECK(declared.size() >= 66);
  for (const std::string& op : declared) {
    CHECK_MESSAGE(covered.count(op) == 1,
                  "ops.h declares " << op << " but no parity case covers it");
  }
  for (const std::string& op : covered) {
    CHECK_MESSAGE(declared.count(op) == 1,
                  "a parity case covers " << op << ", which ops.h does not declare");
  }
}

TEST_CASE("elementwise ops on cpu:1 equal cpu:0 bit for bit") {
  run_table(elementwise_cases(), kCpu, kOther, true);
}
TEST_CASE("reductions on cpu:1 equal cpu:0 bit for bit") {
  run_table(reduce_cases(), kCpu, kOther, true);
}
TEST_CASE("matmul, linear, shape and index ops on cpu:1 equal cpu:0") {
  run_table(linalg_shape_cases(), kCpu, kOther, true);
}
TEST_CASE("nn ops on cpu:1 equal cpu:0 bit for bit") { run_table(nn_cases(), kCpu, kOther, true); }
TEST_CASE("transformer ops on cpu:1 equal cpu:0 bit for bit") {
  run_table(transformer_cases(), kCpu, kOther, true);
}
TEST_CASE("transformer ops' errors on cpu:1") { check_transformer_errors(kOther); }
TEST_CASE("factories on cpu:1") { check_factories(kOther); }
TEST_CASE("dropout on cpu:1") { check_dropout(kOther); }
TEST_CASE("ops given cpu:0 and cpu:1 tensors throw, naming both devices") {
  check_mixed_devices(kOther);
}
TEST_CASE("optimizer steps on cpu:1 equal cpu:0") { check_optimizers(kOther, true); }
TEST_CASE("MLP: SGD momentum steps on cpu:1 equal cpu:0") {
  check_training_steps("mlp", kOther, 2, true);
}
TEST_CASE("LeNet CNN: an SGD momentum step on cpu:1 equals cpu:0") {
  check_training_steps("cnn", kOther, 1, true);
}
