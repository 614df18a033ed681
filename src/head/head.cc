#include "head/head.h"

#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "head/table_storage.h"
#include "rpc/rpc.h"
#include "scheduling/resource_set.h"
#include "shoal/shoal.pb.h"

namespace shoal {
namespace {

constexpr char kNodesTable[] = "nodes";
constexpr char kJobsTable[] = "jobs";
constexpr char kKvTable[] = "kv";
constexpr int64_t kMaxBlobChunk = 4 << 20;

// Runs on the head's event loop; not thread-safe.
class HeadImpl : public Head {
 public:
  HeadImpl(HeadOptions options, std::unique_ptr<rpc::EventLoop> loop)
      : options_(std::move(options)),
        loop_(std::move(loop)),
        storage_(NewInMemoryTableStorage()) {}

  ~HeadImpl() override { Stop(); }

  absl::Status Start() {
    absl::Status status;
    loop_->RunSync([&] {
      auto server = rpc::Server::Create(loop_.get(), options_.host,
                                        options_.port, options_.token);
      if (!server.ok()) {
        status = server.status();
        return;
      }
      server_ = std::move(*server);
      RegisterHandlers();
      ScheduleHealthCheck();
    });
    RETURN_IF_ERROR(MakeDirs(BlobDir()));
    return status;
  }

  int port() const override { return server_->port(); }

  void Wait() override {
    std::unique_lock<std::mutex> lock(stop_mu_);
    stop_cv_.wait(lock, [&] { return stop_requested_; });
  }

  void Stop() override {
    if (!loop_) return;
    {
      std::lock_guard<std::mutex> lock(stop_mu_);
      stop_requested_ = true;
      stop_cv_.notify_all();
    }
    loop_->RunSync([&] {
      if (server_) server_->Shutdown();
    });
    loop_->Stop();
    server_.reset();
    loop_.reset();
  }

 private:
  struct NodeEntry {
    proto::NodeInfo info;
    int64_t last_heartbeat_us = 0;
    std::vector<proto::ResourceDemand> demands;
  };

  std::string BlobDir() const { return options_.session_dir + "/blobs"; }

  void RegisterHandlers() {
    rpc::Server* s = server_.get();
    rpc::RegisterProto<proto::RegisterNodeRequest>(
        s, proto::REGISTER_NODE,
        [this](const auto& r, rpc::Responder resp) { RegisterNode(r, resp); });
    rpc::RegisterProto<proto::HeartbeatRequest>(
        s, proto::HEARTBEAT,
        [this](const auto& r, rpc::Responder resp) { Heartbeat(r, resp); });
    rpc::RegisterProto<proto::UnregisterNodeRequest>(
        s, proto::UNREGISTER_NODE, [this](const auto& r, rpc::Responder resp) {
          MarkDead(r.node_id(), r.reason());
          resp.Reply(proto::Empty());
        });
    rpc::RegisterProto<proto::Empty>(
        s, proto::GET_CLUSTER_STATUS,
        [this](const auto&, rpc::Responder resp) { resp.Reply(Status()); });
    rpc::RegisterProto<proto::RegisterJobRequest>(
        s, proto::REGISTER_JOB,
        [this](const auto& r, rpc::Responder resp) { RegisterJob(r, resp); });
    rpc::RegisterProto<proto::BlobRef>(
        s, proto::HAS_BLOB, [this](const auto& r, rpc::Responder resp) {
          proto::HasBlobReply reply;
          struct stat st;
          if (ValidHash(r.hash()) &&
              stat((BlobDir() + "/" + r.hash()).c_str(), &st) == 0) {
            reply.set_present(true);
            reply.set_size(st.st_size);
          }
          resp.Reply(reply);
        });
    rpc::RegisterProto<proto::BlobChunk>(
        s, proto::PUT_BLOB_CHUNK,
        [this](const auto& r, rpc::Responder resp) { PutBlobChunk(r, resp); });
    rpc::RegisterProto<proto::GetBlobChunkRequest>(
        s, proto::GET_BLOB_CHUNK,
        [this](const auto& r, rpc::Responder resp) { GetBlobChunk(r, resp); });
    rpc::RegisterProto<proto::KvPutRequest>(
        s, proto::KV_PUT, [this](const auto& r, rpc::Responder resp) {
          proto::KvPutReply reply;
          bool exists = storage_->Get(kKvTable, r.key()).has_value();
          if (!exists || r.overwrite()) {
            absl::Status st = storage_->Put(kKvTable, r.key(), r.value());
            if (!st.ok()) return resp.Error(st);
            reply.set_added(!exists);
          }
          resp.Reply(reply);
        });
    rpc::RegisterProto<proto::KvGetRequest>(
        s, proto::KV_GET, [this](const auto& r, rpc::Responder resp) {
          proto::KvGetReply reply;
          if (auto v = storage_->Get(kKvTable, r.key())) {
            reply.set_found(true);
            reply.set_value(*v);
          }
          resp.Reply(reply);
        });
    rpc::RegisterProto<proto::Empty>(
        s, proto::SHUTDOWN_HEAD, [this](const auto&, rpc::Responder resp) {
          SHOAL_LOG(INFO) << "shutdown requested by " << resp.peer();
          resp.Reply(proto::Empty());
          std::lock_guard<std::mutex> lock(stop_mu_);
          stop_requested_ = true;
          stop_cv_.notify_all();
        });
    server_->OnDisconnect([this](uint64_t conn) { OnDisconnect(conn); });
  }

  void RegisterNode(const proto::RegisterNodeRequest& r, rpc::Responder resp) {
    proto::NodeInfo info = r.node();
    if (info.address().empty()) {
      return resp.Error(absl::InvalidArgumentError(
          "a node must register with the address of its agent"));
    }
    if (info.node_id().empty()) info.set_node_id(RandomHex(6));
    info.set_alive(true);
    info.set_start_time_ms(NowMs());
    if (!info.has_available()) *info.mutable_available() = info.total();
    NodeEntry& entry = nodes_[info.node_id()];
    entry.info = info;
    entry.last_heartbeat_us = MonotonicUs();
    entry.demands.clear();
    node_by_conn_[resp.connection_id()] = info.node_id();
    Persist(entry);
    SHOAL_LOG(INFO) << "node " << info.node_id() << " joined from "
                    << info.address() << " with "
                    << ResourceSet::FromProto(info.total()).DebugString();
    proto::RegisterNodeReply reply;
    reply.set_node_id(info.node_id());
    reply.set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
    resp.Reply(reply);
  }

  void Heartbeat(const proto::HeartbeatRequest& r, rpc::Responder resp) {
    proto::HeartbeatReply reply;
    auto it = nodes_.find(r.node_id());
    if (it == nodes_.end() || !it->second.info.alive()) {
      // Unknown (the head restarted) or declared dead (a long pause): the
      // agent registers again and its view is rebuilt.
      reply.set_unknown_node(true);
      return resp.Reply(reply);
    }
    NodeEntry& e = it->second;
    e.last_heartbeat_us = MonotonicUs();
    *e.info.mutable_available() = r.available();
    e.demands.assign(r.demands().begin(), r.demands().end());
    for (const auto& [id, n] : nodes_) *reply.add_nodes() = n.info;
    resp.Reply(reply);
  }

  void MarkDead(const std::string& node_id, const std::string& reason) {
    auto it = nodes_.find(node_id);
    if (it == nodes_.end() || !it->second.info.alive()) return;
    it->second.info.set_alive(false);
    it->second.info.set_death_reason(reason);
    it->second.info.mutable_available()->clear_amounts();
    it->second.demands.clear();
    Persist(it->second);
    SHOAL_LOG(WARNING) << "node " << node_id << " ("
                       << it->second.info.address() << ") is dead: " << reason;
  }

  void ScheduleHealthCheck() {
    int64_t period = std::max<int64_t>(50, options_.health_timeout_ms / 10);
    loop_->RunAfter(period, [this] {
      int64_t now = MonotonicUs();
      std::vector<std::string> dead;
      for (const auto& [id, n] : nodes_) {
        if (n.info.alive() &&
            now - n.last_heartbeat_us > options_.health_timeout_ms * 1000) {
          dead.push_back(id);
        }
      }
      for (const auto& id : dead) {
        MarkDead(id,
                 absl::StrCat("no heartbeat for ", options_.health_timeout_ms,
                              " ms: the node agent died or its host is "
                              "unreachable"));
      }
      ScheduleHealthCheck();
    });
  }

  void Persist(const NodeEntry& e) {
    absl::Status st = storage_->Put(kNodesTable, e.info.node_id(),
                                    e.info.SerializeAsString());
    if (!st.ok()) SHOAL_LOG(ERROR) << "cannot store node: " << st;
  }

  proto::ClusterStatus Status() const {
    proto::ClusterStatus status;
    std::map<std::string, proto::ResourceDemand> demands;
    for (const auto& [id, n] : nodes_) {
      *status.add_nodes() = n.info;
      if (!n.info.alive()) continue;
      for (const auto& d : n.demands) {
        std::string key = absl::StrCat(
            ResourceSet::FromProto(d.shape()).DebugString(), d.infeasible());
        auto [it, added] = demands.emplace(key, d);
        if (!added) it->second.set_count(it->second.count() + d.count());
      }
    }
    for (auto& [k, d] : demands) *status.add_demands() = d;
    status.set_head_address(absl::StrCat(options_.host, ":", server_->port()));
    status.set_session_dir(options_.session_dir);
    status.set_num_jobs(next_job_ - 1);
    return status;
  }

  void RegisterJob(const proto::RegisterJobRequest& r, rpc::Responder resp) {
    proto::RegisterJobReply reply;
    reply.set_job_id(absl::StrCat("job", next_job_++));
    absl::Status st =
        storage_->Put(kJobsTable, reply.job_id(), r.SerializeAsString());
    if (!st.ok()) return resp.Error(st);
    job_by_conn_[resp.connection_id()] = reply.job_id();
    SHOAL_LOG(INFO) << reply.job_id() << " started by pid " << r.driver_pid()
                    << " on " << r.driver_host() << " (" << r.binary_path()
                    << ")";
    resp.Reply(reply);
  }

  void OnDisconnect(uint64_t conn) {
    if (auto it = job_by_conn_.find(conn); it != job_by_conn_.end()) {
      SHOAL_LOG(INFO) << it->second << " finished (its driver disconnected)";
      job_by_conn_.erase(it);
    }
    node_by_conn_.erase(conn);
  }

  static bool ValidHash(const std::string& hash) {
    if (hash.size() != 64) return false;
    for (char c : hash) {
      if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    }
    return true;
  }

  void PutBlobChunk(const proto::BlobChunk& r, rpc::Responder resp) {
    if (!ValidHash(r.hash())) {
      return resp.Error(absl::InvalidArgumentError(
          "a blob is named by the hex SHA-256 of its contents"));
    }
    std::string final_path = BlobDir() + "/" + r.hash();
    std::string partial = final_path + ".partial";
    std::fstream f(partial, std::ios::in | std::ios::out | std::ios::binary);
    if (!f) f.open(partial, std::ios::out | std::ios::binary);
    if (!f) {
      return resp.Error(absl::InternalError("cannot write " + partial));
    }
    f.seekp(r.offset());
    f.write(r.data().data(), r.data().size());
    f.close();
    if (r.last()) {
      auto hash = Sha256File(partial);
      if (!hash.ok() || *hash != r.hash()) {
        unlink(partial.c_str());
        return resp.Error(absl::DataLossError(
            "uploaded binary does not match its hash; upload it again"));
      }
      rename(partial.c_str(), final_path.c_str());
    }
    resp.Reply(proto::Empty());
  }

  void GetBlobChunk(const proto::GetBlobChunkRequest& r, rpc::Responder resp) {
    if (!ValidHash(r.hash())) {
      return resp.Error(absl::InvalidArgumentError("bad blob hash"));
    }
    std::string path = BlobDir() + "/" + r.hash();
    std::ifstream f(path, std::ios::binary);
    if (!f) {
      return resp.Error(absl::NotFoundError(absl::StrCat(
          "the head has no binary with hash ", r.hash(),
          "; the driver that used it must connect again to upload it")));
    }
    f.seekg(0, std::ios::end);
    int64_t size = f.tellg();
    int64_t want = std::min<int64_t>(
        r.max_bytes() > 0 ? r.max_bytes() : kMaxBlobChunk, kMaxBlobChunk);
    int64_t offset = std::min<int64_t>(r.offset(), size);
    int64_t n = std::min<int64_t>(want, size - offset);
    proto::BlobChunk chunk;
    chunk.set_hash(r.hash());
    chunk.set_offset(offset);
    chunk.set_total_size(size);
    std::string* data = chunk.mutable_data();
    data->resize(n);
    f.seekg(offset);
    f.read(data->data(), n);
    chunk.set_last(offset + n >= size);
    resp.Reply(chunk);
  }

  HeadOptions options_;
  std::unique_ptr<rpc::EventLoop> loop_;
  std::unique_ptr<rpc::Server> server_;
  std::unique_ptr<TableStorage> storage_;
  std::map<std::string, NodeEntry> nodes_;
  std::map<uint64_t, std::string> node_by_conn_;
  std::map<uint64_t, std::string> job_by_conn_;
  int64_t next_job_ = 1;

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_requested_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Head>> Head::Create(const HeadOptions& options) {
  ASSIGN_OR_RETURN(auto loop, rpc::EventLoop::Create("shoal-head"));
  auto head = std::make_unique<HeadImpl>(options, std::move(loop));
  RETURN_IF_ERROR(head->Start());
  return head;
}

}  // namespace shoal
