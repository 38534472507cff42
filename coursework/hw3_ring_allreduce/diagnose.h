// diagnose.h: why a ring went wrong, in the handout's words. Given what a rank asked of
// exchange() and divide() (observe.h), compare it with the schedule of README sections 2-4:
// at reduce-scatter step s rank r sends chunk r-s to r+1 and adds chunk r-s-1 from r-1; at
// all-gather step s it sends chunk r+1-s and copies chunk r-s. The first difference names
// the mistake: the direction, the chunk rule (the remainder on the last chunk), a chunk
// sent out of turn, Copy for Reduce or Reduce for Copy, a phase that ends before its N-1
// steps, steps too many or too few, the average taken twice. offset_words() checks where in
// the buffer each exchange pointed, for the test whose offsets pass 2^31. A ring written without exchange() gets no diagnosis here (its
// result and its bytes still speak).
// Read next: grading.h.
#pragma once
#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
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

inline std::string number_words(int64_t v) {  // 5,336
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (v < 0 ? "-" : "") + out;
}
inline std::string bytes_words(int64_t b) { return number_words(b) + " B"; }  // 5,336 B

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
    if (st.reduce_scatter && e.how == Combine::Copy && k > 0)  // every step before added: all-gather came early
      return fmt::format("rank {} of {} ran reduce-scatter for {} step{} where a ring of {} ranks needs N-1 = {}: its "
                         "exchange() number {} already copied (Combine::Copy, all-gather's). Each phase takes N-1 "
                         "steps (README sections 3 and 4)", r, n, k, k == 1 ? "" : "s", n, n - 1, k + 1);
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
  if (const int done = static_cast<int>(log.exchanges.size()); done < steps && done >= n - 1)
    return fmt::format("rank {} of {} ran all-gather for {} step{} where a ring of {} ranks needs N-1 = {} (README "
                       "section 4)", r, n, done - (n - 1), done - (n - 1) == 1 ? "" : "s", n, n - 1);
  if (static_cast<int>(log.exchanges.size()) < steps)
    return fmt::format("rank {} of {} called exchange() only {} times; a ring of {} ranks takes 2(N-1) = {} steps",
                       r, n, log.exchanges.size(), n, steps);
  if (average && log.divides > 1)
    return fmt::format("divide() ran {} times on rank {}: the average divides by N once, at the end", log.divides, r);
  if (!average && log.divides > 0) return fmt::format("divide() ran on rank {}, but a sum divides by nothing", r);
  return "";
}

// Where rank r's exchanges pointed, against the chunks they should move: no words when every
// exchange of the schedule sent and received its chunk's bytes at its chunk's offset. For
// a buffer whose offsets pass 2^31 bytes (or elements), a value off by a multiple of 2^32
// is named for what it is: a 32-bit int that wrapped around.
struct OffsetCheck {
  std::string words;
  bool wrapped = false;
};
inline OffsetCheck offset_words(int r, int n, int64_t count, int64_t es, const std::byte* base,
                                const observe::Log& log) {
  const int steps = 2 * (n - 1);
  if (static_cast<int>(log.exchanges.size()) != steps)
    return {fmt::format("rank {} of {} called exchange() {} times; a ring of {} ranks takes 2(N-1) = {} steps", r, n,
                        log.exchanges.size(), n, steps)};
  auto wrapped = [&](int64_t got, int64_t want) {  // equal modulo 2^32, in bytes or in elements
    constexpr int64_t k32 = int64_t{1} << 32;
    return got != want && ((got - want) % k32 == 0 || (got % es == 0 && (got / es - want / es) % k32 == 0));
  };
  for (int k = 0; k < steps; ++k) {
    const observe::Exchange& e = log.exchanges[k];
    const Step st = step_of(r, n, k);
    const char* phase = st.reduce_scatter ? "reduce-scatter" : "all-gather";
    struct Side {
      const char* verb;
      int chunk;
      int64_t at, bytes;
    };
    for (const Side& side : {Side{"to send", st.out_chunk, e.out - base, e.out_bytes},
                             Side{"to receive", st.in_chunk, e.in - base, e.in_bytes}}) {
      const int64_t want_at = chunk_first(count, n, side.chunk) * es, want_bytes = chunk_length(count, n, side.chunk) * es;
      if (side.at == want_at && side.bytes == want_bytes) continue;
      const std::string why = fmt::format("in {} step {} rank {} of {} gave exchange() {} at byte {} of its buffer "
                                          "{} chunk {}, which is {} at byte {}", phase, st.s, r, n,
                                          bytes_words(side.bytes), number_words(side.at), side.verb, side.chunk,
                                          bytes_words(want_bytes), number_words(want_at));
      if (wrapped(side.at, want_at) || wrapped(side.bytes, want_bytes))
        return {why + ": it wrapped around at 2^32, so it was computed in a 32-bit int. Keep counts, offsets and "
                      "sizes in int64_t, as count is", true};
      return {why + ": this buffer's offsets pass 2^31 = 2,147,483,648; were they computed in a 32-bit int? Keep "
                    "counts, offsets and sizes in int64_t, as count is"};
    }
  }
  return {};
}

}  // namespace hw3::grading
