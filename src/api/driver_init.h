// shoal::Init for a driver that is not a C++ program built with Shoal (the
// Python frontend): the same rule for finding the cluster, with the program
// a local cluster runs as its head and agent, and whether this program can
// be its own workers.
#ifndef SHOAL_API_DRIVER_INIT_H_
#define SHOAL_API_DRIVER_INIT_H_

#include <string>

#include "api/worker_command.h"
#include "shoal/init.h"

namespace shoal::internal {

struct DriverProgram {
  // Run as `cluster_program _head ...` and `... _agent ...` when Init starts
  // a local cluster; empty: this program, or, when workers_run_this_program
  // is false, no local cluster (Init fails when it finds none).
  std::string cluster_program;
  // False: nothing is uploaded for workers, and C++ tasks and actors
  // submitted from here fail saying why.
  bool workers_run_this_program = true;
  // With workers_run_this_program false: what the nodes run as this
  // program's workers (RuntimeOptions::worker_command).
  WorkerCommand worker_command;
  // RuntimeOptions::cpp_program.
  std::string cpp_program;
  // RuntimeOptions::version: a frontend's own (Python's shoal.__version__).
  std::string version;
};

// Throws shoal::Error as shoal::Init does.
void InitDriver(const InitOptions& options, const DriverProgram& program);

}  // namespace shoal::internal

#endif  // SHOAL_API_DRIVER_INIT_H_
