// optim_state.h: helpers the optimizers share, private to framework/optim/ (not installed API).
// They check parameters the way torch.optim does, allocate per-parameter state on the
// parameter's own device (so memory_stats shows it there), and read/write the metadata
// strings of a state dict ("optim.lr" = "0.1") without losing precision.
// Read next: sgd.cpp, adam.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "framework/nn/state_dict.h"
#include "framework/tensor/tensor.h"

namespace dplab::optim::detail {

// Throws unless `value >= 0`: "SGD: invalid lr: expected >= 0, got -1".
void check_non_negative(const char* optimizer, const char* what, double value);

// The gradient of params[i], checked against the parameter (float32, same shape and device),
// or an undefined tensor when the parameter has none (step() skips it, as PyTorch does).
Tensor checked_grad(const char* optimizer, const std::vector<Tensor>& params, size_t i);

// A zero-filled state tensor with the parameter's shape, on the parameter's device.
Tensor zeros_like_param(const Tensor& param);

// "state.<i>.<name>"
std::string state_key(size_t i, const std::string& name);

// Metadata helpers: doubles written with 17 significant digits so a round trip is exact.
std::string format_double(double v);
double meta_double(const Metadata& meta, const std::string& key);
int64_t meta_int(const Metadata& meta, const std::string& key);
const std::string& meta_string(const Metadata& meta, const std::string& key);

// Checks "optim.type" and "optim.num_params" against this optimizer before anything is loaded.
void check_header(const Metadata& meta, const std::string& type, size_t num_params);

// Throws unless every element of the float32 tensor t is finite, naming key and the first
// element that is not: state a checkpoint brings in (a NaN momentum) is refused on load,
// before a step spreads it into the parameters.
void check_finite_state(const std::string& key, const Tensor& t);

// Copies tensors.at(key) into a fresh tensor on the parameter's device, checking its shape
// and that it is finite.
Tensor load_state_tensor(const StateDict& tensors, const std::string& key, const Tensor& param);

}  // namespace dplab::optim::detail
