// grader_main.cpp: the main() of every assignment's test program (doctest's own). The grader
// (dplab_course.py) builds a student's files with the assignment's tests and this file, then
// runs each test case on its own, with a time limit.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
