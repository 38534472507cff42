// doctest's implementation without a main, compiled once: the suites that bring their own
// main (a program's path first, mpirun, the GPU suites' exit 77) link it instead of compiling
// it into their own file (DOCTEST_CONFIG_IMPLEMENT), which took about as long as the rest of
// such a file.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
