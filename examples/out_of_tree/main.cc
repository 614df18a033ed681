// A user's program built against an installed (or built) Shoal: a struct
// crosses the task boundary both ways, and refs chain tasks together.
//
// With SHOAL_ADDRESS set it uses that cluster; otherwise shoal::Init() starts
// a local one. Exits 0 only if every result is right.
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "shoal/api.h"

struct Rect {
  std::string name;
  int64_t width = 0;
  int64_t height = 0;
  int64_t area = 0;
  MSGPACK_DEFINE(name, width, height, area);
};

// Runs in a worker: fills in the area.
Rect Measure(Rect r) {
  r.area = r.width * r.height;
  r.name += " (measured)";
  return r;
}

int64_t TotalArea(std::vector<Rect> rects) {
  int64_t total = 0;
  for (const Rect& r : rects) total += r.area;
  return total;
}

SHOAL_REMOTE(Measure, TotalArea);

int main() {
  shoal::Init();
  std::vector<shoal::ObjectRef<Rect>> refs;
  for (int64_t i = 1; i <= 5; ++i) {
    refs.push_back(shoal::Task(Measure).Remote(
        Rect{"rect" + std::to_string(i), i, i + 1, 0}));
  }

  bool ok = true;
  std::vector<Rect> measured = shoal::Get(refs);
  for (size_t k = 0; k < measured.size(); ++k) {
    const Rect& r = measured[k];
    int64_t i = static_cast<int64_t>(k) + 1;
    bool right = r.name == "rect" + std::to_string(i) + " (measured)" &&
                 r.width == i && r.height == i + 1 && r.area == i * (i + 1);
    ok = ok && right;
    std::cout << r.name << ": " << r.width << " x " << r.height << " = "
              << r.area << (right ? "" : "  WRONG") << "\n";
  }

  // A put object as the argument of another task.
  auto total_ref = shoal::Task(TotalArea).Remote(shoal::Put(measured));
  int64_t total = shoal::Get(total_ref);
  const int64_t expected = 2 + 6 + 12 + 20 + 30;
  ok = ok && total == expected;
  std::cout << "total area " << total << " (expected " << expected << ")\n";

  shoal::Shutdown();
  std::cout << (ok ? "OK" : "FAILED") << "\n";
  return ok ? 0 : 1;
}
