// gpt_sample.cpp: sampling (gpt_sample.h) and the GPT's own checkpoint format, a
// safetensors checkpoint whose metadata holds the GPTConfig.
// Read next: tutorials/24_tiny_gpt.cpp.
#include "models/gpt_sample.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include "framework/autograd/grad_mode.h"
#include "framework/io/checkpoint.h"
#include "framework/io/safetensors.h"
#include "framework/ops/ops.h"

namespace dplab::models {

int64_t sample_next(std::span<const float> logits, double temperature, int64_t top_k,
                    Generator& rng) {
  const int64_t V = static_cast<int64_t>(logits.size());
  DPLAB_CHECK(V > 0, "sample_next: no logits");
  DPLAB_CHECK(temperature >= 0.0 && std::isfinite(temperature),
              "sample_next: temperature must be finite and >= 0, got {}", temperature);
  DPLAB_CHECK(top_k >= 0, "sample_next: top_k must be >= 0 (0: all tokens), got {}", top_k);
  const int64_t best = std::max_element(logits.begin(), logits.end()) - logits.begin();
  if (temperature == 0.0) return best;  // greedy: the limit T -> 0 of softmax(l / T)

  // The k-th largest logit: everything below it gets probability 0 (ties with it stay).
  float threshold = -INFINITY;
  if (top_k > 0 && top_k < V) {
    std::vector<float> sorted(logits.begin(), logits.end());
    std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(), std::greater<>());
    threshold = sorted[top_k - 1];
  }
  // softmax((l - max) / T) over the kept tokens: subtracting the max keeps exp <= 1, so a
  // small temperature cannot overflow it. Doubles: p of the unlikely tokens stays > 0.
  std::vector<double> p(V, 0.0);
  double total = 0.0;
  const double top = logits[best];
  for (int64_t i = 0; i < V; ++i)
    if (logits[i] >= threshold) total += p[i] = std::exp((logits[i] - top) / temperature);
  // Inverse CDF: the first token whose running sum passes u * total.
  const double u = static_cast<double>(rng.uniform()) * total;
  double running = 0.0;
  int64_t last_kept = best;
  for (int64_t i = 0; i < V; ++i) {
    if (p[i] == 0.0) continue;
    running += p[i];
    last_kept = i;
    if (u < running) return i;
  }
  return last_kept;  // u * total rounded up to the sum itself
}

std::vector<int64_t> generate(GPT& model, const std::vector<int64_t>& prompt,
                              const SampleOptions& options, Generator& rng) {
  DPLAB_CHECK(!prompt.empty(), "generate: the prompt needs at least one token");
  DPLAB_CHECK(options.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0, got {}",
              options.max_new_tokens);
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const Device device = model.wte->weight.device();
  const int64_t V = model.config.vocab_size;
  std::vector<int64_t> ids = prompt;
  for (int64_t n = 0; n < options.max_new_tokens; ++n) {
    // The last block_size ids: the positions wpe knows.
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(ids.size()), model.config.block_size);
    std::vector<int64_t> context(ids.end() - T, ids.end());
    Tensor logits = model.forward(from_vector(context, {1, T}).to(device));
    // [1, T, V] -> the last position's V scores, the ones that predict the next token.
    const std::vector<float> last = narrow(logits, 1, T - 1, 1).to(DType::Float32).to_vector<float>();
    DPLAB_CHECK(static_cast<int64_t>(last.size()) == V, "generate: expected {} logits, got {}", V,
                last.size());
    ids.push_back(sample_next(last, options.temperature, options.top_k, rng));
  }
  model.train(was_training);
  return ids;
}

std::vector<int64_t> bytes_to_ids(const std::string& text) {
  std::vector<int64_t> ids;
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

std::string ids_to_bytes(const std::vector<int64_t>& ids) {
  std::string s;
  for (int64_t id : ids) {
    DPLAB_CHECK(id >= 0 && id < 256, "ids_to_bytes: id {} is not a byte", id);
    s.push_back(static_cast<char>(id));
  }
  return s;
}

namespace {

const char* const kConfigKeys[] = {"gpt.vocab_size", "gpt.block_size", "gpt.n_layer",
                                   "gpt.n_head", "gpt.n_embd", "gpt.bias"};

int64_t config_value(const Metadata& meta, const std::string& key, const std::string& path) {
  auto it = meta.find(key);
  DPLAB_CHECK(it != meta.end(), "load_gpt: {} has no \"{}\" in its metadata (was it written by "
              "save_gpt?)", path, key);
  int64_t v = 0;
  const std::string& s = it->second;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  DPLAB_CHECK(!s.empty() && ec == std::errc() && end == s.data() + s.size() && v >= 0,
              "load_gpt: {} has {}=\"{}\"; expected a whole number >= 0", path, key, s.substr(0, 32));
  return v;
}

}  // namespace

void save_gpt(const std::string& path, const GPT& model, Metadata extra) {
  const GPTConfig& c = model.config;
  const int64_t values[] = {c.vocab_size, c.block_size, c.n_layer, c.n_head, c.n_embd, c.bias};
  for (size_t i = 0; i < std::size(kConfigKeys); ++i) extra[kConfigKeys[i]] = std::to_string(values[i]);
  save_checkpoint(path, model, nullptr, std::move(extra));
}

std::shared_ptr<GPT> load_gpt(const std::string& path, Device device, Metadata* metadata) {
  // Read once to learn the configuration and check the tie; load_checkpoint then reads the
  // file again with its own checks (a few MB: simpler than a second loading path).
  const Loaded file = load_safetensors(path);
  GPTConfig c;
  c.vocab_size = config_value(file.metadata, kConfigKeys[0], path);
  c.block_size = config_value(file.metadata, kConfigKeys[1], path);
  c.n_layer = config_value(file.metadata, kConfigKeys[2], path);
  c.n_head = config_value(file.metadata, kConfigKeys[3], path);
  c.n_embd = config_value(file.metadata, kConfigKeys[4], path);
  c.bias = config_value(file.metadata, kConfigKeys[5], path) != 0;
  if (file.tensors.contains("wte.weight") && file.tensors.contains("lm_head.weight")) {
    const Tensor& a = file.tensors.at("wte.weight");
    const Tensor& b = file.tensors.at("lm_head.weight");
    DPLAB_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype() &&
                    std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0,
                "load_gpt: {} holds a wte.weight and an lm_head.weight that differ; a GPT's head "
                "is tied to its embedding (one tensor), so the two keys must be equal copies", path);
  }
  auto model = std::make_shared<GPT>(c);
  model->to(device);
  Metadata meta = load_checkpoint(path, *model, nullptr, device);
  if (metadata) *metadata = std::move(meta);
  return model;
}

}  // namespace dplab::models
