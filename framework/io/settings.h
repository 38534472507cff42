// settings.h: every DPLAB_* environment variable dplab reads, in one table: its name, what it
// accepts, what a program does with a value it does not accept, and the parser the library
// reads it with. The readers (cpu_dispatch.cpp, allocator.cpp, log.cpp, progress.cpp,
// cuda_devices.cpp, datasets/fashion_mnist.cpp, parallel/comm/init.cpp,
// parallel/transport/mailbox_transport.cpp, parallel/rendezvous/job_token.cpp) call these
// parsers, and dplab-doctor runs the same rows over its environment, so what the doctor says
// of a value is what a program does with it.
// Read next: docs/build_options.md ("Run-time settings"), tools/doctor/checks_settings.cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "framework/backend/cpu/cpu_dispatch.h"
#include "framework/io/log.h"
#include "framework/io/progress.h"

namespace dplab {

// What a program does with a value the setting's parser refuses.
enum class WhenRefused {
  Stop,  // throws the parser's Error where it first reads the variable: the program stops
  Warn,  // logs a warning and goes on as if the variable were unset
};

struct Setting {
  const char* name;     // "DPLAB_TIMEOUT"
  std::string accepts;  // in words, for messages and the docs: "seconds in (0, 604800]"
  const char* example;  // a value it accepts: "30"
  WhenRefused when_refused;
  // Most settings treat an empty value as unset; a timeout or a job token set to "" is a
  // mistake the program names.
  bool empty_is_unset;
  bool secret;  // never printed (the job token): reports say only that it is set
  // The library's parser, its result dropped: throws Error naming the variable when a
  // program would refuse the value.
  void (*check)(const std::string& value);
};

// Every setting, in the order of docs/build_options.md's table.
const std::vector<Setting>& settings();
// The row of `name`; a name not in the table is a bug of the caller (throws Error).
const Setting& setting(std::string_view name);
// The variable as its reader sees it: nullopt when unset, or empty where that means unset.
std::optional<std::string> setting_value(std::string_view name);

// ---- the parsers, one per setting (the two timeouts share one) ----
// Each throws Error that names the variable and what it accepts; none echoes the token.

// DPLAB_TIMEOUT, DPLAB_RENDEZVOUS_TIMEOUT: seconds in (0, kMaxTimeoutSeconds].
inline constexpr double kMaxTimeoutSeconds = 7 * 24 * 3600.0;  // a week: longer is a typo
double parse_timeout_setting(const char* name, const std::string& value);

// DPLAB_WAIT: "spin_us,yield_us", two integers in 0..1000000.
struct WaitSetting {
  int spin_us, yield_us;
};
WaitSetting parse_wait_setting(const std::string& value);

// DPLAB_SEGMENT_KB: the shm transport's slot in KiB, 1 .. 65536; returns bytes.
std::size_t parse_segment_kb_setting(const std::string& value);

// DPLAB_NUM_THREADS: an integer in [1, 1024].
int parse_num_threads_setting(const std::string& value);

// DPLAB_GEMM_ISA: baseline | avx512, and one this CPU and build can run.
GemmIsa parse_gemm_isa_setting(const std::string& value);
// DPLAB_GEMM: eigen | direct | auto.
GemmAlgorithm parse_gemm_setting(const std::string& value);
// DPLAB_CONV: direct | im2col.
ConvAlgorithm parse_conv_setting(const std::string& value);
// DPLAB_FUSE: 0 | 1.
bool parse_fuse_setting(const std::string& value);

// DPLAB_VIRTUAL_GPUS: logical CUDA devices, 1 .. kMaxDevicesPerKind.
int parse_virtual_gpus_setting(const std::string& value);
// DPLAB_DEVICE_MEMORY: a size such as 256M; returns bytes.
int64_t parse_device_memory_setting(const std::string& value);

// DPLAB_PROGRESS: plain | bar | off.
ProgressMode parse_progress_setting(const std::string& value);
// DPLAB_LOG_LEVEL: debug | info | warning | error (any case).
LogLevel parse_log_level_setting(const std::string& value);
// DPLAB_LOG_TIME: 1 (a time stamp on each line) | 0.
bool parse_log_time_setting(const std::string& value);

// DPLAB_DATA: a directory (it returns it).
std::string parse_data_setting(const std::string& value);

// DPLAB_JOB_TOKEN: 16 to 1024 printable ASCII characters without spaces. `where` names the
// token's source in the message ("DPLAB_JOB_TOKEN", "the store's job token").
inline constexpr std::size_t kMinTokenChars = 16;
inline constexpr std::size_t kMaxTokenChars = 1024;
void check_job_token_text(const std::string& token, const std::string& where);

}  // namespace dplab
