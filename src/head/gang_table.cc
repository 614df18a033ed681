#include "head/gang_table.h"

#include <algorithm>

#include "common/util.h"

namespace shoal {

GangTable::GangTable(size_t max_gangs)
    : max_gangs_(std::max<size_t>(1, max_gangs)) {}

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
  if (gang.state() != proto::GangInfo::RUNNING) {
    connections_.erase(gang.gang_id());
  }
  while (gangs_.size() > max_gangs_) {
    // The oldest that has ended, else the oldest.
    auto pick = std::find_if(order_.begin(), order_.end(), [&](const auto& id) {
      return gangs_[id].state() != proto::GangInfo::RUNNING;
    });
    if (pick == order_.end()) pick = order_.begin();
    gangs_.erase(*pick);
    connections_.erase(*pick);
    order_.erase(pick);
  }
}

void GangTable::SetConnection(const std::string& gang_id,
                              uint64_t connection_id) {
  auto it = gangs_.find(gang_id);
  if (it != gangs_.end() && it->second.state() == proto::GangInfo::RUNNING) {
    connections_[gang_id] = connection_id;
  }
}

void GangTable::LauncherLost(uint64_t connection_id) {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (it->second != connection_id) {
      ++it;
      continue;
    }
    proto::GangInfo& gang = gangs_[it->first];
    gang.set_state(proto::GangInfo::STOPPED);
    gang.set_end_time_ms(NowMs());
    gang.set_message("its `shoal launch` process went away");
    it = connections_.erase(it);
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

}  // namespace shoal
