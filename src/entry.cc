// Chooses the role of a process that links Shoal before main() runs.
//
// Node agents re-execute the user's binary as a worker (SHOAL_ROLE=worker),
// and shoal::Init() re-executes it as the local cluster's head and agent
// (SHOAL_ROLE=cli). The program's own main() must not run then, yet the
// program's static initializers must (SHOAL_REMOTE registers functions in
// them). glibc's __libc_start_main runs the initializers and then calls main:
// this definition, linked into the program, takes the real one's place and
// swaps main for the role's entry point.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "cli/cli.h"
#include "common/environment.h"
#include "common/process.h"
#include "launch/local_launch.h"
#include "worker/worker_main.h"

namespace {

using MainFn = int (*)(int, char**, char**);
MainFn g_program_main = nullptr;

int RoleMain(int argc, char** argv, char** envp) {
  const std::string role = shoal::env::Get(shoal::env::Var::kRole);
  if (role == "worker") return shoal::internal::RunWorker();
  if (role == "launch-child") return shoal::internal::RunLaunchChild();
  if (role == "group-guard" && argc > 1) {
    // A job's entrypoint, under a guard that ends its process group when
    // the node agent that started it dies (common/process.h).
    return shoal::RunGroupGuard(
        argv + 1, static_cast<int>(
                      shoal::env::GetInt(shoal::env::Var::kGroupGuardGraceMs)));
  }
  if (role == "cli") {
    return shoal::cli::Main(argc, argv);
  }
  return g_program_main(argc, argv, envp);
}

}  // namespace

extern "C" int __libc_start_main(MainFn main, int argc, char** argv,
                                 void (*init)(), void (*fini)(),
                                 void (*rtld_fini)(), void* stack_end) {
  using RealStart =
      int (*)(MainFn, int, char**, void (*)(), void (*)(), void (*)(), void*);
  auto real =
      reinterpret_cast<RealStart>(dlsym(RTLD_NEXT, "__libc_start_main"));
  g_program_main = main;
  return real(RoleMain, argc, argv, init, fini, rtld_fini, stack_end);
}
