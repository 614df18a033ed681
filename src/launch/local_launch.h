// shoal::Launch: one process per local device, each running a registered
// function (the device-centric mode of PyTorch/XLA's torch_xla.launch).
//
// The calling process (normally a task that holds every chip or GPU of its
// host) re-executes its own binary once per device with the environment of
// src/launch/framework_env.h for that device, waits for every child, and
// returns their results in local-rank order. If one child fails, the others
// are stopped and the error names the rank.
#ifndef SHOAL_LAUNCH_LOCAL_LAUNCH_H_
#define SHOAL_LAUNCH_LOCAL_LAUNCH_H_

namespace shoal::internal {

// The entry point of a child (SHOAL_ROLE=launch-child): runs the function
// named in its environment and writes the result to its result pipe.
int RunLaunchChild();

}  // namespace shoal::internal

#endif  // SHOAL_LAUNCH_LOCAL_LAUNCH_H_
