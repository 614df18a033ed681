// Joining a cluster (or starting a local one) and leaving it.
#ifndef SHOAL_INIT_H_
#define SHOAL_INIT_H_

#include <map>
#include <string>

namespace shoal {

// Init() finds its cluster as every `shoal` command does:
//  - address: `address`, else SHOAL_ADDRESS, else the cluster that
//    `shoal start` started from this host's temp dir (`temp_dir`, else
//    SHOAL_TEMP_DIR, else /tmp/shoal) when one is running there, else a new
//    local cluster of this program's own (a head and a node agent as child
//    processes, stopped by Shutdown() or at exit), as ray.init() does;
//  - token: `token`, else SHOAL_TOKEN, else that cluster's session folder on
//    this host.
struct InitOptions {
  std::string address;
  std::string token;
  // Where to look for a running cluster and to put a local cluster's session
  // folder; the local cluster's CPUs (default: this host's) and extra
  // resources.
  std::string temp_dir;
  double num_cpus = -1;
  std::map<std::string, double> resources;
  // The local cluster's dashboard (REST API and /metrics): -1 none; else
  // this port, or any free one when it is taken (0: any free one).
  int dashboard_port = -1;
};

void Init();
void Init(const InitOptions& options);
// Returns leases, disconnects, and stops the local cluster if Init started
// one. Objects and refs are invalid afterwards.
void Shutdown();
bool IsInitialized();

}  // namespace shoal

#endif  // SHOAL_INIT_H_
