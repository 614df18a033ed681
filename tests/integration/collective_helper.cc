// A rank of a collective group started by `shoal launch` (for
// collective_test): joins group "it" through the head's key-value store with
// the launch's RANK and WORLD_SIZE, all-reduces, and prints what it saw.
//
//   collective_test_helper allreduce   every rank all-reduces twice
//   collective_test_helper die         rank 3 leaves after the first
//                                      all-reduce; the others report the
//                                      error of the second
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "shoal/collective.h"

int main(int argc, char** argv) {
  namespace coll = shoal::collective;
  const bool die = argc > 1 && std::strcmp(argv[1], "die") == 0;
  const char* rank_env = getenv("RANK");
  const char* world_env = getenv("WORLD_SIZE");
  if (rank_env == nullptr || world_env == nullptr) {
    fprintf(stderr, "run me with shoal launch (RANK and WORLD_SIZE)\n");
    return 2;
  }
  const int rank = atoi(rank_env);
  const int world = atoi(world_env);
  try {
    coll::GroupOptions options;
    options.timeout = std::chrono::milliseconds(20000);
    auto group = coll::Group::Create("it", world, rank, options);
    std::vector<float> v(1 << 20, static_cast<float>(rank + 1));
    coll::AllReduce(*group, v);
    const float expected = world * (world + 1) / 2.0f;
    bool ok = v.front() == expected && v.back() == expected;
    if (die && rank == 3) {
      printf("rank 3 leaving\n");
      fflush(stdout);
      _exit(0);
    }
    coll::AllReduce(*group, v);
    ok = ok && v.back() == expected * world;
    printf("rank %d of %d backend %s all-reduce %s\n", rank, world,
           coll::BackendName(group->backend()), ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
  } catch (const coll::CollectiveError& e) {
    printf("rank %d error: %s\n", rank, e.what());
    return 1;
  }
}
