// C++ functions that the Python tests call across languages
// (test_cpp_functions.py): shoal.cpp_function("Add").remote(1, 2) runs in
// this program's workers. Its main() is not for running.
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "shoal/api.h"

namespace {

int64_t Add(int64_t a, int64_t b) { return a + b; }

std::string Greet(std::string name) { return "hello, " + name; }

double Mean(std::vector<double> values) {
  if (values.empty()) throw std::invalid_argument("Mean of nothing");
  double sum = 0;
  for (double v : values) sum += v;
  return sum / static_cast<double>(values.size());
}

std::string WhereAmI() { return shoal::CurrentNodeId(); }

}  // namespace

SHOAL_REMOTE(Add, Greet, Mean, WhereAmI);

int main() {
  std::puts("cpp_functions: the Python tests run this program's functions");
  return 0;
}
