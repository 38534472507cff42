// program_pch.h: what nearly every test, tutorial and tool includes before its own code (the
// standard library, fmt, dplab's public headers), parsed once per build as a precompiled
// header instead of once per file: that parsing was about a third of each test file's
// compile. tools/pch/meson.build says how it is made and which programs use it.
// Nothing here changes what a program means: a file still includes what it uses (a build
// without the precompiled header, such as clang's fuzz build, still compiles every file).
// (no #pragma once: it is compiled as a header of its own, and only ever reaches a file by -include)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/core.h>
#include <fmt/format.h>

#include "framework/dplab.h"
#include "framework/ops/ops.h"
#include "framework/optim/sgd.h"
#include "models/mlp.h"
#include "models/toy.h"
#include "parallel/comm/init.h"
#include "parallel/comm/process_group.h"
#include "parallel/ddp/distributed_data_parallel.h"
