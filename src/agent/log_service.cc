#include "agent/log_service.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"

namespace shoal::agent {
namespace {

constexpr int64_t kDefaultMaxBytes = 1 << 20;
constexpr int64_t kMaxBytes = 8 << 20;
constexpr int64_t kPollMs = 100;

// A path relative to logs/ that stays inside it: "worker-w1.log",
// "launch-ab12-0/rank-3.log".
bool ValidName(const std::string& name) {
  if (name.empty() || name.find('\0') != std::string::npos) return false;
  for (absl::string_view part : absl::StrSplit(name, '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

}  // namespace

LogService::LogService(rpc::EventLoop* loop, std::string log_dir,
                       std::string node_id)
    : loop_(loop), log_dir_(std::move(log_dir)), node_id_(std::move(node_id)) {}

void LogService::Register(rpc::Server* server) {
  rpc::RegisterProto<proto::ListLogsRequest>(
      server, proto::LIST_LOGS,
      [this](const auto&, rpc::Responder resp) { List(resp); });
  rpc::RegisterProto<proto::ReadLogRequest>(
      server, proto::READ_LOG, [this](const auto& r, rpc::Responder resp) {
        Read(r, resp, MonotonicUs() + std::max<int64_t>(0, r.wait_ms()) * 1000);
      });
}

void LogService::List(const rpc::Responder& resp) const {
  proto::LogList list;
  AddFiles("", /*depth=*/0, &list);
  std::sort(list.mutable_files()->begin(), list.mutable_files()->end(),
            [](const auto& a, const auto& b) { return a.name() < b.name(); });
  resp.Reply(list);
}

void LogService::AddFiles(const std::string& prefix, int depth,
                          proto::LogList* list) const {
  DIR* dir = opendir((log_dir_ + "/" + prefix).c_str());
  if (dir == nullptr) return;
  while (dirent* d = readdir(dir)) {
    std::string name = prefix + d->d_name;
    struct stat st;
    if (!ValidName(name) || stat((log_dir_ + "/" + name).c_str(), &st) != 0) {
      continue;
    }
    if (S_ISDIR(st.st_mode) && depth == 0) {
      // A launch's rank logs.
      AddFiles(name + "/", depth + 1, list);
      continue;
    }
    if (!S_ISREG(st.st_mode)) continue;
    proto::LogFile* f = list->add_files();
    f->set_node_id(node_id_);
    f->set_name(name);
    f->set_size(st.st_size);
    f->set_mtime_ms(int64_t{st.st_mtim.tv_sec} * 1000 +
                    st.st_mtim.tv_nsec / 1000000);
  }
  closedir(dir);
}

void LogService::Read(const proto::ReadLogRequest& r,
                      const rpc::Responder& resp, int64_t deadline_us) {
  if (!ValidName(r.name())) {
    return resp.Error(absl::InvalidArgumentError(absl::StrCat(
        "\"", r.name(), "\" is not a log name; `shoal logs` lists them")));
  }
  const std::string path = log_dir_ + "/" + r.name();
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    if (fd >= 0) close(fd);
    return resp.Error(absl::NotFoundError(
        absl::StrCat("node ", node_id_, " has no log ", r.name(),
                     " (`shoal logs --node-id ", node_id_, "` lists them)")));
  }
  const int64_t size = st.st_size;
  int64_t offset = r.offset() < 0 ? std::max<int64_t>(0, size + r.offset())
                                  : std::min(r.offset(), size);
  if (offset == size && MonotonicUs() < deadline_us && resp.connected()) {
    close(fd);
    loop_->RunAfter(
        kPollMs, [this, r, resp, deadline_us] { Read(r, resp, deadline_us); });
    return;
  }
  int64_t want =
      r.max_bytes() > 0 ? std::min(r.max_bytes(), kMaxBytes) : kDefaultMaxBytes;
  want = std::min(want, size - offset);
  proto::LogChunk chunk;
  std::string* data = chunk.mutable_data();
  data->resize(static_cast<size_t>(want));
  ssize_t n = want > 0 ? pread(fd, data->data(), want, offset) : 0;
  close(fd);
  data->resize(n > 0 ? static_cast<size_t>(n) : 0);
  chunk.set_next_offset(offset + static_cast<int64_t>(data->size()));
  chunk.set_size(size);
  resp.Reply(chunk);
}

}  // namespace shoal::agent
