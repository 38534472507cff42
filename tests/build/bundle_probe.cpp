// bundle_probe.cpp: one program that uses each library gpu_bundle/ stands in for (Eigen, fmt
// header-only, CLI11, doctest, zlib from its static library), so that building and running it
// with -Ddeps_bundle=enabled and the system's copies hidden proves the bundle complete
// (check_gpu_bundle.sh). In a normal build it uses the system's and runs all the same.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <fmt/core.h>
#include <fmt/format.h>
#include <zlib.h>
#include <CLI/CLI.hpp>
#include <Eigen/Dense>

#include <string>

TEST_CASE("the bundled libraries compute") {
  Eigen::Matrix2f a;
  a << 1, 2, 3, 4;
  CHECK((a * a)(1, 1) == 22.0f);
  const std::string text = "dplab";
  CHECK(crc32(0L, reinterpret_cast<const Bytef*>(text.data()), static_cast<uInt>(text.size())) ==
        0x5f38eedau);
  CHECK(fmt::format("{:>5}|{:.2f}", 42, 0.125) == "   42|0.12");
}

int main(int argc, char** argv) {
  CLI::App app{"bundle_probe"};
  int repeat = 1;
  app.add_option("--repeat", repeat);
  CLI11_PARSE(app, argc, argv);
  doctest::Context context;
  const int rc = context.run();
  if (rc == 0) fmt::print("bundle_probe: Eigen, fmt, CLI11, doctest and zlib all work\n");
  return rc;
}
