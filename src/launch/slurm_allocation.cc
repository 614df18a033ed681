#include "launch/slurm_allocation.h"

#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/environment.h"

namespace shoal::launch {
namespace {

// The most hosts one hostlist may name: a typo such as [1-999999999] is an
// error, not an allocation of memory.
constexpr size_t kMaxHosts = 1 << 20;

// Splits at the commas outside brackets.
absl::StatusOr<std::vector<absl::string_view>> TopLevelNames(
    absl::string_view text) {
  std::vector<absl::string_view> names;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    const char c = i < text.size() ? text[i] : ',';
    if (c == '[') {
      if (++depth > 1) break;
    } else if (c == ']') {
      if (--depth < 0) break;
    } else if (c == ',' && depth == 0) {
      absl::string_view name =
          absl::StripAsciiWhitespace(text.substr(start, i - start));
      if (!name.empty()) names.push_back(name);
      start = i + 1;
    }
  }
  if (depth != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hostlist \"", text, "\" has unbalanced or nested brackets"));
  }
  return names;
}

// The values one bracket's "1-3,07" stands for, as text.
absl::StatusOr<std::vector<std::string>> ExpandRanges(absl::string_view ranges,
                                                      absl::string_view text) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(ranges, ',')) {
    part = absl::StripAsciiWhitespace(part);
    std::pair<absl::string_view, absl::string_view> bounds =
        absl::StrSplit(part, absl::MaxSplits('-', 1));
    if (bounds.second.empty()) bounds.second = bounds.first;
    uint64_t low = 0, high = 0;
    if (bounds.first.empty() ||
        bounds.first.find_first_not_of("0123456789") != std::string::npos ||
        bounds.second.find_first_not_of("0123456789") != std::string::npos ||
        !absl::SimpleAtoi(bounds.first, &low) ||
        !absl::SimpleAtoi(bounds.second, &high) || high < low) {
      return absl::InvalidArgumentError(
          absl::StrCat("hostlist \"", text, "\": \"", part,
                       "\" is not a number or a range such as 1-3"));
    }
    if (high - low >= kMaxHosts) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hostlist \"", text, "\": range ", part, " names too many hosts"));
    }
    const size_t width = bounds.first.size();
    for (uint64_t v = low; v <= high; ++v) {
      std::string digits = absl::StrCat(v);
      if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
      out.push_back(std::move(digits));
    }
  }
  return out;
}

// One top-level name, its bracket groups multiplied out in order.
absl::Status ExpandName(absl::string_view name, absl::string_view text,
                        std::vector<std::string>* out) {
  std::vector<std::string> partial = {""};
  while (!name.empty()) {
    const size_t open = name.find('[');
    const absl::string_view literal = name.substr(0, open);
    for (std::string& p : partial) p.append(literal.data(), literal.size());
    if (open == absl::string_view::npos) break;
    const size_t close = name.find(']', open);
    auto values = ExpandRanges(name.substr(open + 1, close - open - 1), text);
    if (!values.ok()) return values.status();
    std::vector<std::string> next;
    for (const std::string& p : partial) {
      for (const std::string& v : *values) {
        next.push_back(p + v);
        if (next.size() + out->size() > kMaxHosts) {
          return absl::InvalidArgumentError(
              absl::StrCat("hostlist \"", text, "\" names too many hosts"));
        }
      }
    }
    partial = std::move(next);
    name.remove_prefix(close + 1);
  }
  out->insert(out->end(), partial.begin(), partial.end());
  return absl::OkStatus();
}

// SLURM_* integers; nullopt when unset.
absl::StatusOr<std::optional<int64_t>> Integer(
    const std::function<std::string(const char*)>& get, const char* name) {
  const std::string text(absl::StripAsciiWhitespace(get(name)));
  if (text.empty()) return std::nullopt;
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, "=", text, " is not a count; is this a Slurm allocation?"));
  }
  return value;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandHostlist(
    absl::string_view text) {
  auto names = TopLevelNames(text);
  if (!names.ok()) return names.status();
  std::vector<std::string> hosts;
  for (absl::string_view name : *names) {
    if (absl::Status st = ExpandName(name, text, &hosts); !st.ok()) return st;
  }
  return hosts;
}

absl::StatusOr<std::optional<SlurmAllocation>> ReadSlurmAllocation(
    const std::function<std::string(const char*)>& get) {
  SlurmAllocation a;
  a.job_id = std::string(absl::StripAsciiWhitespace(get("SLURM_JOB_ID")));
  if (a.job_id.empty()) return std::nullopt;
  a.step_id = std::string(absl::StripAsciiWhitespace(get("SLURM_STEP_ID")));
  const char* list_name = "SLURM_STEP_NODELIST";
  std::string list = get(list_name);
  if (list.empty()) list = get(list_name = "SLURM_JOB_NODELIST");
  auto hosts = ExpandHostlist(list);
  if (!hosts.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(list_name, ": ", hosts.status().message()));
  }
  a.hosts = *std::move(hosts);
  if (a.hosts.empty()) {
    return absl::InvalidArgumentError(
        "SLURM_JOB_ID is set but SLURM_JOB_NODELIST names no host; run "
        "inside an allocation (sbatch, salloc or srun)");
  }
  auto node = Integer(get, "SLURM_NODEID");
  if (!node.ok()) return node.status();
  if (node->has_value()) {
    if (**node >= static_cast<int64_t>(a.hosts.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("SLURM_NODEID=", **node, " but ", list_name, " names ",
                       a.hosts.size(), " hosts"));
    }
    a.node_index = static_cast<int>(**node);
  }
  auto cpus = Integer(get, "SLURM_CPUS_ON_NODE");
  if (!cpus.ok()) return cpus.status();
  if (cpus->has_value()) a.cpus = static_cast<int>(**cpus);
  auto per_node = Integer(get, "SLURM_MEM_PER_NODE");
  if (!per_node.ok()) return per_node.status();
  auto per_cpu = Integer(get, "SLURM_MEM_PER_CPU");
  if (!per_cpu.ok()) return per_cpu.status();
  constexpr int64_t kMiB = int64_t{1} << 20;
  if (per_node->has_value() && **per_node > 0) {
    a.memory_bytes = **per_node * kMiB;
  } else if (per_cpu->has_value() && **per_cpu > 0 && a.cpus) {
    a.memory_bytes = **per_cpu * *a.cpus * kMiB;
  }
  // Slurm sets CUDA_VISIBLE_DEVICES for a step with GPUs (--gres=gpu,
  // --gpus); without them the job has none, whatever the host has.
  auto gpus = Integer(get, "SLURM_GPUS_ON_NODE");
  if (!gpus.ok()) return gpus.status();
  const std::string visible = get("CUDA_VISIBLE_DEVICES");
  if (gpus->value_or(0) > 0 || !visible.empty()) {
    for (absl::string_view id : absl::StrSplit(visible, ',')) {
      id = absl::StripAsciiWhitespace(id);
      if (!id.empty()) a.gpus.emplace_back(id);
    }
  }
  a.submit_dir = get("SLURM_SUBMIT_DIR");
  return a;
}

absl::StatusOr<std::optional<SlurmAllocation>> SlurmAllocationOfThisProcess() {
  return ReadSlurmAllocation([](const char* name) -> std::string {
    for (const env::Variable& v : env::Table()) {
      if (std::strcmp(v.name, name) == 0) {
        return env::Find(v.var).value_or("");
      }
    }
    return "";
  });
}

}  // namespace shoal::launch
