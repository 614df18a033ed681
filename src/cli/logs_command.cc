#include "cli/logs_command.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <ostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/cluster_api.h"
#include "cli/common.h"
#include "cli/context.h"
#include "cli/exit_status.h"
#include "cli/flag_checks.h"
#include "cli/job_commands.h"
#include "cli/state_commands.h"
#include "common/status_macros.h"

namespace shoal::cli::logs {
namespace {

// Reads log `name` of node `node` (the head's: "") and prints it: the
// last `tail` lines (all: -1), then, following, what is added to it.
absl::StatusOr<int> PrintLog(ClusterApi& head, const std::string& node,
                             const std::string& name, int tail, bool follow,
                             std::ostream& out) {
  proto::ReadLogRequest req;
  req.set_node_id(node);
  req.set_name(name);
  if (tail >= 0) req.set_offset(-std::max<int64_t>(64 << 10, tail * 512LL));
  bool first = true;
  while (true) {
    auto chunk = head.ReadLog(req);
    if (!chunk.ok()) return StateError("read the log", chunk.status());
    std::string data = chunk->data();
    if (first && tail >= 0) {
      // The last `tail` lines of what was read.
      size_t pos = data.size();
      if (pos > 0 && data[pos - 1] == '\n') --pos;
      for (int n = 0; n < tail && pos != std::string::npos && pos > 0; ++n) {
        pos = data.rfind('\n', pos - 1);
      }
      if (pos != std::string::npos && pos > 0) data.erase(0, pos + 1);
      if (tail == 0) data.clear();
    }
    first = false;
    out << data << std::flush;
    req.set_offset(chunk->next_offset());
    if (chunk->next_offset() >= chunk->size()) {
      if (!follow) return 0;
      req.set_wait_ms(5000);
    }
  }
}

// The node that has log `name` (`node` when set).
absl::StatusOr<std::string> FindLog(ClusterApi& head, const std::string& node,
                                    const std::string& name) {
  proto::ListLogsRequest req;
  req.set_node_id(node);
  ASSIGN_OR_RETURN(proto::LogList list, head.ListLogs(req));
  std::vector<std::string> nodes;
  for (const proto::LogFile& f : list.files()) {
    if (f.name() == name) nodes.push_back(f.node_id());
  }
  if (nodes.size() == 1) return nodes[0];
  if (nodes.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "no node has a log named ", name,
        list.errors().empty()
            ? ""
            : absl::StrCat(" (", absl::StrJoin(list.errors(), "; "), ")"),
        "; `shoal logs` lists them"));
  }
  return absl::InvalidArgumentError(absl::StrCat(name, " is on nodes ",
                                                 absl::StrJoin(nodes, ", "),
                                                 ": say which with --node-id"));
}

absl::StatusOr<int> ListLogs(ClusterApi& head, const std::string& node,
                             std::ostream& out, std::ostream& err) {
  proto::ListLogsRequest req;
  req.set_node_id(node);
  auto list = head.ListLogs(req);
  if (!list.ok()) return StateError("list the logs", list.status());
  std::vector<Row> rows;
  for (const proto::LogFile& f : list->files()) {
    rows.push_back({{"node_id", f.node_id()},
                    {"name", f.name()},
                    {"size", absl::StrCat(f.size())}});
  }
  PrintTable(rows, out);
  for (const std::string& e : list->errors()) err << "(" << e << ")\n";
  out << "(shoal logs NAME [--node-id N] prints one; shoal logs head | "
         "agent [NODE] | worker ID | task ID | actor ID | gang ID [RANK] "
         "| job ID find it by id)\n";
  return 0;
}

// One `shoal logs WHAT ...` against one head.
class LogReader {
 public:
  LogReader(ClusterApi& head, const Flags& f, std::ostream& out)
      : head_(head), f_(f), out_(out) {}

  absl::StatusOr<int> Log(const std::string& node, const std::string& name) {
    return PrintLog(head_, node, name, f_.tail, f_.follow, out_);
  }

  // The log of worker `worker`, on `node` or wherever it is.
  absl::StatusOr<int> WorkerLog(const std::string& node,
                                const std::string& worker) {
    std::string name = absl::StrCat("worker-", worker, ".log");
    auto where = FindLog(head_, node, name);
    if (!where.ok()) return StateError("find the log", where.status());
    return Log(*where, name);
  }

  // A log by its name alone.
  absl::StatusOr<int> NamedLog(const std::string& name) {
    auto where = FindLog(head_, f_.node_id, name);
    if (!where.ok()) return StateError("find the log", where.status());
    return Log(*where, name);
  }

  absl::StatusOr<int> TaskLog(const std::string& id) {
    proto::ListTasksRequest req;
    req.add_filters("task_id=" + id);
    auto list = head_.ListTasks(req);
    if (!list.ok()) return StateError("find the task", list.status());
    if (list->tasks().empty() || list->tasks(0).worker_id().empty()) {
      return absl::NotFoundError(
          absl::StrCat("the head knows no worker of task ", id,
                       list->tasks().empty() ? " (no such task is kept)"
                                             : " (it has not been pushed "
                                               "to one)"));
    }
    return WorkerLog(list->tasks(0).node_id(), list->tasks(0).worker_id());
  }

  absl::StatusOr<int> ActorLog(const std::string& id) {
    auto status = head_.ClusterStatus();
    if (!status.ok()) return StateError("find the actor", status.status());
    for (const auto& a : status->actors()) {
      if (a.spec().actor_id() != id && a.spec().name() != id) continue;
      if (a.worker_id().empty()) {
        return absl::FailedPreconditionError(
            absl::StrCat("actor ", id, " has no worker now (",
                         proto::ActorInfo::State_Name(a.state()), ")"));
      }
      return WorkerLog(a.node_id(), a.worker_id());
    }
    return absl::NotFoundError(
        absl::StrCat("no actor ", id, " (`shoal list actors` shows them)"));
  }

  // A gang's ranks, or the log of rank `rank` ("": list them).
  absl::StatusOr<int> GangLog(const std::string& id, const std::string& rank) {
    auto gangs = head_.ListGangs();
    if (!gangs.ok()) return StateError("find the gang", gangs.status());
    for (const proto::GangInfo& g : gangs->gangs()) {
      if (g.gang_id() != id) continue;
      if (rank.empty()) {
        std::vector<Row> rows;
        for (const proto::GangRank& r : g.ranks()) {
          rows.push_back({{"rank", absl::StrCat(r.rank())},
                          {"host", absl::StrCat(r.host_index())},
                          {"node_id", r.node_id()},
                          {"log", r.log_name()},
                          {"exit", r.exited() ? r.description() : ""}});
        }
        PrintTable(rows, out_);
        out_ << "(shoal logs gang " << id << " RANK prints one)\n";
        return 0;
      }
      for (const proto::GangRank& r : g.ranks()) {
        if (absl::StrCat(r.rank()) == rank)
          return Log(r.node_id(), r.log_name());
      }
      return UsageError(absl::StrCat("gang ", id, " has no rank ", rank, " (",
                                     g.ranks_size(), " ranks)"));
    }
    return absl::NotFoundError(
        absl::StrCat("no gang ", id, " (`shoal list gangs` shows them)"));
  }

 private:
  ClusterApi& head_;
  const Flags& f_;
  std::ostream& out_;
};

}  // namespace

CLI::App* Register(CLI::App& parent, Flags& f) {
  CLI::App* cmd = parent.add_subcommand(
      "logs",
      "List the nodes' logs, or print one: head, agent [NODE], worker ID, "
      "task ID, actor ID, gang ID RANK, job ID, or a log's name");
  cmd->add_option("what", f.what,
                  "head | agent [NODE] | worker ID | task ID | actor ID "
                  "| gang ID [RANK] | job ID | NAME");
  AddConnectionOptions(cmd, &f.connection);
  cmd->add_option("--node-id", f.node_id,
                  "The node whose log to read (default: the head's, or "
                  "the node that has it)");
  cmd->add_flag("-f,--follow", f.follow,
                "Keep printing what is added to the log");
  cmd->add_option("--tail", f.tail, "Only the last N lines")->check(AtLeast(0));
  return cmd;
}

absl::StatusOr<int> ShowLogs(ClusterApi& head, const Flags& f,
                             std::ostream& out, std::ostream& err) {
  const std::vector<std::string>& w = f.what;
  if (w.empty()) return ListLogs(head, f.node_id, out, err);
  const std::string& kind = w[0];
  LogReader reader(head, f, out);
  if (kind == "head") return reader.Log("", "head.log");
  if (kind == "agent")
    return reader.Log(w.size() > 1 ? w[1] : f.node_id, "agent.log");
  for (const char* needs_id : {"worker", "task", "actor", "gang", "job"}) {
    if (kind == needs_id && w.size() < 2) {
      return UsageError(absl::StrCat("shoal logs ", kind, " needs the ", kind,
                                     "'s id: shoal logs ", kind, " ID"));
    }
  }
  if (kind == "job") return PrintJobLogs(head, w[1], f.follow, out, err);
  if (kind == "worker") return reader.WorkerLog(f.node_id, w[1]);
  if (kind == "task") return reader.TaskLog(w[1]);
  if (kind == "actor") return reader.ActorLog(w[1]);
  if (kind == "gang") return reader.GangLog(w[1], w.size() > 2 ? w[2] : "");
  return reader.NamedLog(kind);
}

absl::StatusOr<int> Run(const Flags& f, Context& ctx) {
  ASSIGN_OR_RETURN(auto head, ConnectToCluster(f.connection, ctx));
  return ShowLogs(*head, f, *ctx.out, *ctx.err);
}

}  // namespace shoal::cli::logs
