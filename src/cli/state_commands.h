// `shoal list`, `shoal summary tasks` and `shoal logs`: the cluster's state
// as the head keeps it (nodes, jobs, actors, placement groups, gangs, task
// records) or asks the nodes' agents for (objects, logs).
#ifndef SHOAL_CLI_STATE_COMMANDS_H_
#define SHOAL_CLI_STATE_COMMANDS_H_

#include <string>
#include <vector>

#include "head_client/head_client.h"

namespace shoal::cli {

struct StateQuery {
  std::string format = "table";      // or json
  std::vector<std::string> filters;  // KEY=VALUE
  int limit = 100;
};

// `what`: nodes, jobs, actors, tasks, objects, placement-groups, gangs.
int ListState(rpc::HeadClient& head, const std::string& what,
              const StateQuery& query);
int SummarizeTasks(rpc::HeadClient& head, const StateQuery& query);

struct LogsQuery {
  // Empty: list the logs of every node. Else one of: head; agent [NODE];
  // worker ID; task ID; actor ID; gang ID [RANK]; or a log's file name.
  std::vector<std::string> what;
  std::string node_id;  // the node to look on (default: the head's, or
                        // wherever the log is found)
  bool follow = false;
  int tail = -1;  // print only the last N lines (-1: all)
};
int ShowLogs(rpc::HeadClient& head, const LogsQuery& query);

}  // namespace shoal::cli

#endif  // SHOAL_CLI_STATE_COMMANDS_H_
