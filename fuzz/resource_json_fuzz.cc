// resource_json: `shoal start --resources` and `--labels` (the CLI checks
// them, then the node agent builds its resources from them), as
// ResourceSet::FromJson and ParseLabelsJson read them.
//
// Input: the JSON text. Both parsers read every input; what one accepts
// goes on as the agent uses it.
#include <map>
#include <string>
#include <vector>

#include "fuzz/fuzz_targets.h"
#include "scheduling/resource_set.h"
#include "shoal/shoal.pb.h"

namespace shoal::fuzz {

int FuzzResourceJson(const uint8_t* data, size_t size) {
  const std::string json(reinterpret_cast<const char*>(data), size);

  absl::StatusOr<ResourceSet> resources = ResourceSet::FromJson(json);
  if (resources.ok()) {
    for (const auto& [name, fixed] : resources->amounts()) {
      SHOAL_FUZZ_CHECK(!name.empty() && fixed > 0);
      FormatQuantity(name, fixed);
    }
    resources->DebugString();
    // The agent lays the amounts over what it detected, as doubles, and
    // validates them again: what the CLI accepted must still be valid.
    std::map<std::string, double> amounts = {
        {"CPU", 2}, {"memory", 8e9}, {"object_store_memory", 2e9}};
    for (const auto& [name, value] : resources->ToDoubles()) {
      amounts[name] = value;
    }
    absl::StatusOr<ResourceSet> merged = ResourceSet::FromDoubles(amounts);
    SHOAL_FUZZ_CHECK(merged.ok());
    // Node resources travel to the head as a ResourceMap.
    proto::ResourceMap map;
    resources->ToProto(&map);
    SHOAL_FUZZ_CHECK(ResourceSet::FromProto(map) == *resources);
  } else {
    SHOAL_FUZZ_CHECK(!resources.status().message().empty());
  }

  absl::StatusOr<std::map<std::string, std::string>> labels =
      ParseLabelsJson(json);
  if (labels.ok()) {
    for (const auto& [key, value] : *labels) SHOAL_FUZZ_CHECK(!key.empty());
  } else {
    SHOAL_FUZZ_CHECK(!labels.status().message().empty());
  }
  return 0;
}

std::vector<Seed> ResourceJsonSeeds() {
  return {
      {"resources", R"({"CPU": 2, "accel_x": 4, "memory": 1e9})"},
      {"fractional", R"({"CPU": 0.5, "GPU": 0.25})"},
      {"not_whole", R"({"GPU": 1.5})"},
      {"negative", R"({"CPU": -1})"},
      {"too_large", R"({"TPU": 1e400})"},
      {"nested", R"({"CPU": {"cores": [1, 2]}})"},
      {"empty_name", R"({"": 1})"},
      {"labels", R"({"zone": "us-east-1a", "rack": "r7"})"},
      {"label_not_string", R"({"zone": 3})"},
      {"array", R"([1, 2])"},
      {"malformed", R"({"CPU": 2,)"},
      {"unicode", "{\"z\u00f6ne\": \"\u4e2d\"}"},
  };
}

}  // namespace shoal::fuzz
