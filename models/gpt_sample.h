// gpt_sample.h: text from a trained GPT, one token at a time (nanoGPT's generate()), and
// the model saved to / loaded from one safetensors file with its configuration.
//   Generator rng(1337);
//   auto ids = models::generate(gpt, prompt_ids, {.max_new_tokens = 200, .temperature = 0.8,
//                                                 .top_k = 40}, rng);
// Each new token: crop the sequence to its last block_size ids (wpe has no more rows), run
// the model, keep the logits of the LAST position (the scores of the next token), divide by
// the temperature, keep the top_k largest, softmax, draw one, append it. No graph is kept
// (NoGradGuard): generation never calls backward.
// Temperature: below 1 sharpens the distribution (towards the most likely byte), above 1
// flattens it; 0 means greedy (argmax), the limit of ever smaller temperatures.
// Read next: tests/nn/test_gpt_sample.cpp, tutorials/24_tiny_gpt.cpp.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "framework/nn/state_dict.h"
#include "framework/tensor/random.h"
#include "models/gpt.h"

namespace dplab::models {

struct SampleOptions {
  int64_t max_new_tokens = 200;
  double temperature = 1.0;  // >= 0; 0: greedy
  int64_t top_k = 0;         // keep the k most likely tokens; 0 (or >= vocab): all of them
};

// One draw from softmax(logits / temperature) restricted to the top_k largest logits.
// Ties at the k-th value are kept (so top_k = 1 on a tie keeps every tied token, and the
// lowest index wins only at temperature 0). Uses exactly one rng.uniform() per call unless
// temperature is 0 (no draw at all). Throws on empty logits or a negative temperature/top_k.
int64_t sample_next(std::span<const float> logits, double temperature, int64_t top_k,
                    Generator& rng);

// prompt (at least one id) followed by max_new_tokens sampled ids. The model runs in eval
// mode (no dropout) and its training flag is restored afterwards.
std::vector<int64_t> generate(GPT& model, const std::vector<int64_t>& prompt,
                              const SampleOptions& options, Generator& rng);

// Bytes <-> ids for a byte-level model (vocab 256): "hi" <-> {104, 105}.
std::vector<int64_t> bytes_to_ids(const std::string& text);
std::string ids_to_bytes(const std::vector<int64_t>& ids);

// save_checkpoint plus the GPTConfig in the metadata ("gpt.n_layer", ...), so load_gpt can
// build the model before loading it. The tied weight is written twice (wte.weight and
// lm_head.weight, the state dict's two keys), as copies: safetensors has no aliases.
void save_gpt(const std::string& path, const GPT& model, Metadata extra = {});

// A GPT built from the file's configuration and loaded from it, on `device`. Both keys load
// into the one shared tensor, so the tie survives; the file's two copies must be equal
// (a file whose head differs from its embedding is not a tied GPT: an error naming both).
std::shared_ptr<GPT> load_gpt(const std::string& path, Device device = Device("cpu"),
                              Metadata* metadata = nullptr);

}  // namespace dplab::models
