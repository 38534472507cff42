// diagnose.h: why a ring went wrong, in the handout's words. Given what a rank asked of
// exchange() and divide() (observe.h), compare it with the schedule of README sections 2-4:
// at reduce-scatter step s rank r sends chunk r-s to r+1 and adds chunk r-s-1 from r-1; at
// all-gather step s it sends chunk r+1-s and copies chunk r-s. The first difference names
// the mistake: the direction, the chunk rule (the remainder on the last chunk), a chunk
// sent out of turn, Copy for Reduce or Reduce for Copy, steps too many or too few, the
// average taken twice. A ring written without exchange() gets no diagnosis here (its
// result and its bytes still speak).
// Read next: grading.h.
#pragma once
#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

#include "observe.h"

namespace hw3::grading {

inline int mod_n(int a, int n) { return ((a % n) + n) % n; }

// The chunk rule of the handout: the first count % N chunks one element longer.
inline int64_t chunk_length(int64_t count, int n, int i) { return count / n + (i < count % n ? 1 : 0); }
inline int64_t chunk_first(int64_t count, int n, int i) {
  return i * (count / n) + std::min<int64_t>(i, count % n);
}
inline int chunk_of(int64_t count, int n, int64_t element) {
  for (int c = 0; c < n; ++c)
    if (element < chunk_first(count, n, c) + chunk_length(count, n, c)) return c;
  return n - 1;
}

inline std::string bytes_words(int64_t b) {  // 5,336 B
  std::string digits = std::to_string(b < 0 ? -b : b), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (b < 0 ? "-" : "") + out + " B";
}

inline std::string elements_words(int64_t first, int64_t len) {
  if (len <= 0) return "no elements";
  return len == 1 ? fmt::format("1 element ({})", first)
                  : fmt::format("{} elements ({} to {})", len, first, first + len - 1);
}

struct Step {  // what the schedule asks of rank r at its k-th exchange (k from 0)
  bool reduce_scatter;
  int s, out_chunk, in_chunk;
};
inline Step step_of(int r, int n, int k) {
  if (k < n - 1) return {true, k, mod_n(r - k, n), mod_n(r - k - 1, n)};
  const int s = k - (n - 1);
  return {false, s, mod_n(r + 1 - s, n), mod_n(r - s, n)};
}

// What rank r's chunks were, as its exchanges used them: chunk c -> (first, length) in elements.
struct ChunkSeen {
  bool seen = false;
  int64_t first = 0, length = 0;
};

// The student's chunk sizes against the rule: "" when they agree.
inline std::string chunk_rule_words(int n, int64_t count, const std::vector<ChunkSeen>& seen) {
  const int64_t base = count / n, extra = count % n;
  bool remainder_last = extra > 0;
  for (int c = 0; c < n && remainder_last; ++c)
    if (seen[c].seen) remainder_last = seen[c].length == base + (c == n - 1 ? extra : 0);
  for (int c = 0; c < n; ++c) {
    if (!seen[c].seen) continue;
    const int64_t first = chunk_first(count, n, c), len = chunk_length(count, n, c);
    if (seen[c].first == first && seen[c].length == len) continue;
    std::string why = fmt::format("chunk {} should hold {}, yours holds {}", c, elements_words(first, len),
                                  elements_words(seen[c].first, seen[c].length));
    if (remainder_last)
      why += fmt::format(": your last chunk takes the whole remainder ({} % {} = {}); the handout's rule gives one "
                         "more element to each of the first {} (README section 2)", count, n, extra,
                         extra == 1 ? std::string("chunk") : fmt::format("{} chunks", extra));
    return why;
  }
  return "";
}

// The first place where rank r's exchanges leave the schedule, in words; "" when they follow it.
inline std::string schedule_words(int r, int n, int64_t count, int64_t es, const std::byte* base,
                                  const observe::Log& log, bool average) {
  if (n == 1 || log.exchanges.empty()) {
    if (n == 1 && !log.exchanges.empty())
      return fmt::format("rank 0 of 1 called exchange() {} times: one rank already holds the sum", log.exchanges.size());
    return log.divides > 1 ? fmt::format("divide() ran {} times on rank {}: the average divides by N once, at the end",
                                         log.divides, r)
                           : "";
  }
  const int right = mod_n(r + 1, n), left = mod_n(r - 1, n), steps = 2 * (n - 1);
  std::vector<ChunkSeen> seen(n);
  std::string out_of_turn;
  for (size_t k = 0; k < log.exchanges.size(); ++k) {
    const observe::Exchange& e = log.exchanges[k];
    if (static_cast<int>(k) >= steps)
      return fmt::format("rank {} of {} called exchange() {} times; a ring of {} ranks takes 2(N-1) = {} steps ({} of "
                         "reduce-scatter, then {} of all-gather)", r, n, log.exchanges.size(), n, steps, n - 1, n - 1);
    const Step st = step_of(r, n, static_cast<int>(k));
    const char* phase = st.reduce_scatter ? "reduce-scatter" : "all-gather";
    if (n > 2 && e.to == left && e.from == right)
      return fmt::format("in {} step {} rank {} of {} sent to rank {} and received from rank {}: sends and receives go "
                         "the wrong way round (a ring sends to the right neighbour r+1 = {} and receives from the left "
                         "r-1 = {})", phase, st.s, r, n, e.to, e.from, right, left);
    if (e.to != right || e.from != left)
      return fmt::format("in {} step {} rank {} of {} sent to rank {} and received from rank {}; a ring sends to its "
                         "right neighbour (rank {}) and receives from its left (rank {})", phase, st.s, r, n, e.to,
                         e.from, right, left);
    if (st.reduce_scatter && e.how == Combine::Copy)
      return fmt::format("in reduce-scatter step {} rank {} of {} overwrote chunk {} with what arrived (Combine::Copy): "
                         "reduce-scatter adds it (Combine::Reduce), or the sum keeps only the last rank's part", st.s,
                         r, n, st.in_chunk);
    if (!st.reduce_scatter && e.how == Combine::Reduce)
      return fmt::format("in all-gather step {} rank {} of {} added chunk {} to its copy (Combine::Reduce): all-gather "
                         "copies the finished sums (Combine::Copy), or they are counted again", st.s, r, n,
                         st.in_chunk);
    const int64_t out_first = (e.out - base) / es, in_first = (e.in - base) / es;
    for (auto [c, first, bytes] : {std::tuple{st.out_chunk, out_first, e.out_bytes},
                                   std::tuple{st.in_chunk, in_first, e.in_bytes}}) {
      if (!seen[c].seen) seen[c] = {true, first, bytes / es};
    }
    if (out_of_turn.empty() && out_first != chunk_first(count, n, st.out_chunk) &&
        e.out_bytes / es == chunk_length(count, n, chunk_of(count, n, out_first)) &&
        out_first == chunk_first(count, n, chunk_of(count, n, out_first)))
      out_of_turn = fmt::format("in {} step {} rank {} of {} sent chunk {}; the schedule sends chunk {} there "
                                "(README sections 3 and 4)", phase, st.s, r, n, chunk_of(count, n, out_first),
                                st.out_chunk);
  }
  if (std::string rule = chunk_rule_words(n, count, seen); !rule.empty()) return rule;
  if (!out_of_turn.empty()) return out_of_turn;
  if (static_cast<int>(log.exchanges.size()) < steps)
    return fmt::format("rank {} of {} called exchange() only {} times; a ring of {} ranks takes 2(N-1) = {} steps",
                       r, n, log.exchanges.size(), n, steps);
  if (average && log.divides > 1)
    return fmt::format("divide() ran {} times on rank {}: the average divides by N once, at the end", log.divides, r);
  if (!average && log.divides > 0) return fmt::format("divide() ran on rank {}, but a sum divides by nothing", r);
  return "";
}

}  // namespace hw3::grading
