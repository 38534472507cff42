#include "framework/error.h"

namespace dplab::detail {

void throw_error(const char* file, int line, const std::string& msg) {
  std::string where = file;
  // keep the path from the project root: "framework/ops/matmul.cpp:42"
  for (const char* root : {"framework/", "parallel/", "models/", "datasets/"}) {
    if (auto pos = where.rfind(root); pos != std::string::npos) {
      where = where.substr(pos);
      break;
    }
  }
  throw Error(fmt::format("{} ({}:{})", msg, where, line));
}

}  // namespace dplab::detail
