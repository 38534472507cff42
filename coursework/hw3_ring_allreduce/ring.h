// ring.h: what hw3 gives you and what it asks of you. You write ring_all_reduce() in
// ring_allreduce.cpp; exchange() and divide() below are given (support.cpp).
// A Transport (parallel/transport/transport.h) links every pair of ranks with a mailbox of
// a few 128 KiB slots; exchange() streams one buffer to a peer while another streams in,
// segment by segment, so that no rank ever waits for a whole buffer before receiving.
// Read the handout (README.md) first: it gives the chunk rule and the ring's schedule.
#pragma once
#include <cstddef>
#include <cstdint>

#include "framework/tensor/dtype.h"
#include "parallel/transport/transport.h"

namespace hw3 {

using dplab::DType;
using dplab::parallel::Transport;

enum class Op { Sum, Avg };           // Avg: the sum divided by the number of ranks
enum class Combine { Reduce, Copy };  // what exchange() does with the bytes that arrive

// Sends out_bytes from `out` to rank `to` while receiving in_bytes from rank `from` into
// `in`: Combine::Reduce adds them element-wise (as `dtype`) into what `in` holds,
// Combine::Copy overwrites it. Either side may be 0 bytes. Throws if the peer sends a
// different number of bytes than in_bytes.
void exchange(Transport& tr, int to, const std::byte* out, int64_t out_bytes, int from,
              std::byte* in, int64_t in_bytes, Combine how, DType dtype);

// data[i] /= n for count elements of a floating-point dtype (Float32 or Float16).
void divide(std::byte* data, int64_t count, DType dtype, int n);

// YOUR TASK. All-reduce `count` elements of `dtype` at `data` over the tr.size() ranks of
// `tr` (every rank calls it with its own data and the same count, dtype and op): afterwards
// every rank holds the element-wise sum (or average) of all ranks' data. Use the ring:
// reduce-scatter, then all-gather, each rank sending 2(N-1)/N of the data in all.
void ring_all_reduce(Transport& tr, std::byte* data, int64_t count, DType dtype, Op op);

}  // namespace hw3
