#include "head/gang_table.h"

#include <algorithm>
#include <vector>

#include "common/clock.h"
#include "common/logging.h"

namespace shoal {
namespace {

constexpr char kGangsTable[] = "gangs";

}  // namespace

GangTable::GangTable(size_t max_gangs, TableStorage* storage)
    : max_gangs_(std::max<size_t>(1, max_gangs)), storage_(storage) {}

void GangTable::Update(const proto::GangInfo& gang) {
  auto [it, added] = gangs_.try_emplace(gang.gang_id());
  if (added) {
    ++started_;
    order_.push_back(gang.gang_id());
  } else if (it->second.state() != proto::GangInfo::RUNNING) {
    return;  // it ended; a straggling report does not revive it
  }
  // In 64 bits: the counts come from the launcher and may be any int32.
  restarts_ +=
      std::max<int64_t>(0, int64_t{gang.restarts()} - it->second.restarts());
  it->second = gang;
  Persist(gang);
  while (gangs_.size() > max_gangs_) {
    // The oldest that has ended, else the oldest.
    auto pick = std::find_if(order_.begin(), order_.end(), [&](const auto& id) {
      return gangs_[id].state() != proto::GangInfo::RUNNING;
    });
    if (pick == order_.end()) pick = order_.begin();
    Forget(*pick);
  }
}

void GangTable::JobEnded(const std::string& job_id) {
  if (job_id.empty()) return;
  for (auto& [id, gang] : gangs_) {
    if (gang.driver_job_id() != job_id ||
        gang.state() != proto::GangInfo::RUNNING) {
      continue;
    }
    gang.set_state(proto::GangInfo::STOPPED);
    gang.set_end_time_ms(NowMs());
    gang.set_message("its `shoal launch` process went away");
    Persist(gang);
  }
}

void GangTable::Restore() {
  if (storage_ == nullptr) return;
  std::vector<proto::GangInfo> kept;
  for (const auto& [id, bytes] : storage_->Scan(kGangsTable)) {
    proto::GangInfo gang;
    if (gang.ParseFromString(bytes) && gang.gang_id() == id) {
      kept.push_back(std::move(gang));
    }
  }
  // First reported first, as they were.
  std::stable_sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) {
    return a.start_time_ms() < b.start_time_ms();
  });
  for (proto::GangInfo& gang : kept) {
    order_.push_back(gang.gang_id());
    gangs_[gang.gang_id()] = std::move(gang);
  }
}

proto::GangList GangTable::List() const {
  proto::GangList out;
  out.set_started_total(started_);
  out.set_restarts_total(restarts_);
  for (auto id = order_.rbegin(); id != order_.rend(); ++id) {
    *out.add_gangs() = gangs_.at(*id);
  }
  return out;
}

void GangTable::Persist(const proto::GangInfo& gang) {
  if (storage_ == nullptr) return;
  absl::Status st =
      storage_->Put(kGangsTable, gang.gang_id(), gang.SerializeAsString());
  if (!st.ok())
    SHOAL_LOG(ERROR) << "cannot keep gang " << gang.gang_id() << ": " << st;
}

void GangTable::Forget(std::string gang_id) {
  gangs_.erase(gang_id);
  order_.erase(std::find(order_.begin(), order_.end(), gang_id));
  if (storage_ == nullptr) return;
  absl::Status st = storage_->Delete(kGangsTable, gang_id);
  if (!st.ok())
    SHOAL_LOG(ERROR) << "cannot forget gang " << gang_id << ": " << st;
}

}  // namespace shoal
