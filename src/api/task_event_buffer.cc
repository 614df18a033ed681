#include "api/task_event_buffer.h"

#include <cstring>
#include <utility>

#include "common/clock.h"
#include "common/logging.h"
#include "common/utf8.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"

namespace shoal::internal {
namespace {

using google::protobuf::internal::WireFormatLite;

constexpr size_t kMaxErrorBytes = 2048;

}  // namespace

TaskEventBuffer::TaskEventBuffer(std::string job_id, bool enabled,
                                 size_t max_tasks)
    : job_id_(std::move(job_id)), enabled_(enabled), max_tasks_(max_tasks) {}

void TaskEventBuffer::Record(TaskEntry& task, const Change& change) {
  if (!enabled_) return;
  TaskEntry::Events& e = task.events;
  if (task.attempt > e.attempt) {
    // A retry: the record is of the new attempt.
    e.attempt = task.attempt;
    e.state = change.state;
    for (int s = proto::TaskEvent::SUBMITTED_TO_WORKER; s < kNumTaskStates;
         ++s) {
      e.times[s] = 0;
    }
    e.error.clear();
    e.error_type.clear();
  } else if (!IsTerminal(e.state) && change.state > e.state) {
    e.state = change.state;
  }
  int64_t& when = e.times[change.state];
  if (when == 0) when = change.time_ms != 0 ? change.time_ms : NowMs();
  if (!change.node_id.empty()) e.node_id = change.node_id;
  if (!change.worker_id.empty()) e.worker_id = change.worker_id;
  if (!change.error.empty()) {
    // The first lines say what failed; a whole traceback stays with the
    // owner (the error it raises).
    e.error = ToValidUtf8(change.error, kMaxErrorBytes);
    e.error_type = change.error_type;
  }
  if (e.listed == 0) {
    changed_.push_back(&task);
    e.listed = static_cast<uint32_t>(changed_.size());
  }
}

void TaskEventBuffer::Ended(TaskEntry& task) {
  if (task.events.listed == 0) return;
  changed_[task.events.listed - 1] = nullptr;
  task.events.listed = 0;
  Write(task);
}

void TaskEventBuffer::Clear() {
  for (TaskEntry* task : changed_) {
    if (task != nullptr) task->events.listed = 0;
  }
  changed_.clear();
}

void TaskEventBuffer::Write(const TaskEntry& task) {
  using google::protobuf::io::CodedOutputStream;
  if (static_cast<size_t>(records_) >= max_tasks_) {
    ++dropped_;
    if (task.events.state == proto::TaskEvent::FINISHED) ++dropped_finished_;
    if (task.events.state == proto::TaskEvent::FAILED) ++dropped_failed_;
    return;
  }
  ++records_;
  const TaskEntry::Events& r = task.events;
  // The record's size first (it is length-delimited in the batch), then
  // its fields, in proto::TaskEvent's numbering, straight into the batch.
  auto string_size = [](const std::string& v) -> size_t {
    return v.empty() ? 0 : 1 + WireFormatLite::StringSize(v);
  };
  const std::string_view name = TaskDisplayName(task.function);
  size_t times_size = 0;
  for (int64_t t : r.times) times_size += WireFormatLite::Int64Size(t);
  const size_t size =
      string_size(task.id) +
      (name.empty() ? 0
                    : 1 + WireFormatLite::LengthDelimitedSize(name.size())) +
      string_size(task.actor_id) + string_size(r.node_id) +
      string_size(r.worker_id) + string_size(r.error) +
      string_size(r.error_type) +
      (r.attempt != 0 ? 1 + WireFormatLite::Int32Size(r.attempt) : 0) + 1 +
      WireFormatLite::EnumSize(r.state) + 1 +
      WireFormatLite::UInt32Size(static_cast<uint32_t>(times_size)) +
      times_size;
  const size_t start = batch_.size();
  batch_.resize(start + 1 +
                WireFormatLite::UInt32Size(static_cast<uint32_t>(size)) + size);
  uint8_t* p = reinterpret_cast<uint8_t*>(batch_.data()) + start;
  p = WireFormatLite::WriteTagToArray(proto::TaskEventBatch::kEventsFieldNumber,
                                      WireFormatLite::WIRETYPE_LENGTH_DELIMITED,
                                      p);
  p = CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(size), p);
  auto string_field = [&](int field, const std::string& value) {
    if (!value.empty()) p = WireFormatLite::WriteStringToArray(field, value, p);
  };
  string_field(proto::TaskEvent::kTaskIdFieldNumber, task.id);
  if (r.attempt != 0) {
    p = WireFormatLite::WriteInt32ToArray(proto::TaskEvent::kAttemptFieldNumber,
                                          r.attempt, p);
  }
  if (!name.empty()) {
    p = WireFormatLite::WriteTagToArray(
        proto::TaskEvent::kNameFieldNumber,
        WireFormatLite::WIRETYPE_LENGTH_DELIMITED, p);
    p = CodedOutputStream::WriteVarint32ToArray(
        static_cast<uint32_t>(name.size()), p);
    memcpy(p, name.data(), name.size());
    p += name.size();
  }
  string_field(proto::TaskEvent::kActorIdFieldNumber, task.actor_id);
  p = WireFormatLite::WriteEnumToArray(proto::TaskEvent::kStateFieldNumber,
                                       r.state, p);
  p = WireFormatLite::WriteTagToArray(
      proto::TaskEvent::kStateTimesMsFieldNumber,
      WireFormatLite::WIRETYPE_LENGTH_DELIMITED, p);
  p = CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(times_size),
                                              p);
  for (int64_t t : r.times) p = WireFormatLite::WriteInt64NoTagToArray(t, p);
  string_field(proto::TaskEvent::kNodeIdFieldNumber, r.node_id);
  string_field(proto::TaskEvent::kWorkerIdFieldNumber, r.worker_id);
  string_field(proto::TaskEvent::kErrorFieldNumber, r.error);
  string_field(proto::TaskEvent::kErrorTypeFieldNumber, r.error_type);
  SHOAL_CHECK(p == reinterpret_cast<uint8_t*>(batch_.data()) + batch_.size())
      << "a task event record of the wrong size";
}

std::string TaskEventBuffer::Take(int* events) {
  for (TaskEntry* task : changed_) {
    if (task == nullptr) continue;
    task->events.listed = 0;
    Write(*task);
  }
  changed_.clear();
  if (events != nullptr) *events = records_;
  if (records_ == 0 && dropped_ == 0) return "";
  {
    // After the records: a message's fields may come in any order.
    google::protobuf::io::StringOutputStream stream(&batch_);
    google::protobuf::io::CodedOutputStream out(&stream);
    WireFormatLite::WriteString(proto::TaskEventBatch::kJobIdFieldNumber,
                                job_id_, &out);
    for (auto [field, count] :
         {std::pair{proto::TaskEventBatch::kDroppedFieldNumber, dropped_},
          std::pair{proto::TaskEventBatch::kDroppedFinishedFieldNumber,
                    dropped_finished_},
          std::pair{proto::TaskEventBatch::kDroppedFailedFieldNumber,
                    dropped_failed_}}) {
      if (count != 0) WireFormatLite::WriteInt64(field, count, &out);
    }
  }
  std::string out = std::move(batch_);
  batch_.clear();
  records_ = 0;
  dropped_ = dropped_finished_ = dropped_failed_ = 0;
  return out;
}

}  // namespace shoal::internal
