// rank_loop.cpp: see rank_loop.h. The input is copied once out of the request; the result is
// written straight from the rank's buffer, after a head that says how long it is.
#include "rank_loop.h"

#include <signal.h>

#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "broker_transport.h"
#include "harness.h"
#include "observe.h"
#include "remote.h"
#include "wire.h"

namespace hw3::remote {
namespace {

// One call: reads its input, says ready, waits for go, runs the ring and writes the reply.
void answer(const std::string& request, int in_fd, int out_fd, course::broker::BrokerTransport& tr,
            Ring ring, const char* context) {
  course::wire::Reader in(request);
  const int rank = static_cast<int>(in.i64()), size = static_cast<int>(in.i64());
  const std::int64_t count = in.i64();
  const auto dtype = static_cast<DType>(in.u8());
  const auto op = static_cast<Op>(in.u8());
  const bool dry = in.u8() != 0;
  const std::size_t bytes = dry ? 0 : static_cast<std::size_t>(count) * dplab::element_size(dtype);
  const char* input = in.blob(bytes);
  in.end();
  std::vector<std::byte> data(reinterpret_cast<const std::byte*>(input),
                              reinterpret_cast<const std::byte*>(input) + bytes);
  // a dry run's buffer: an address nobody maps (as in the test in one process)
  std::byte* const buffer = dry ? reinterpret_cast<std::byte*>(uintptr_t{1} << 44) : data.data();
  observe::Log log;
  log.dry = dry;
  tr.begin(rank, size);
  tr.set_context(context);
  // the input is here: the judge starts its clock when every rank has said so (remote.h)
  std::string go;
  if (!course::wire::write_frame(out_fd, std::string(1, static_cast<char>(kReady))) ||
      course::wire::read_frame(in_fd, go, 1) != course::wire::Read::kFrame ||
      go != std::string(1, kGo))
    throw std::runtime_error("the judge did not say go");
  course::harness::place() = {.rank = rank, .size = size};  // for a crash report's words
  observe::current() = &log;
  ring(tr, buffer, count, dtype, op);
  observe::current() = nullptr;
  course::harness::place() = {};
  // the reply's parts, its buffer written straight from where it lies: the judge's clock
  // stops at the reply's first byte
  course::wire::Writer head, out;
  head.u8(0);
  const std::uint64_t length = data.size();
  head.i64(static_cast<std::int64_t>(length));
  out.i64(log.divides);
  out.i64(static_cast<std::int64_t>(log.exchanges.size()));
  for (const observe::Exchange& e : log.exchanges) {
    out.i64(e.to);
    out.i64(e.from);
    out.i64(e.out - buffer);
    out.i64(e.out_bytes);
    out.i64(e.in - buffer);
    out.i64(e.in_bytes);
    out.u8(static_cast<std::uint8_t>(e.how));
  }
  if (!course::wire::write_frame_parts(
          out_fd,
          {head.bytes(), std::string_view(reinterpret_cast<const char*>(data.data()), data.size()),
           out.bytes()}))
    throw std::runtime_error("the judge is gone");
}

}  // namespace

void serve_calls(int in, int out, int to_broker, int from_broker, Ring ring, const char* context) {
  ::signal(SIGPIPE, SIG_IGN);
  course::broker::BrokerTransport tr(to_broker, from_broker, kSegmentBytes, kWait);
  std::string request;
  while (course::wire::read_frame(in, request, UINT32_MAX) == course::wire::Read::kFrame) {
    std::string reply;
    try {
      answer(request, in, out, tr, ring, context);
      std::fflush(stdout);  // what the ring printed comes before its result is judged
      continue;
    } catch (const std::exception& e) {
      reply = course::wire::error_reply(e.what());
    } catch (...) {
      reply = course::wire::error_reply("an exception that is not a std::exception");
    }
    observe::current() = nullptr;  // the ring threw while it was watched
    std::fflush(stdout);
    if (!course::wire::write_frame(out, reply, UINT32_MAX)) break;
  }
}

}  // namespace hw3::remote
