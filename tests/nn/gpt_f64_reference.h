// gpt_f64_reference.h: models::GPT's forward and loss written out again in double precision,
// loop by loop, as the slow and obviously correct reference that the float32 model is tested
// against (test_transformer_modules.cpp). Its parameters are the model's, read by name from
// named_parameters() and widened to double, so both evaluate the same function; gradients
// come from central finite differences over these doubles. Dropout is not modelled (p = 0).
#pragma once
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/gpt.h"

namespace dplab::testing {

class GptF64 {
 public:
  using Rows = std::vector<double>;  // [N, width], row-major

  explicit GptF64(const models::GPT& model) : cfg_(model.config) {
    for (const auto& [name, t] : model.named_parameters()) {
      std::vector<float> v = t.to_vector<float>();
      params[name] = std::vector<double>(v.begin(), v.end());
    }
  }

  // Mean cross entropy over the B*T positions; ids and targets are [B, T], row-major.
  double loss(const std::vector<int64_t>& ids, const std::vector<int64_t>& targets, int64_t B,
              int64_t T) const {
    const int64_t C = cfg_.n_embd, V = cfg_.vocab_size;
    double total = 0.0;
    for (int64_t b = 0; b < B; ++b) {
      Rows x(T * C);  // wte[id] + wpe[t]
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < C; ++c)
          x[t * C + c] = p("wte.weight")[ids[b * T + t] * C + c] + p("wpe.weight")[t * C + c];
      for (int64_t l = 0; l < cfg_.n_layer; ++l) {
        const std::string pre = "h." + std::to_string(l) + ".";
        add_into(x, attention(layer_norm(x, T, pre + "ln_1"), T, pre + "attn"));
        add_into(x, mlp(layer_norm(x, T, pre + "ln_2"), T, pre + "mlp"));
      }
      // The tied head: logits = ln_f(x) wte^T, no bias.
      const Rows logits = linear(layer_norm(x, T, "ln_f"), T, C, V, p("wte.weight"), nullptr);
      for (int64_t t = 0; t < T; ++t) {
        const double* z = &logits[t * V];
        double m = z[0], s = 0.0;
        for (int64_t v = 1; v < V; ++v) m = std::max(m, z[v]);
        for (int64_t v = 0; v < V; ++v) s += std::exp(z[v] - m);
        total += m + std::log(s) - z[targets[b * T + t]];  // -log softmax(z)[target]
      }
    }
    return total / static_cast<double>(B * T);
  }

  std::map<std::string, std::vector<double>> params;  // perturbed in place by the test

 private:
  const std::vector<double>& p(const std::string& name) const { return params.at(name); }
  const double* bias(const std::string& name) const {
    auto it = params.find(name);
    return it == params.end() ? nullptr : it->second.data();
  }

  static void add_into(Rows& x, const Rows& y) {
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
  }

  // x [N, in] W [out, in] b [out] -> x W^T + b  [N, out]
  static Rows linear(const Rows& x, int64_t N, int64_t in, int64_t out,
                     const std::vector<double>& W, const double* b) {
    Rows y(N * out);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < out; ++o) {
        double s = b ? b[o] : 0.0;
        for (int64_t i = 0; i < in; ++i) s += x[n * in + i] * W[o * in + i];
        y[n * out + o] = s;
      }
    return y;
  }
  Rows linear(const Rows& x, int64_t N, const std::string& name, int64_t in, int64_t out) const {
    return linear(x, N, in, out, p(name + ".weight"), bias(name + ".bias"));
  }

  // Each row: (x - mean) / sqrt(biased var + 1e-5) * weight + bias.
  Rows layer_norm(const Rows& x, int64_t N, const std::string& name) const {
    const int64_t C = cfg_.n_embd;
    const std::vector<double>& w = p(name + ".weight");
    const double* b = bias(name + ".bias");
    Rows y(N * C);
    for (int64_t n = 0; n < N; ++n) {
      double mean = 0.0, var = 0.0;
      for (int64_t c = 0; c < C; ++c) mean += x[n * C + c] / C;
      for (int64_t c = 0; c < C; ++c) var += (x[n * C + c] - mean) * (x[n * C + c] - mean) / C;
      for (int64_t c = 0; c < C; ++c)
        y[n * C + c] = (x[n * C + c] - mean) / std::sqrt(var + 1e-5) * w[c] + (b ? b[c] : 0.0);
    }
    return y;
  }

  // Head h of position t reads q, k, v at columns [which*C + h*D, +D) of c_attn's output.
  Rows attention(const Rows& x, int64_t T, const std::string& name) const {
    const int64_t C = cfg_.n_embd, H = cfg_.n_head, D = C / H;
    const Rows qkv = linear(x, T, name + ".c_attn", C, 3 * C);
    auto at = [&](int64_t t, int64_t which, int64_t h, int64_t d) {
      return qkv[t * 3 * C + which * C + h * D + d];
    };
    Rows y(T * C, 0.0);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> s(t + 1);  // scores of keys u <= t only: the causal mask
        double m = -INFINITY, z = 0.0;
        for (int64_t u = 0; u <= t; ++u) {
          for (int64_t d = 0; d < D; ++d) s[u] += at(t, 0, h, d) * at(u, 1, h, d);
          s[u] /= std::sqrt(static_cast<double>(D));
          m = std::max(m, s[u]);
        }
        for (int64_t u = 0; u <= t; ++u) z += std::exp(s[u] - m);
        for (int64_t u = 0; u <= t; ++u)
          for (int64_t d = 0; d < D; ++d)
            y[t * C + h * D + d] += std::exp(s[u] - m) / z * at(u, 2, h, d);
      }
    return linear(y, T, name + ".c_proj", C, C);
  }

  // gelu_tanh(a) = a/2 (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3)))
  Rows mlp(const Rows& x, int64_t T, const std::string& name) const {
    const int64_t C = cfg_.n_embd;
    Rows a = linear(x, T, name + ".c_fc", C, 4 * C);
    for (double& v : a)
      v = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    return linear(a, T, name + ".c_proj", 4 * C, C);
  }

  models::GPTConfig cfg_;
};

}  // namespace dplab::testing
