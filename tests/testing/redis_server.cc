#include "tests/testing/redis_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/process.h"

namespace shoal::testing {
namespace {

absl::StatusOr<int> FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("socket() failed");
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  if (port < 0) return absl::InternalError("cannot find a free port");
  return port;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RedisServer>> RedisServer::Start(
    std::vector<std::string> extra_args) {
  std::unique_ptr<RedisServer> server(new RedisServer());
  char tmpl[] = "/tmp/shoal-redis-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  server->dir_ = tmpl;
  server->extra_args_ = std::move(extra_args);
  auto port = FreeLoopbackPort();
  if (!port.ok()) return port.status();
  server->port_ = *port;
  absl::Status started = server->Run();
  if (!started.ok()) return started;
  return server;
}

RedisServer::~RedisServer() {
  Kill();
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

std::string RedisServer::url(int db) const {
  return absl::StrCat("redis://127.0.0.1:", port_,
                      db > 0 ? absl::StrCat("/", db) : "");
}

absl::Status RedisServer::Run() {
  SpawnOptions spawn;
  spawn.argv = {"/usr/bin/redis-server",
                "--port",
                std::to_string(port_),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--dir",
                dir_,
                "--daemonize",
                "no"};
  spawn.argv.insert(spawn.argv.end(), extra_args_.begin(), extra_args_.end());
  spawn.log_path = dir_ + "/redis.log";
  auto pid = Spawn(spawn);
  if (!pid.ok()) return pid.status();
  pid_ = *pid;
  for (int i = 0; i < 500; ++i) {
    auto pong = Cli({"PING"});
    if (pong.ok() && *pong == "PONG") return absl::OkStatus();
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) break;
    usleep(20000);
  }
  auto log = ReadFile(spawn.log_path);
  Kill();
  return absl::UnavailableError(
      absl::StrCat("redis-server on port ", port_,
                   " did not answer PING: ", log.ok() ? *log : "(no log)",
                   " (install it with `apt-get install redis-server`)"));
}

void RedisServer::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

absl::Status RedisServer::Restart() {
  Kill();
  return Run();
}

absl::StatusOr<std::string> RedisServer::Cli(
    const std::vector<std::string>& args) const {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  SpawnOptions spawn;
  spawn.argv = {"/usr/bin/redis-cli", "-p", std::to_string(port_)};
  spawn.argv.insert(spawn.argv.end(), args.begin(), args.end());
  spawn.output_fd = fds[1];
  auto pid = Spawn(spawn);
  close(fds[1]);
  if (!pid.ok()) {
    close(fds[0]);
    return pid.status();
  }
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) text.append(buf, n);
  close(fds[0]);
  int status = 0;
  waitpid(*pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::UnavailableError(absl::StrCat("redis-cli: ", text));
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

}  // namespace shoal::testing
