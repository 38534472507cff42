// channel.h: how a test process reports to the grader. The grader opens a pipe before it
// starts the test and passes its write end (DPLAB_COURSE_CHANNEL_FD) and, through a second
// pipe that it closes at once, a random token made for this one run (DPLAB_COURSE_TOKEN_FD).
// Every record is one JSON line carrying that token; the grader ignores stdout for verdicts
// and fails a test whose channel carried a record without the token, or no verdict at all
// (the process exited, even with status 0, before its checks ran). Without those variables
// (a student's own `meson test`), records print to stdout in words instead.
// Read next: grader_main.cpp (the records a test sends), crash.cpp.
#pragma once
#include <string>

namespace course::harness {

// Reads the token and takes the channel over; false with a reason if the grader's
// variables are set but the pipes are not what they should be.
bool open_channel(std::string& why);
bool channel_open();

// Sends one record: {"token": ..., "kind": kind, <fields_json>}. fields_json is a list of
// "\"name\": value" pairs already in JSON, without braces. Safe from several threads; the
// crash handler uses send_raw_record, which takes no lock and allocates nothing.
void send_record(const char* kind, const std::string& fields_json);
void send_raw_record(const char* text, std::size_t len);
const char* token();

std::string json_string(const std::string& text);  // "..." with JSON escapes

}  // namespace course::harness
