// Damage to the head's durable state is never silent: a head killed with
// its jobs in SQLite's write-ahead log, a byte of that log damaged, and
// `shoal start --head` again on its temp dir. The start fails, says what is
// wrong with which file and what to do, and leaves the session as it was;
// with --discard-wal it sets the log aside and starts.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::testing::ClusterSpec;
using ::shoal::testing::NodeSpec;
using ::shoal::testing::RunCli;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kJobs = 6;

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The plain files of a session folder, with their contents.
std::map<std::string, std::string> SessionFiles(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file()) {
      files[entry.path().filename()] = ReadBytes(entry.path());
    }
  }
  return files;
}

class StateDamageTest : public shoal::testing::ClusterTest {
 protected:
  void SetUp() override {
    ClusterSpec spec;
    NodeSpec head{"damage-head", 2, ""};
    // Each write fsynced, and no checkpointing thread: the log keeps every
    // write since the head started, so the jobs are in it, not in head.db.
    head.extra_args = {"--storage-sync", "full"};
    spec.nodes = {head};
    auto cluster = shoal::testing::TestCluster::Start(spec);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
  }
  std::vector<std::string> Env() const {
    return {"SHOAL_ADDRESS=" + cluster_->address(),
            "SHOAL_TOKEN=" + cluster_->token()};
  }
  int StartHead(const std::vector<std::string>& more, std::string* out) {
    std::vector<std::string> args = {"start",
                                     "--head",
                                     "--port",
                                     "0",
                                     "--node-ip-address",
                                     "127.0.0.1",
                                     "--dashboard-port",
                                     "0",
                                     "--temp-dir",
                                     cluster_->temp_dir(0)};
    args.insert(args.end(), more.begin(), more.end());
    return RunCli(args, out);
  }
  std::string JobState(const std::string& id) {
    std::string out;
    if (RunCli({"job", "status", "--format", "json", id}, &out, Env()) != 0) {
      return "";
    }
    nlohmann::json status = nlohmann::json::parse(out, nullptr, false);
    return status.is_object() ? status.value("status", "") : "";
  }
};

TEST_F(StateDamageTest, ADamagedLogStopsTheHeadUntilItIsDiscardedOnPurpose) {
  // (session_latest is a link; messages name the folder itself.)
  const std::string session =
      std::filesystem::canonical(cluster_->session_dir(0));
  const std::string wal_path = session + "/head.db-wal";
  std::string out;
  for (int i = 0; i < kJobs; ++i) {
    ASSERT_EQ(RunCli({"job", "submit", "--no-wait", "--submission-id",
                      "kept-" + std::to_string(i), "--", "true"},
                     &out, Env()),
              0)
        << out;
  }
  // Each job's end is written too.
  for (int i = 0; i < kJobs; ++i) {
    const std::string id = "kept-" + std::to_string(i);
    std::string state;
    for (int tries = 0; tries < 600 && state != "SUCCEEDED"; ++tries) {
      state = JobState(id);
      if (state != "SUCCEEDED") usleep(50000);
    }
    ASSERT_EQ(state, "SUCCEEDED") << id;
  }
  cluster_->KillHead();

  // A byte of a frame in the middle of the log, with committed
  // transactions after it.
  std::string wal = ReadBytes(wal_path);
  ASSERT_GT(wal.size(), 32u);
  const uint32_t page_size = (uint32_t{static_cast<uint8_t>(wal[8])} << 24) |
                             (uint32_t{static_cast<uint8_t>(wal[9])} << 16) |
                             (uint32_t{static_cast<uint8_t>(wal[10])} << 8) |
                             uint32_t{static_cast<uint8_t>(wal[11])};
  const size_t frame_size = 24 + page_size;
  const size_t frames = (wal.size() - 32) / frame_size;
  ASSERT_GE(frames, 2u * kJobs) << "the log was checkpointed";
  const size_t middle = frames / 2;
  wal[32 + (middle - 1) * frame_size + 24 + 100] ^= 0x01;
  std::ofstream(wal_path, std::ios::binary | std::ios::trunc) << wal;
  const auto before = SessionFiles(session);

  // Refused, with what is wrong, where, and what to do.
  EXPECT_NE(StartHead({}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr(wal_path));
  EXPECT_THAT(out, HasSubstr("frame " + std::to_string(middle) + " of " +
                             std::to_string(frames) + " fails its checksum"));
  EXPECT_THAT(out, HasSubstr("committed transactions from it on would be "
                             "lost"));
  EXPECT_THAT(out, HasSubstr("--discard-wal"));
  EXPECT_THAT(out, HasSubstr("backup"));
  // The session as it was: the crashed head's files in place (the next
  // start still takes it up), the log neither moved nor replayed.
  EXPECT_EQ(SessionFiles(session), before);

  // Discarded on purpose: set aside, kept, and the head starts.
  ASSERT_EQ(StartHead({"--discard-wal"}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("Taking up session"));
  EXPECT_THAT(out,
              HasSubstr("it was set aside as " + wal_path + ".discarded-"));
  std::vector<std::string> kept;
  for (const auto& entry : std::filesystem::directory_iterator(session)) {
    std::string name = entry.path().filename();
    if (name.rfind("head.db-wal.discarded-", 0) == 0) {
      kept.push_back(entry.path());
    }
  }
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(ReadBytes(kept[0]), wal);
  EXPECT_EQ(shoal::ReadSessionFile(session, "token"), cluster_->token());
  // The same cluster, from what head.db alone held: not these jobs.
  ASSERT_EQ(RunCli({"status"}, &out, Env()), 0) << out;
  ASSERT_EQ(RunCli({"job", "list"}, &out, Env()), 0) << out;
  EXPECT_THAT(out, Not(HasSubstr("kept-0"))) << out;
}

TEST_F(StateDamageTest, AnIntactLogIsKeptEvenWithDiscardWal) {
  const std::string session = cluster_->session_dir(0);
  std::string out;
  ASSERT_EQ(RunCli({"job", "submit", "--submission-id", "kept", "--", "true"},
                   &out, Env()),
            0)
      << out;
  cluster_->KillHead();
  ASSERT_EQ(StartHead({"--discard-wal"}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("is intact")) << out;
  for (const auto& entry : std::filesystem::directory_iterator(session)) {
    EXPECT_THAT(entry.path().filename().string(), Not(HasSubstr("discarded")));
  }
  EXPECT_EQ(JobState("kept"), "SUCCEEDED");
}

}  // namespace
