// The `shoal` command line as a user meets it: real processes (this binary
// re-executed as the CLI), bad values refused before anything starts, usage
// errors with exit status 2, and the commands `shoal start` prints pasted as
// printed into a shell with nothing exported.
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <regex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/files.h"
#include "common/session.h"
#include "common/version.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "head_client/head_client.h"
#include "rpc/event_loop.h"
#include "shoal/api.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::testing::ClusterSpec;
using ::shoal::testing::ProcessesMentioning;
using ::shoal::testing::RunCli;
using ::shoal::testing::TestCluster;
using ::testing::HasSubstr;
using ::testing::Not;

int64_t Add(int64_t a, int64_t b) { return a + b; }
SHOAL_REMOTE(Add);

// The node id of the head that StartHintsWorkInAFreshShell starts; the
// program its hint runs checks that it joined that cluster.
constexpr char kHintHeadNode[] = "hint-head";

// A fresh folder under /tmp, removed at the end of the test.
class ScratchDir {
 public:
  ScratchDir() {
    char tmpl[] = "/tmp/shoal-cli-test-XXXXXX";
    if (mkdtemp(tmpl) != nullptr) path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty() && getenv("SHOAL_TEST_KEEP") == nullptr) {
      std::filesystem::remove_all(path_, ec);
    }
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Waits up to 15 s for every process mentioning `text` to end.
std::vector<std::string> LeftRunning(const std::string& text) {
  std::vector<std::string> left;
  for (int i = 0; i < 150; ++i) {
    left = ProcessesMentioning(text);
    if (left.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return left;
}

// `command` run by sh in `dir`, as typed into a new terminal: under env -i
// with only PATH (`bin`, then the system's) and HOME. Returns the exit
// status; stdout and stderr go to *output.
int TypeIn(const std::string& dir, const std::string& bin,
           const std::string& command, std::string* output) {
  auto quote = [](const std::string& s) {
    return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "'\\''"}}), "'");
  };
  const char* home = getenv("HOME");
  std::string line = absl::StrCat(
      "cd ", quote(dir), " && exec env -i PATH=", quote(bin + ":/usr/bin:/bin"),
      " HOME=", quote(home ? home : "/"), " sh -c ", quote(command), " 2>&1");
  FILE* pipe = popen(line.c_str(), "r");
  if (pipe == nullptr) return -1;
  output->clear();
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) output->append(buf, n);
  int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The command `shoal start` printed after "To <what>:".
std::string Hint(const std::string& start_output, const std::string& what) {
  const std::string prefix = absl::StrCat("To ", what, ":");
  for (absl::string_view line : absl::StrSplit(start_output, '\n')) {
    if (!absl::StartsWith(line, prefix)) continue;
    line.remove_prefix(prefix.size());
    return std::string(absl::StripLeadingAsciiWhitespace(line));
  }
  return "";
}

// Sanitizer reports in the logs under `dir`.
std::string SanitizerReports(const std::string& dir) {
  std::string reports;
  std::error_code ec;
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(dir, ec)) {
    if (entry.path().extension() != ".log") continue;
    auto text = shoal::ReadFile(entry.path().string());
    if (!text.ok()) continue;
    for (const char* marker : {"ERROR: AddressSanitizer",
                               "runtime error:", "ERROR: LeakSanitizer"}) {
      size_t at = text->find(marker);
      if (at != std::string::npos) {
        absl::StrAppend(&reports, entry.path().string(), ":\n",
                        text->substr(at, 4000), "\n");
      }
    }
  }
  return reports;
}

void WriteScript(const std::string& path, const std::string& body) {
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  chmod(path.c_str(), 0755);
}

struct BadCommandLine {
  std::vector<std::string> args;
  std::vector<std::string> want_in_message;
  std::vector<std::string> env = {};
};

// Each bad command line exits 2 saying what is wrong, before anything is
// made: its temp dir is never created and no process mentions it.
TEST(CliTest, BadValuesFailBeforeAnythingStarts) {
  ScratchDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  const std::vector<std::string> head = {
      "start", "--head", "--port", "0", "--node-ip-address", "127.0.0.1"};
  auto start_head = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = head;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const std::vector<BadCommandLine> cases = {
      {start_head({"--num-cpus", "-1"}), {"--num-cpus", "0 or more", "-1"}},
      {start_head({"--num-gpus", "-1"}), {"--num-gpus", "0 or more"}},
      {start_head({"--num-tpus", "-2"}), {"--num-tpus", "0 or more"}},
      {start_head({"--num-cpus", "nan"}), {"--num-cpus", "0 or more"}},
      // Decimal only: strtod would take 0x10 for 16.
      {start_head({"--num-cpus", "0x10"}), {"--num-cpus", "0 or more", "0x10"}},
      {start_head({"--num-gpus", "inf"}), {"--num-gpus", "0 or more"}},
      {start_head({"--num-gpus", "1.5"}), {"--num-gpus", "whole number"}},
      {start_head({"--num-cpus", "1e300"}), {"--num-cpus", "too large"}},
      {start_head({"--port", "99999"}),
       {"--port", "1 to 65535", "0 for any free port", "99999"}},
      {start_head({"--port", "-5"}), {"--port", "1 to 65535"}},
      {start_head({"--object-store-memory", "100"}),
       {"--object-store-memory", "at least 1048576", "1 MiB", "0 for no"}},
      {start_head({"--object-store-memory", "-1"}),
       {"--object-store-memory", "at least"}},
      {start_head({"--resources", R"({"x": 1e400})"}),
       {"--resources", "\"x\"", "out of range"}},
      {start_head({"--resources", R"({"x": -1})"}),
       {"--resources", "\"x\"", "negative"}},
      {start_head({"--resources", "[1, 2]"}), {"--resources", "JSON object"}},
      {start_head({"--resources", R"({"x": "two"})"}),
       {"--resources", "\"x\"", "must be a number"}},
      {start_head({"--labels", R"({"zone": 3})"}),
       {"--labels", "\"zone\"", "must be a string"}},
      {start_head({"--labels", R"({"zone": 1e400})"}),
       {"--labels", "\"zone\""}},
      {start_head({"--labels", "zone=a"}), {"--labels", "JSON object"}},
      {start_head({"--health-timeout-ms", "0"}),
       {"--health-timeout-ms", "1 or more"}},
      {start_head({"--heartbeat-ms", "0"}), {"--heartbeat-ms", "1 or more"}},
      {start_head({"--heartbeat-ms", "3000"}),
       {"--health-timeout-ms (5000)", "twice --heartbeat-ms (3000)"}},
      {start_head({"--storage-sync", "always"}),
       {"--storage-sync", "`normal`", "`full`"}},
      {start_head({"--infeasible-grace-ms", "-1"}),
       {"--infeasible-grace-ms", "0 or more"}},
      {start_head({"--address", "127.0.0.1:6379"}), {"--head", "not both"}},
      {{"start", "--num-cpus", "1"}, {"--head", "--address HOST:PORT"}},
      {{"start", "--address", "10.0.0.1", "--token", "t"},
       {"--address", "HOST:PORT", "10.0.0.1"}},
      {{"start", "--address", "10.0.0.1:0", "--token", "t"},
       {"--address", "HOST:PORT"}},
      {{"start", "--address", ":6379", "--token", "t"},
       {"--address", "HOST:PORT"}},
      {{"status", "--format", "yaml"}, {"--format", "text or json", "yaml"}},
      {{"status", "--address", "10.0.0.1"}, {"--address", "HOST:PORT"}},
      {{"status"}, {"SHOAL_ADDRESS", "HOST:PORT"}, {"SHOAL_ADDRESS=10.0.0.1"}},
      {{"launch", "--per-device", "--max-restarts", "-3", "--", "true"},
       {"--max-restarts", "0 or more", "-3"}},
      {{"launch", "--per-device", "--nproc-per-node", "0", "--", "true"},
       {"--nproc-per-node", "1 or more"}},
      {{"launch", "--per-device", "--address", "10.0.0.1", "--", "true"},
       {"--address", "HOST:PORT"}},
      {{"launch", "--per-device", "--", "true"},
       {"SHOAL_ADDRESS", "HOST:PORT"},
       {"SHOAL_ADDRESS=10.0.0.1"}},
      {{"launch", "--", "true"}, {"--per-device", "--per-host"}},
      {{"launch", "--per-device", "--no-restart-on", "2,x", "--", "true"},
       {"--no-restart-on", "0 to 255"}},
  };
  int n = 0;
  for (const BadCommandLine& c : cases) {
    const std::string temp_dir =
        absl::StrCat(scratch.path(), "/case-", n++, "-dir");
    std::vector<std::string> args = c.args;
    std::vector<std::string> env = c.env;
    if (args[0] == "start") {
      args.insert(args.end(), {"--temp-dir", temp_dir});
    }
    // Nothing may find a cluster in the default temp dir either.
    env.push_back("SHOAL_TEMP_DIR=" + temp_dir);
    SCOPED_TRACE(absl::StrCat("shoal ", absl::StrJoin(args, " "), " (env ",
                              absl::StrJoin(env, " "), ")"));
    std::string out;
    EXPECT_EQ(RunCli(args, &out, env), 2) << out;
    for (const std::string& part : c.want_in_message) {
      EXPECT_THAT(out, HasSubstr(part));
    }
    EXPECT_THAT(out, Not(HasSubstr("terminate called")));
    EXPECT_FALSE(shoal::PathExists(temp_dir)) << "it made " << temp_dir;
    EXPECT_THAT(ProcessesMentioning(temp_dir), ::testing::IsEmpty());
  }
}

TEST(CliTest, UsageErrorsExitTwoAndHelpExitsZero) {
  ScratchDir scratch;
  const std::vector<std::string> env = {"SHOAL_TEMP_DIR=" + scratch.path()};
  const std::vector<BadCommandLine> cases = {
      {{"stauts"}, {R"(unknown command "stauts"; did you mean "status"?)"}},
      {{"strat", "--head"},
       {R"(unknown command "strat"; did you mean "start"?)"}},
      {{"stpo"}, {R"(did you mean "stop"?)"}},
      {{"lanch"}, {R"(did you mean "launch"?)"}},
      {{"dev", "fake-tpuu"},
       {R"(unknown command "fake-tpuu"; did you mean "fake-tpu"?)"}},
      {{"xyzzy"}, {R"(unknown command "xyzzy")", "start, stop, status"}},
      {{}, {"say a command", "start"}},
      {{"dev"}, {"say a command after dev", "fake-tpu"}},
      {{"start", "--bogus"}, {"--bogus", "shoal start --help"}},
      {{"status", "--adress", "10.0.0.1:6379"},
       {"unknown option --adress; did you mean --address?",
        "shoal status --help"}},
      {{"job", "submit", "--no-wiat", "--", "true"},
       {"unknown option --no-wiat; did you mean --no-wait?"}},
      {{"launch", "--per-host", "echo", "hi"},
       {"put -- before the command: shoal launch --per-host -- echo hi"}},
      {{"launch", "--per-device", "--nodes", "2", "python3", "-u", "t.py"},
       {"put -- before the command: shoal launch --per-device --nodes 2 -- "
        "python3 -u t.py"}},
      {{"job", "submit", "--env", "A=1", "--no-wait", "python3", "x y.py"},
       {"put -- before the command: shoal job submit --env A=1 --no-wait -- "
        "python3 'x y.py'"}},
      {{"list", "node"}, {"must be nodes or", "did you mean nodes?"}},
      {{"list", "task"}, {"did you mean tasks?"}},
      {{"summary", "taks"}, {"did you mean tasks?"}},
      {{"status", "extra"}, {"extra"}},
      {{"launch", "--per-device", "--per-host", "--", "true"},
       {"--per-device", "--per-host"}},
  };
  for (const BadCommandLine& c : cases) {
    SCOPED_TRACE(absl::StrCat("shoal ", absl::StrJoin(c.args, " ")));
    std::string out;
    EXPECT_EQ(RunCli(c.args, &out, env), 2) << out;
    for (const std::string& part : c.want_in_message) {
      EXPECT_THAT(out, HasSubstr(part));
    }
    // The hidden commands are never suggested.
    EXPECT_THAT(out, Not(HasSubstr("_agent")));
  }
  for (const std::vector<std::string>& help :
       std::vector<std::vector<std::string>>{{"--help"},
                                             {"start", "--help"},
                                             {"status", "--help"},
                                             {"launch", "--help"},
                                             {"dev", "fake-tpu", "--help"}}) {
    SCOPED_TRACE(absl::StrCat("shoal ", absl::StrJoin(help, " ")));
    std::string out;
    EXPECT_EQ(RunCli(help, &out, env), 0) << out;
    EXPECT_THAT(out, HasSubstr("Usage:"));
  }
  std::string out;
  ASSERT_EQ(RunCli({"start", "--help"}, &out, env), 0);
  EXPECT_THAT(out, HasSubstr("0 picks a free port"));
  EXPECT_THAT(out, HasSubstr("at least 1 MiB"));
}

// Run by StartHintsWorkInAFreshShell as the `./your_program` of the head's
// hint: it must join that head's cluster, not start one of its own.
TEST(HintProgram, DISABLED_JoinsTheRunningCluster) {
  shoal::Init();
  bool found = false;
  for (const auto& node : shoal::Nodes()) {
    found = found || node.node_id == kHintHeadNode;
  }
  EXPECT_TRUE(found) << "the program did not join the cluster of node "
                     << kHintHeadNode;
  EXPECT_EQ(shoal::Get(shoal::Task(Add).Remote(20, 22)), 42);
  shoal::Shutdown();
}

// Every command `shoal start` prints, for a head and for a joining node that
// were given --temp-dir, works when pasted as printed into a shell with
// nothing exported.
TEST(CliTest, StartHintsWorkInAFreshShell) {
  ScratchDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  const std::string& root = scratch.path();
  // A space in the folder names: the printed commands must quote them.
  const std::string head_dir = root + "/head dir";
  const std::string node_dir = root + "/node dir";
  const std::string bin = root + "/bin";
  const std::string work = root + "/work";
  ASSERT_TRUE(shoal::MakeDirs(bin).ok());
  ASSERT_TRUE(shoal::MakeDirs(work).ok());
  const std::string self = shoal::SelfExecutable();
  WriteScript(bin + "/shoal",
              absl::StrCat("SHOAL_ROLE=cli exec '", self, "' \"$@\""));
  WriteScript(work + "/your_program",
              absl::StrCat("exec '", self,
                           "' --gtest_also_run_disabled_tests "
                           "--gtest_filter=HintProgram.*"));

  std::string head_out;
  ASSERT_EQ(RunCli({"start", "--head", "--port", "0", "--node-ip-address",
                    "127.0.0.1", "--num-cpus", "2", "--node-id", kHintHeadNode,
                    "--temp-dir", head_dir},
                   &head_out),
            0)
      << head_out;
  std::string out;

  const std::string status_hint = Hint(head_out, "see the cluster");
  EXPECT_THAT(status_hint, HasSubstr("--temp-dir"));
  EXPECT_EQ(TypeIn(work, bin, status_hint, &out), 0) << status_hint << "\n"
                                                     << out;
  EXPECT_THAT(out, HasSubstr(kHintHeadNode));

  const std::string program_hint = Hint(head_out, "connect a program");
  EXPECT_THAT(program_hint, HasSubstr("./your_program"));
  EXPECT_EQ(TypeIn(work, bin, program_hint, &out), 0) << program_hint << "\n"
                                                      << out;
  EXPECT_THAT(out, HasSubstr("[  PASSED  ] 1 test"));

  // The join command, on this host: a second node needs a temp dir of its
  // own (one node per temp dir), so it gets one, as the README says.
  std::smatch join;
  ASSERT_TRUE(std::regex_search(
      head_out, join, std::regex("shoal start --address=\\S+ --token=\\S+")))
      << head_out;
  std::string join_out;
  ASSERT_EQ(TypeIn(work, bin,
                   absl::StrCat(join.str(), " --node-id hint-node --temp-dir '",
                                node_dir, "'"),
                   &join_out),
            0)
      << join_out;
  const std::string node_status_hint = Hint(join_out, "see the cluster");
  EXPECT_EQ(TypeIn(work, bin, node_status_hint, &out), 0)
      << node_status_hint << "\n"
      << out;
  EXPECT_THAT(out, HasSubstr(kHintHeadNode));
  EXPECT_THAT(out, HasSubstr("hint-node"));

  const std::string node_stop_hint = Hint(join_out, "stop");
  EXPECT_EQ(TypeIn(work, bin, node_stop_hint, &out), 0)
      << node_stop_hint << "\n"
      << out;
  EXPECT_THAT(out, HasSubstr("Stopped node agent"));
  EXPECT_THAT(LeftRunning(node_dir), ::testing::IsEmpty());

  const std::string stop_hint = Hint(head_out, "stop");
  EXPECT_EQ(TypeIn(work, bin, stop_hint, &out), 0) << stop_hint << "\n" << out;
  EXPECT_THAT(out, HasSubstr("Stopped head"));
  EXPECT_THAT(LeftRunning(head_dir), ::testing::IsEmpty());

  // Whatever failed above, nothing stays running.
  for (const std::string& dir : {node_dir, head_dir}) {
    RunCli({"stop", "--force", "--temp-dir", dir}, &out);
  }
  EXPECT_EQ(SanitizerReports(root), "");
}

// A fresh shell's `shoal` (this binary as the CLI) in `root`/bin.
std::string ShellBin(const std::string& root) {
  const std::string bin = root + "/bin";
  if (!shoal::MakeDirs(bin).ok()) return "";
  WriteScript(bin + "/shoal",
              absl::StrCat("SHOAL_ROLE=cli exec '", shoal::SelfExecutable(),
                           "' \"$@\""));
  return bin;
}

// `shoal start --head` again, for what already runs from that temp dir,
// does nothing and says so (the head's address included), as a second
// join does; only a head on another port than the one asked for fails.
TEST(CliTest, StartingARunningHeadAgainDoesNothing) {
  ScratchDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  const std::string temp_dir = scratch.path() + "/t";
  const std::vector<std::string> start = {
      "start",     "--head",     "--port", "0",          "--node-ip-address",
      "127.0.0.1", "--num-cpus", "1",      "--temp-dir", temp_dir};
  std::string first;
  ASSERT_EQ(RunCli(start, &first), 0) << first;
  std::smatch address;
  ASSERT_TRUE(std::regex_search(
      first, address, std::regex("Head address: +(127\\.0\\.0\\.1:([0-9]+))")))
      << first;
  std::string out;
  EXPECT_EQ(RunCli(start, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("already running"));
  EXPECT_THAT(out, HasSubstr(address[1].str()));
  EXPECT_THAT(out, HasSubstr("nothing to do"));
  std::vector<std::string> same_port = start;
  same_port[3] = address[2].str();
  EXPECT_EQ(RunCli(same_port, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("already running"));
  std::vector<std::string> other_port = start;
  other_port[3] = std::to_string(std::stoi(address[2].str()) + 1);
  EXPECT_EQ(RunCli(other_port, &out), 1) << out;
  EXPECT_THAT(out, HasSubstr(address[1].str()));
  EXPECT_THAT(out, HasSubstr("shoal stop --temp-dir"));
  // Still the one head, as it was.
  EXPECT_EQ(RunCli({"status", "--temp-dir", temp_dir}, &out), 0) << out;
  EXPECT_EQ(RunCli({"stop", "--temp-dir", temp_dir}, &out), 0) << out;
  EXPECT_THAT(LeftRunning(temp_dir), ::testing::IsEmpty());
}

// A node or driver of another version than the cluster's head is refused
// before it joins, saying both versions; the cluster goes on as it was.
// (The head's record is rewritten here to stand for a head of another
// version.) `shoal --version` says this build's.
TEST(CliTest, AVersionOtherThanTheClustersIsRefused) {
  std::string out;
  ASSERT_EQ(RunCli({"--version"}, &out), 0) << out;
  EXPECT_EQ(out, absl::StrCat("shoal, version ", shoal::ShoalVersion(), "\n"));

  ScratchDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  const std::string head_dir = scratch.path() + "/head";
  ASSERT_EQ(RunCli({"start", "--head", "--port", "0", "--node-ip-address",
                    "127.0.0.1", "--num-cpus", "1", "--temp-dir", head_dir},
                   &out),
            0)
      << out;
  std::string address, token;
  ASSERT_TRUE(shoal::ResolveClusterAddress(head_dir, &address, &token).ok());
  {
    auto loop = shoal::rpc::EventLoop::Create("version-test");
    ASSERT_TRUE(loop.ok()) << loop.status();
    shoal::rpc::HeadClient head(loop->get(), address, token, "version test");
    shoal::proto::KvGetRequest get;
    get.set_key(shoal::kClusterVersionKey);
    auto recorded = head.KvGet(get);
    ASSERT_TRUE(recorded.ok()) << recorded.status();
    EXPECT_EQ(recorded->value(), shoal::ShoalVersion());
    shoal::proto::KvPutRequest put;
    put.set_key(shoal::kClusterVersionKey);
    put.set_value("0.0.1");
    put.set_overwrite(true);
    ASSERT_TRUE(head.KvPut(put).ok());
  }

  const std::string node_dir = scratch.path() + "/node";
  EXPECT_EQ(RunCli({"start", "--address", address, "--node-ip-address",
                    "127.0.0.1", "--num-cpus", "1", "--temp-dir", node_dir},
                   &out, {absl::StrCat("SHOAL_TOKEN=", token)}),
            1)
      << out;
  EXPECT_THAT(out, HasSubstr("Version mismatch"));
  EXPECT_THAT(out, HasSubstr("Shoal 0.0.1"));
  EXPECT_THAT(out, HasSubstr(shoal::ShoalVersion()));
  EXPECT_THAT(LeftRunning(node_dir), ::testing::IsEmpty());

  try {
    shoal::Init({.address = address, .token = token});
    ADD_FAILURE() << "a driver of another version joined";
    shoal::Shutdown();
  } catch (const shoal::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("Version mismatch"));
    EXPECT_THAT(e.what(), HasSubstr("Shoal 0.0.1"));
  }
  EXPECT_FALSE(shoal::IsInitialized());

  ASSERT_EQ(RunCli({"status", "--temp-dir", head_dir}, &out), 0) << out;
  // The head's own node alone, and none dead.
  size_t alive = 0;
  for (size_t at = out.find(" ALIVE "); at != std::string::npos;
       at = out.find(" ALIVE ", at + 1)) {
    ++alive;
  }
  EXPECT_EQ(alive, 1u) << out;
  EXPECT_THAT(out, HasSubstr("(no dead nodes)"));
  EXPECT_EQ(RunCli({"stop", "--temp-dir", head_dir}, &out), 0) << out;
  EXPECT_THAT(LeftRunning(head_dir), ::testing::IsEmpty());
}

// A job's Python program imports shoal with nothing exported (the agent
// adds the package that came with it to PYTHONPATH); a Ctrl-C while `shoal
// job submit` follows a job says that the job goes on, and how to stop it
// or follow it again.
TEST(CliTest, JobsImportShoalAndCtrlCSaysTheJobGoesOn) {
  ScratchDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  const std::string& root = scratch.path();
  const std::string bin = ShellBin(root);
  const std::string temp_dir = root + "/t";
  ASSERT_FALSE(bin.empty());
  std::string out;
  ASSERT_EQ(TypeIn(root, bin,
                   absl::StrCat("shoal start --head --port 0 "
                                "--node-ip-address 127.0.0.1 --num-cpus 2 "
                                "--temp-dir ",
                                temp_dir),
                   &out),
            0)
      << out;

  const std::filesystem::path package =
      std::filesystem::path(shoal::SelfExecutable()).parent_path() /
      "../python/shoal/__init__.py";
  if (!SHOAL_HAS_PYTHON) {
    // A sanitizer build has no Python package; the plain build checks this.
  } else if (shoal::PathExists(package.string())) {
    EXPECT_EQ(TypeIn(root, bin,
                     absl::StrCat("shoal job submit --temp-dir ", temp_dir,
                                  " -- /usr/bin/python3 -c 'import shoal; "
                                  "print(\"imported\", shoal.__name__)'"),
                     &out),
              0)
        << out;
    EXPECT_THAT(out, HasSubstr("imported shoal"));
  } else {
    ADD_FAILURE() << "no Python package beside this build (" << package
                  << "): build the shoal_python target";
  }

  // The submit runs in the background of a script, which is what a Ctrl-C
  // in a terminal does to it: SIGINT.
  const std::string script = absl::StrCat(
      "shoal job submit --temp-dir ", temp_dir,
      " --submission-id sleepy -- sleep 120 2>err & pid=$!\n"
      "for i in $(seq 150); do grep -q submitted err 2>/dev/null && break; "
      "sleep 0.1; done\n"
      "sleep 0.5; kill -INT $pid; wait $pid; echo \"rc=$?\"; cat err\n");
  EXPECT_EQ(TypeIn(root, bin, script, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("rc=130"));
  EXPECT_THAT(out, HasSubstr("job sleepy; the job is still running"));
  EXPECT_THAT(out, HasSubstr(absl::StrCat("shoal job stop --temp-dir ",
                                          temp_dir, " sleepy")));
  EXPECT_THAT(out, HasSubstr(absl::StrCat("shoal job logs --follow --temp-dir ",
                                          temp_dir, " sleepy")));
  EXPECT_EQ(RunCli({"job", "status", "--temp-dir", temp_dir, "sleepy"}, &out),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr("RUNNING"));
  EXPECT_EQ(RunCli({"job", "stop", "--temp-dir", temp_dir, "sleepy"}, &out), 0)
      << out;
  EXPECT_EQ(RunCli({"stop", "--temp-dir", temp_dir}, &out), 0) << out;
  EXPECT_THAT(LeftRunning(temp_dir), ::testing::IsEmpty());
}

// Runs `program` (a quoted path and its arguments), typed in a shell with
// only the address and token of a fresh one-node cluster of `cpus` CPUs,
// which is stopped after; its exit code, output in *out.
int RunOnAFreshNode(const std::string& node, double cpus,
                    const std::string& program, std::string* out) {
  ClusterSpec spec;
  spec.nodes = {{node, cpus, ""}};
  auto cluster = TestCluster::Start(spec);
  if (!cluster.ok()) {
    *out = cluster.status().ToString();
    return -1;
  }
  int rc =
      TypeIn((*cluster)->root(), "/nonexistent",
             absl::StrCat("SHOAL_ADDRESS=", (*cluster)->address(),
                          " SHOAL_TOKEN=", (*cluster)->token(), " ", program),
             out);
  (*cluster)->Stop();
  EXPECT_EQ((*cluster)->sanitizer_reports(), "");
  return rc;
}

// Run by UncaughtErrorsEndWithTheirMessage (with --gtest_catch_exceptions=0):
// a driver that lets a shoal::Error escape.
TEST(UncaughtErrorProgram, DISABLED_Throws) {
  shoal::Init();
  std::cout << "printed before" << std::endl;
  throw shoal::InfeasibleError("no node has any accel_x (asked for 1.0)");
}

// A shoal::Error a program does not catch ends it with its message and
// exit status 1, not `terminate called` and an abort.
TEST(CliTest, UncaughtErrorsEndWithTheirMessage) {
  std::string out;
  int rc =
      RunOnAFreshNode("uncaught-node", 1,
                      absl::StrCat("'", shoal::SelfExecutable(),
                                   "' --gtest_also_run_disabled_tests "
                                   "--gtest_catch_exceptions=0 "
                                   "--gtest_filter=UncaughtErrorProgram.*"),
                      &out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_THAT(out, HasSubstr("printed before"));
  EXPECT_THAT(out, HasSubstr("uncaught shoal::InfeasibleError: no node has "
                             "any accel_x (asked for 1.0)"));
  EXPECT_THAT(out, HasSubstr("catch shoal::Error"));
  EXPECT_THAT(out, Not(HasSubstr("terminate called")));
}

#ifdef SHOAL_HELLO_TASKS
// The examples end with a message, not `terminate called`, when there is no
// cluster at SHOAL_ADDRESS.
TEST(CliTest, ExamplesSayWhyTheyCannotConnect) {
  ScratchDir scratch;
  std::vector<std::pair<std::string, std::string>> examples = {
      {"hello_tasks", SHOAL_HELLO_TASKS}};
#ifdef SHOAL_SEED_WALKTHROUGH
  examples.push_back({"seed_walkthrough", SHOAL_SEED_WALKTHROUGH});
#endif
  for (const auto& [name, path] : examples) {
    SCOPED_TRACE(name);
    std::string out;
    EXPECT_EQ(
        TypeIn(scratch.path(), "/nonexistent",
               absl::StrCat("SHOAL_ADDRESS=127.0.0.1:1 '", path, "'"), &out),
        1)
        << out;
    EXPECT_THAT(out, HasSubstr(name + ": "));
    EXPECT_THAT(out, HasSubstr("127.0.0.1:1"));
    EXPECT_THAT(out, Not(HasSubstr("terminate called")));
  }
}

// hello_tasks prints memory as `shoal status` does (GiB), not 6.91836e+10.
TEST(CliTest, HelloTasksPrintsMemoryInBinaryUnits) {
  std::string out;
  int rc = RunOnAFreshNode("hello-node", 2,
                           absl::StrCat("'", SHOAL_HELLO_TASKS, "' 20"), &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("(correct)"));
  EXPECT_TRUE(std::regex_search(
      out, std::regex(" memory=[0-9]+\\.[0-9]{2}(B|KiB|MiB|GiB|TiB)( |\n)")))
      << out;
  EXPECT_THAT(out, Not(HasSubstr("e+")));
}
#endif  // SHOAL_HELLO_TASKS

}  // namespace
