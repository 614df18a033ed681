// Shoal's C++ API: remote tasks, objects and the cluster, in the manner of
// Ray's core API.
//
//   int Add(int a, int b) { return a + b; }
//   SHOAL_REMOTE(Add);
//
//   int main() {
//     shoal::Init();  // SHOAL_ADDRESS, else a local cluster
//     auto sum = shoal::Task(Add).Remote(1, 2);
//     auto more = shoal::Task(Add).SetResource("CPU", 0.5).Remote(sum, 10);
//     std::cout << shoal::Get(more) << "\n";  // 13
//     shoal::Shutdown();
//   }
//
// The program's binary is re-executed by node agents as its workers: worker
// mode is chosen by the runtime before main() runs, so main() stays the
// driver's.
//
// Threading: every function may be called from any thread after Init().
//
// This header includes the whole API; each part has a header of its own:
// init.h, errors.h, object.h, task.h, actor.h, placement.h, launch.h,
// cluster.h, remote.h (SHOAL_REMOTE), and apart from these collective.h.
#ifndef SHOAL_SHOAL_H_
#define SHOAL_SHOAL_H_

#include "shoal/actor.h"          // IWYU pragma: export
#include "shoal/buffer.h"         // IWYU pragma: export
#include "shoal/cluster.h"        // IWYU pragma: export
#include "shoal/errors.h"         // IWYU pragma: export
#include "shoal/init.h"           // IWYU pragma: export
#include "shoal/launch.h"         // IWYU pragma: export
#include "shoal/object.h"         // IWYU pragma: export
#include "shoal/placement.h"      // IWYU pragma: export
#include "shoal/remote.h"         // IWYU pragma: export
#include "shoal/serialization.h"  // IWYU pragma: export
#include "shoal/task.h"           // IWYU pragma: export
#include "shoal/tpu.h"            // IWYU pragma: export

#endif  // SHOAL_SHOAL_H_
