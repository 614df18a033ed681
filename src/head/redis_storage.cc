#include "head/redis_storage.h"

#include <hiredis.h>
#include <sys/time.h>

#include <map>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/logging.h"
#include "common/process.h"
#include "common/status_macros.h"

namespace shoal {
namespace {

constexpr int kSchemaVersion = 1;
constexpr char kPrefix[] = "shoal:";
constexpr char kSchemaKey[] = "shoal:schema";
constexpr char kOwnerKey[] = "shoal:owner";
constexpr char kTablePrefix[] = "shoal:table:";
constexpr char kSchemaText[] = "shoal head state, schema ";
constexpr char kUrlExample[] =
    "redis://HOST:PORT[/DB] or redis://:PASSWORD@HOST:PORT[/DB], e.g. "
    "redis://10.0.0.5:6380/0";

// A write, done only while this head still owns the state: a head that
// opened it after this one did took the owner counter past ours.
constexpr char kWriteScript[] = R"lua(
local owner = redis.call('GET', KEYS[1])
if owner ~= ARGV[1] then
  return redis.error_reply('SHOAL_FENCED ' .. tostring(owner))
end
if ARGV[2] == 'put' then
  redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
else
  redis.call('HDEL', KEYS[2], ARGV[3])
end
return 1
)lua";

struct FreeReply {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, FreeReply>;
struct FreeContext {
  void operator()(redisContext* c) const { redisFree(c); }
};
using Context = std::unique_ptr<redisContext, FreeContext>;

std::string Text(const redisReply* r) {
  return r->str == nullptr ? std::string() : std::string(r->str, r->len);
}
bool IsError(const redisReply* r) { return r->type == REDIS_REPLY_ERROR; }
timeval Timeval(int ms) { return {ms / 1000, (ms % 1000) * 1000}; }

class RedisTableStorage : public TableStorage {
 public:
  RedisTableStorage(RedisAddress address, RedisStorageOptions options)
      : address_(std::move(address)), options_(options) {}

  absl::Status Open(std::string* durability_warning) {
    // hiredis writes without MSG_NOSIGNAL: a server gone away must be an
    // error, not the end of the head.
    IgnoreSigpipeUnlessHandled();
    RETURN_IF_ERROR(Connect());
    RETURN_IF_ERROR(CheckSchema());
    ASSIGN_OR_RETURN(Reply owner, Call({"INCR", kOwnerKey}));
    if (owner->type != REDIS_REPLY_INTEGER) {
      return Foreign(absl::StrCat(kOwnerKey, " is not a counter"));
    }
    owner_ = absl::StrCat(owner->integer);
    RETURN_IF_ERROR(Load());
    std::string warning = DurabilityWarning();
    if (!warning.empty()) SHOAL_LOG(WARNING) << warning;
    if (durability_warning != nullptr) *durability_warning = warning;
    SHOAL_LOG(INFO) << "the head's state is in " << address_.Display()
                    << " (head #" << owner_ << " on it)";
    return absl::OkStatus();
  }

  absl::Status Put(const std::string& table, const std::string& key,
                   const std::string& value) override {
    RETURN_IF_ERROR(Write(table, "put", key, &value));
    return rows_->Put(table, key, value);
  }

  std::optional<std::string> Get(const std::string& table,
                                 const std::string& key) const override {
    return rows_->Get(table, key);
  }

  absl::Status Delete(const std::string& table,
                      const std::string& key) override {
    RETURN_IF_ERROR(Write(table, "delete", key, nullptr));
    return rows_->Delete(table, key);
  }

  std::map<std::string, std::string> Scan(
      const std::string& table) const override {
    return rows_->Scan(table);
  }

  bool OutlivesSessionFolder() const override { return true; }

 private:
  absl::Status Connect() {
    context_.reset(
        redisConnectWithTimeout(address_.host.c_str(), address_.port,
                                Timeval(options_.connect_timeout_ms)));
    if (context_ == nullptr || context_->err != 0) {
      std::string why =
          context_ == nullptr ? "out of memory" : context_->errstr;
      context_.reset();
      return absl::UnavailableError(absl::StrCat(
          "cannot reach the Redis server of --storage ", address_.Display(),
          " (", why,
          "): start redis-server there (for durable writes: redis-server "
          "--appendonly yes --appendfsync always), or check the address in "
          "--storage"));
    }
    redisSetTimeout(context_.get(), Timeval(options_.command_timeout_ms));
    redisEnableKeepAlive(context_.get());
    if (!address_.password.empty()) {
      ASSIGN_OR_RETURN(Reply auth, Send({"AUTH", address_.password}));
      if (IsError(auth.get())) {
        context_.reset();
        return absl::PermissionDeniedError(
            absl::StrCat("the Redis server of --storage ", address_.Display(),
                         " refused its password (", Text(auth.get()),
                         "): give the one its requirepass says"));
      }
    }
    if (address_.db != 0) {
      ASSIGN_OR_RETURN(Reply select,
                       Send({"SELECT", absl::StrCat(address_.db)}));
      if (IsError(select.get())) {
        context_.reset();
        return absl::InvalidArgumentError(absl::StrCat(
            "the Redis server of --storage ", address_.Display(),
            " has no database ", address_.db, " (", Text(select.get()),
            "): use a number below its `databases` setting"));
      }
    }
    return absl::OkStatus();
  }

  // One round trip; a connection that was lost is made again once.
  absl::StatusOr<Reply> Send(const std::vector<absl::string_view>& args) {
    std::vector<const char*> argv;
    std::vector<size_t> lengths;
    for (absl::string_view a : args) {
      argv.push_back(a.data());
      lengths.push_back(a.size());
    }
    std::string lost;
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (context_ == nullptr) {
        absl::Status connected = Connect();
        if (!connected.ok()) {
          return lost.empty() ? connected
                              : Annotate(connected, "lost connection (" + lost +
                                                        ") and then");
        }
      }
      auto* reply = static_cast<redisReply*>(
          redisCommandArgv(context_.get(), static_cast<int>(argv.size()),
                           argv.data(), lengths.data()));
      if (reply != nullptr) return Reply(reply);
      lost = context_->errstr;
      context_.reset();
    }
    return absl::UnavailableError(
        absl::StrCat("the Redis server of --storage ", address_.Display(),
                     " did not answer (", lost, "); is it running?"));
  }

  // Send, with an error reply made a Status too.
  absl::StatusOr<Reply> Call(const std::vector<absl::string_view>& args) {
    ASSIGN_OR_RETURN(Reply reply, Send(args));
    if (!IsError(reply.get())) return reply;
    std::string error = Text(reply.get());
    if (absl::StartsWith(error, "NOAUTH")) {
      return absl::PermissionDeniedError(
          absl::StrCat("the Redis server of --storage ", address_.Display(),
                       " needs a password: give it in the URL, "
                       "redis://:PASSWORD@HOST:PORT"));
    }
    if (absl::StartsWith(error, "WRONGTYPE")) {
      return Foreign(absl::StrCat("\"", args[0], " ",
                                  args.size() > 1 ? args[1] : "", "\" says ",
                                  error));
    }
    return absl::UnavailableError(
        absl::StrCat("the Redis server of --storage ", address_.Display(),
                     " answered \"", args[0], "\" with: ", error));
  }

  absl::Status CheckSchema() {
    ASSIGN_OR_RETURN(Reply schema, Call({"GET", kSchemaKey}));
    const std::string ours = absl::StrCat(kSchemaText, kSchemaVersion);
    if (schema->type == REDIS_REPLY_NIL) {
      // New state, in a database that must hold nothing else of ours.
      ASSIGN_OR_RETURN(std::vector<std::string> keys, Keys("shoal:*"));
      if (!keys.empty()) {
        return Foreign(
            absl::StrCat("it holds ", keys.front(), " but no ", kSchemaKey));
      }
      return Call({"SET", kSchemaKey, ours, "NX"}).status();
    }
    std::string text = Text(schema.get());
    if (text == ours) return absl::OkStatus();
    int version = 0;
    absl::string_view number = text;
    if (absl::ConsumePrefix(&number, kSchemaText) &&
        absl::SimpleAtoi(number, &version) && version > kSchemaVersion) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the head's state in ", address_.Display(),
          " was written by a newer Shoal (schema ", version,
          "; this head reads schema ", kSchemaVersion,
          "): start the newer head on it, or give this one another database "
          "(redis://HOST:PORT/DB)"));
    }
    return Foreign(absl::StrCat(kSchemaKey, " is \"", text, "\""));
  }

  // Every key matching `pattern` (SCAN: the server is not blocked).
  absl::StatusOr<std::vector<std::string>> Keys(const std::string& pattern) {
    std::vector<std::string> keys;
    std::string cursor = "0";
    do {
      ASSIGN_OR_RETURN(Reply page, Call({"SCAN", cursor, "MATCH", pattern,
                                         "COUNT", "1000"}));
      if (page->type != REDIS_REPLY_ARRAY || page->elements != 2) {
        return absl::UnavailableError("SCAN gave an unexpected reply");
      }
      cursor = Text(page->element[0]);
      const redisReply* batch = page->element[1];
      for (size_t i = 0; i < batch->elements; ++i) {
        keys.push_back(Text(batch->element[i]));
      }
    } while (cursor != "0");
    return keys;
  }

  // Every table, whole, before the head serves anything.
  absl::Status Load() {
    ASSIGN_OR_RETURN(std::vector<std::string> keys,
                     Keys(absl::StrCat(kTablePrefix, "*")));
    for (const std::string& key : keys) {
      ASSIGN_OR_RETURN(Reply rows, Call({"HGETALL", key}));
      if (rows->type != REDIS_REPLY_ARRAY || rows->elements % 2 != 0) {
        return Foreign(absl::StrCat(key, " is not a hash"));
      }
      const std::string table = key.substr(sizeof(kTablePrefix) - 1);
      for (size_t i = 0; i + 1 < rows->elements; i += 2) {
        RETURN_IF_ERROR(rows_->Put(table, Text(rows->element[i]),
                                   Text(rows->element[i + 1])));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Write(const std::string& table, absl::string_view op,
                     const std::string& key, const std::string* value) {
    const std::string hash = absl::StrCat(kTablePrefix, table);
    std::vector<absl::string_view> args = {"EVAL", kWriteScript, "2", kOwnerKey,
                                           hash,   owner_,       op,  key};
    if (value != nullptr) args.push_back(*value);
    ASSIGN_OR_RETURN(Reply reply, Send(args));
    if (!IsError(reply.get())) return absl::OkStatus();
    std::string error = Text(reply.get());
    absl::string_view now = error;
    if (!absl::ConsumePrefix(&now, "SHOAL_FENCED ")) {
      return absl::UnavailableError(
          absl::StrCat("the Redis server of --storage ", address_.Display(),
                       " refused a write: ", error));
    }
    if (now == "false") {
      return absl::DataLossError(absl::StrCat(
          "the Redis server of --storage ", address_.Display(),
          " no longer holds this head's state (was it flushed, or restarted "
          "without its append-only file?): this head writes nothing more "
          "there; restart it to start from what the server has"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "another head took over the cluster's state in ", address_.Display(),
        " (it is head #", now, " on it, this one is #", owner_,
        "): this head's writes are refused; stop it"));
  }

  // "" when the server keeps writes as options_.sync asks.
  std::string DurabilityWarning() {
    const bool full = options_.sync == StorageSync::kFull;
    const char* wanted =
        full ? "appendonly yes and appendfsync always" : "appendonly yes";
    std::map<std::string, std::string> config;
    for (const char* name : {"appendonly", "appendfsync"}) {
      absl::StatusOr<Reply> r = Send({"CONFIG", "GET", name});
      if (!r.ok() || (*r)->type != REDIS_REPLY_ARRAY || (*r)->elements != 2) {
        return absl::StrCat(
            "cannot tell how the Redis server of --storage ",
            address_.Display(),
            " keeps writes (its CONFIG command is not available): unless it "
            "runs with ",
            wanted, ", what the head acknowledged may be lost if Redis ",
            full ? "or its host " : "", "crashes");
      }
      config[name] = Text((*r)->element[1]);
    }
    if (config["appendonly"] == "yes" &&
        (!full || config["appendfsync"] == "always")) {
      return "";
    }
    if (config["appendonly"] != "yes") {
      return absl::StrCat(
          "the Redis server of --storage ", address_.Display(),
          " keeps no append-only file (appendonly ", config["appendonly"],
          "): what the head acknowledged is lost if Redis crashes or "
          "restarts. Run it with --appendonly yes",
          full ? " --appendfsync always" : "",
          " (or CONFIG SET appendonly yes, CONFIG REWRITE)");
    }
    return absl::StrCat(
        "the Redis server of --storage ", address_.Display(),
        " does not fsync each write (appendfsync ", config["appendfsync"],
        "), and this head was started with --storage-sync full: what it "
        "acknowledged may be lost if Redis's host crashes or loses power. "
        "Run Redis with --appendfsync always (or CONFIG SET appendfsync "
        "always, CONFIG REWRITE)");
  }

  absl::Status Foreign(const std::string& what) const {
    return absl::FailedPreconditionError(absl::StrCat(
        "database ", address_.db, " of the Redis server of --storage ",
        address_.Display(), " holds keys under \"", kPrefix,
        "\" that are not a Shoal head's state (", what,
        "): give the head a database of its own (redis://HOST:PORT/DB), or "
        "remove those keys"));
  }

  const RedisAddress address_;
  const RedisStorageOptions options_;
  Context context_;
  std::string owner_;
  // Every row, as Redis has it: what Get and Scan answer from.
  const std::unique_ptr<TableStorage> rows_ = NewInMemoryTableStorage();
};

absl::Status BadUrl(const std::string& url, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("--storage ", url,
                                                 " is not a Redis URL (", why,
                                                 "); write ", kUrlExample));
}

}  // namespace

std::string RedisAddress::Display() const {
  return absl::StrCat("redis://", password.empty() ? "" : ":***@", host, ":",
                      port, "/", db);
}

absl::StatusOr<RedisAddress> ParseRedisUrl(const std::string& url) {
  // The password is never echoed back.
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "redis://")) {
    return BadUrl(url, "it does not start with redis://");
  }
  RedisAddress a;
  std::string shown = url;
  if (size_t at = rest.rfind('@'); at != absl::string_view::npos) {
    absl::string_view user_info = rest.substr(0, at);
    rest.remove_prefix(at + 1);
    shown = absl::StrCat("redis://:***@", rest);
    if (!absl::ConsumePrefix(&user_info, ":") || user_info.empty()) {
      return BadUrl(shown, "a password goes as :PASSWORD@, with no user name");
    }
    a.password = std::string(user_info);
  }
  absl::string_view db;
  if (size_t slash = rest.find('/'); slash != absl::string_view::npos) {
    db = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (!absl::SimpleAtoi(db, &a.db) || a.db < 0 ||
        db.find_first_not_of("0123456789") != absl::string_view::npos) {
      return BadUrl(shown,
                    absl::StrCat("the database \"", db, "\" is not a number"));
    }
  }
  size_t colon = rest.rfind(':');
  if (colon == absl::string_view::npos) {
    return BadUrl(shown, "it has no :PORT");
  }
  absl::string_view host = rest.substr(0, colon);
  absl::string_view port = rest.substr(colon + 1);
  if (host.empty()) return BadUrl(shown, "it has no host");
  if (host.find_first_of("/?#@ ") != absl::string_view::npos) {
    return BadUrl(shown, absl::StrCat("\"", host, "\" is not a host"));
  }
  if (!absl::SimpleAtoi(port, &a.port) || a.port <= 0 || a.port > 65535 ||
      port.find_first_not_of("0123456789") != absl::string_view::npos) {
    return BadUrl(shown, absl::StrCat("the port \"", port,
                                      "\" is not a number from 1 to 65535"));
  }
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);  // [IPv6]
  }
  a.host = std::string(host);
  return a;
}

absl::StatusOr<std::unique_ptr<TableStorage>> OpenRedisTableStorage(
    const std::string& url, const RedisStorageOptions& options,
    std::string* durability_warning) {
  ASSIGN_OR_RETURN(RedisAddress address, ParseRedisUrl(url));
  auto storage = std::make_unique<RedisTableStorage>(address, options);
  RETURN_IF_ERROR(storage->Open(durability_warning));
  return storage;
}

}  // namespace shoal
