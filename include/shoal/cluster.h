// The cluster as a program sees it: nodes, resources, its own devices.
#ifndef SHOAL_CLUSTER_H_
#define SHOAL_CLUSTER_H_

#include <map>
#include <string>
#include <vector>

namespace shoal {

struct NodeInfo {
  std::string node_id;
  std::string address;
  std::string hostname;
  bool alive = false;
  bool is_head_node = false;
  std::map<std::string, double> total;
  std::map<std::string, double> available;
  std::map<std::string, std::string> labels;
};

// In a worker: the node it runs on; in a driver: "" (it is no node's).
std::string CurrentNodeId();

// The accelerator devices this process holds (a worker whose task asked for
// TPU or GPU). The node agent gives each holder distinct devices and sets the
// variables its framework reads (TPU_VISIBLE_CHIPS and the bounds variables,
// CUDA_VISIBLE_DEVICES).
struct AssignedDevices {
  std::string kind;              // "TPU", "GPU"; "" when it holds none
  std::vector<int> ids;          // device ids on its node
  std::string accelerator_type;  // "TPU-V5P", "H200"
  std::string slice_name;        // TPU slice (TPU_NAME), if any
  int worker_id = -1;            // TPU worker id of its host, if any
};
AssignedDevices GetAssignedDevices();

// Totals and free amounts over alive nodes.
std::map<std::string, double> ClusterResources();
std::map<std::string, double> AvailableResources();
std::vector<NodeInfo> Nodes();

}  // namespace shoal

#endif  // SHOAL_CLUSTER_H_
