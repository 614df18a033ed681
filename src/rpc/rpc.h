// Shoal's RPC: length-prefixed frames over TCP, one event loop per process.
//
// A frame is a 17-byte header (u32 length of the rest, u8 kind, u32 method,
// u64 call id, little endian) and a payload, normally a serialized protobuf
// message of proto/shoal/shoal.proto. Every connection starts with a Hello
// frame that carries the cluster token; the server refuses (and logs) a
// connection whose token is wrong before any request is read. Connections
// that have not said their hello yet are bounded per peer address and in all,
// the oldest giving way to newer ones, and get 10 s to say it
// (rpc/strangers.h): a peer without the token cannot keep others out by
// holding connections open. Responses may
// arrive in any order; the call id pairs them with requests. Frames written
// during one loop iteration leave in one write(2): pipelined calls batch by
// themselves. See docs/design/rpc.md for why this and not gRPC. With TLS
// (rpc/tls.h, docs/design/security.md) the same frames travel inside a TLS
// 1.3 session, and the Hello still carries the token.
//
// Threading: Server and Channel live on one EventLoop; all their methods must
// be called on that loop's thread, and callbacks run there.
#ifndef SHOAL_RPC_RPC_H_
#define SHOAL_RPC_RPC_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rpc/channel.h"
#include "rpc/event_loop.h"
#include "rpc/strangers.h"

namespace google::protobuf {
class MessageLite;
}

namespace shoal::rpc {

class Connection;
class ServerStatsRecorder;
class TlsContext;

// Upper bounds of the latency buckets a server with EnableStats() counts
// requests in (seconds; a last bucket, +Inf, follows).
inline constexpr double kLatencyBucketsSeconds[] = {
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,    0.1,    0.25,    0.5,    1,     2.5,    5,     10};
inline constexpr int kNumLatencyBuckets =
    sizeof(kLatencyBucketsSeconds) / sizeof(double) + 1;

// Where the replies to one request go when it did not come over a
// connection: a peer in memory (rpc/fake_channel.h).
class ReplySink {
 public:
  virtual ~ReplySink() = default;
  // The reply's payload, or the error it carries.
  virtual void Deliver(absl::StatusOr<std::string> reply) = 0;
  virtual bool connected() const = 0;
  virtual uint64_t connection_id() const = 0;
  virtual const std::string& peer() const = 0;
};

// Replies to one request. Cheap to copy; may be kept and used later (on the
// loop thread). Replying to a connection that has closed does nothing.
class Responder {
 public:
  Responder() = default;
  // Replies to a request that came from memory (see ReplySink).
  explicit Responder(std::shared_ptr<ReplySink> sink)
      : sink_(std::move(sink)) {}
  void Reply(const google::protobuf::MessageLite& message) const;
  void ReplyRaw(std::string payload) const;
  // Replies and writes to the socket at once instead of at the end of the
  // loop iteration (a worker does this so that results already computed are
  // not lost if the next task crashes the process).
  void ReplyNow(const google::protobuf::MessageLite& message) const;
  void Error(const absl::Status& status) const;
  uint64_t connection_id() const;
  const std::string& peer() const;
  // False once the requester's connection has closed.
  bool connected() const;

 private:
  friend class Server;
  Responder(std::shared_ptr<Connection> conn, uint64_t call_id, uint32_t method,
            int64_t start_us)
      : conn_(std::move(conn)),
        call_id_(call_id),
        method_(method),
        start_us_(start_us) {}
  // Counts the reply in the server's stats, if it keeps them.
  void Record(bool ok) const;
  std::shared_ptr<Connection> conn_;
  std::shared_ptr<ReplySink> sink_;  // instead of conn_, from memory
  uint64_t call_id_ = 0;
  uint32_t method_ = 0;
  int64_t start_us_ = 0;  // when the request came; 0: no stats kept
};

// What serves requests by method: a Server, or a peer in memory in tests
// (rpc/fake_channel.h). Handlers run on the loop thread.
class HandlerRegistry {
 public:
  using Handler = std::function<void(std::string_view payload, Responder)>;
  virtual ~HandlerRegistry() = default;
  virtual void Register(int method, Handler handler) = 0;
};

class Server : public HandlerRegistry {
 public:
  // Listens on host:port (port 0 picks one). Fails with a message naming the
  // address when it is taken. Connections use this process's TLS
  // (rpc/tls.h: ProcessTls), and the overload's `tls` (null: plain TCP).
  static absl::StatusOr<std::unique_ptr<Server>> Create(EventLoop* loop,
                                                        const std::string& host,
                                                        int port,
                                                        std::string token);
  static absl::StatusOr<std::unique_ptr<Server>> Create(
      EventLoop* loop, const std::string& host, int port, std::string token,
      std::shared_ptr<const TlsContext> tls);
  ~Server();

  int port() const { return port_; }
  // Also accepts on `host` at the same port (e.g. 127.0.0.1 beside the
  // advertised address, so that programs on this host can use loopback).
  absl::Status AlsoListen(const std::string& host);
  void Register(int method, Handler handler) override;
  // Counts requests and how long each took to be answered, by method and
  // outcome, and answers GET_SERVER_STATS with them.
  void EnableStats();
  // Called when an authenticated connection closes (its id is the one
  // Responder::connection_id() gave).
  void OnDisconnect(std::function<void(uint64_t connection_id)> callback);
  // Stops accepting and closes every connection.
  void Shutdown();

  // Connections that have not presented the token yet (rpc/strangers.h).
  size_t strangers() const { return strangers_.size(); }

 private:
  Server(EventLoop* loop, int port, std::string token,
         std::shared_ptr<const TlsContext> tls);
  void AddListener(int fd);
  // Takes a bounded batch of the connections waiting on `listen_fd`.
  void Accept(int listen_fd);
  // Stops accepting on `listen_fd` for a moment (out of descriptors, `err`).
  void PauseAccepting(int listen_fd, int err);
  // Seats a new connection among the strangers (making room if need be) and
  // starts it.
  void Admit(int fd, const sockaddr_in& addr);
  // Closes stranger `id` for `fate`, unless a last read of what it sent
  // lets it in.
  void DropStranger(uint64_t id, StrangerFate fate);
  // Keeps a timer at the oldest stranger's hello deadline.
  void ArmHelloDeadline();
  // Logs what became of a stranger, through stranger_log_.
  void NoteStranger(StrangerFate fate, std::string what);
  void OnFrame(const std::shared_ptr<Connection>& conn, uint8_t kind,
               uint32_t method, uint64_t call_id, std::string_view payload);

  EventLoop* loop_;
  std::vector<int> listen_fds_;
  int port_;
  std::string token_;
  std::shared_ptr<const TlsContext> tls_;  // null: plain TCP
  uint64_t next_conn_id_ = 1;
  std::unordered_map<uint64_t, std::shared_ptr<Connection>> conns_;
  std::unordered_map<int, Handler> handlers_;
  std::function<void(uint64_t)> on_disconnect_;
  std::shared_ptr<ServerStatsRecorder> stats_;  // null unless EnableStats()
  StrangerSeats strangers_;  // connections that have not said hello yet
  StrangerLog stranger_log_;
  uint64_t hello_timer_ = 0;  // at the oldest stranger's deadline; 0: none
  uint64_t log_timer_ = 0;    // says what stranger_log_ holds; 0: none
  int64_t last_pause_log_us_ = 0;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// Makes `server`, which listens on `advertised_host`, answer on 127.0.0.1 of
// this host as well, so that a program here may use loopback whatever address
// the node advertises. A taken loopback port is logged, not fatal.
void AlsoListenOnLoopback(Server* server, const std::string& advertised_host);

// A client connection to one address over TCP (or TLS). Connects on first
// use and again after a failure; calls made while connecting wait for the
// handshake (the TLS one, then the token's).
class TcpChannel final : public Channel {
 public:
  // With this process's TLS (ProcessTls; a config error fails every call),
  // or with `tls` (null: plain TCP).
  TcpChannel(EventLoop* loop, std::string address, std::string token,
             std::string peer_name);
  TcpChannel(EventLoop* loop, std::string address, std::string token,
             std::string peer_name, std::shared_ptr<const TlsContext> tls);
  ~TcpChannel() override;

  using Channel::Call;
  void Call(int method, std::string payload, Callback callback,
            int64_t timeout_ms) override;
  void OnDisconnect(std::function<void(const absl::Status&)> callback) override;
  const std::string& address() const override { return address_; }
  // How many times a connection that the server closed before it took the
  // hello, having sent no frame, is made again, 40, 80, 160... ms apart
  // (default 3): a server drops the oldest strangers when a flood fills
  // their seats, and nothing queued was sent.
  void set_hello_retries(int retries) { max_hello_retries_ = retries; }
  bool connected() const override;
  size_t pending_calls() const override { return pending_.size(); }
  void Close() override;

 private:
  struct Pending {
    Callback callback;
    uint64_t timer = 0;
  };
  void Connect();
  void OnFrame(uint8_t kind, uint32_t method, uint64_t call_id,
               std::string_view payload);
  void OnClosed(const absl::Status& why);
  // A connection closed after it was made and before the server took the
  // hello, with no frame from the server (a server seats strangers for a
  // while, and drops the oldest when a flood fills the seats): nothing
  // queued was sent, so it connects again, up to max_hello_retries_ times.
  // Whether it does.
  bool RetryBeforeHello(const absl::Status& why);
  void Fail(uint64_t call_id, const absl::Status& status);

  EventLoop* loop_;
  const std::string address_;
  const std::string token_;
  const std::string peer_name_;
  const absl::StatusOr<std::shared_ptr<const TlsContext>> tls_;
  std::shared_ptr<Connection> conn_;
  bool ready_ = false;     // handshake done
  int hello_retries_ = 0;  // since the last hello the server took
  int max_hello_retries_ = 3;
  int frames_heard_ = 0;  // on the current connection
  uint64_t next_call_id_ = 1;
  std::unordered_map<uint64_t, Pending> pending_;
  std::vector<std::string> queued_;  // encoded frames waiting for the handshake
  std::function<void(const absl::Status&)> on_disconnect_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// Makes TcpChannels on one loop, with one token, peer name and TLS.
class TcpChannelFactory final : public ChannelFactory {
 public:
  // With this process's TLS (ProcessTls).
  TcpChannelFactory(EventLoop* loop, std::string token, std::string peer_name);
  std::unique_ptr<Channel> Connect(const std::string& address) override;

 private:
  EventLoop* const loop_;
  const std::string token_;
  const std::string peer_name_;
};

// Whether a call failed before its request was written to the connection
// (the connection never came up): the peer cannot have acted on it.
bool NeverSent(const absl::Status& status);
inline constexpr char kNotSentPayload[] = "shoal.rpc/not-sent";

// The error an error frame carries: its code (from the peer, so OK, which no
// error may have, reads as UNKNOWN) and its message.
absl::Status ErrorFrameStatus(uint32_t code, std::string_view message);

// Typed convenience over Channel::Call.
bool ParseMessage(std::string_view payload, google::protobuf::MessageLite* m);
std::string Serialize(const google::protobuf::MessageLite& m);

template <typename Reply>
void CallProto(Channel* channel, int method,
               const google::protobuf::MessageLite& request,
               std::function<void(absl::StatusOr<Reply>)> callback,
               int64_t timeout_ms = 0) {
  channel->Call(
      method, Serialize(request),
      [cb = std::move(callback), method](absl::StatusOr<std::string> payload) {
        if (!payload.ok()) return cb(payload.status());
        Reply reply;
        if (!ParseMessage(*payload, &reply)) {
          return cb(absl::DataLossError("malformed reply to method " +
                                        std::to_string(method)));
        }
        cb(std::move(reply));
      },
      timeout_ms);
}

// Registers a typed handler: a request that does not parse gets an
// InvalidArgument error and the handler is not called.
template <typename Request>
void RegisterProto(HandlerRegistry* server, int method,
                   std::function<void(const Request&, Responder)> handler) {
  server->Register(method, [h = std::move(handler), method](
                               std::string_view payload, Responder r) {
    Request request;
    if (!ParseMessage(payload, &request)) {
      r.Error(absl::InvalidArgumentError(
          "malformed request for method " + std::to_string(method) +
          ": the peer speaks another protocol version or sent garbage"));
      return;
    }
    h(request, std::move(r));
  });
}

}  // namespace shoal::rpc

#endif  // SHOAL_RPC_RPC_H_
