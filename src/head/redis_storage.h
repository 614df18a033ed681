// The head's tables in a Redis server (`--storage redis://HOST:PORT[/DB]`),
// for deployments where the head may move: a head started anywhere with the
// same URL takes the cluster's state up (docs/design/durability.md).
//
// Layout, under the key prefix "shoal:" of the URL's database:
//   shoal:schema         "shoal head state, schema <N>": checked at open
//   shoal:owner          a counter; each head that opens the state takes
//                        the next value and writes only while it still
//                        holds it (a head that was taken over gets errors)
//   shoal:table:<name>   one hash per table: field = key, value = row
//
// Every row is read at open (or the open fails: a head never serves from
// half-loaded state) and kept in memory; Get and Scan are answered from
// there, since the head is the only writer. Put and Delete return once the
// server has answered, which with `appendonly yes` + `appendfsync always`
// means once the change is fsynced to its append-only file; a server that
// does not fsync every write is warned about at open.
//
// Threading: used from the head's event loop only; calls block, each for
// at most the command timeout (a lost connection is retried once).
#ifndef SHOAL_HEAD_REDIS_STORAGE_H_
#define SHOAL_HEAD_REDIS_STORAGE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "head/table_storage.h"

namespace shoal {

// What a `redis://[:PASSWORD@]HOST:PORT[/DB]` URL names.
struct RedisAddress {
  std::string host;
  int port = 0;
  std::string password;  // "": no AUTH
  int db = 0;
  // The URL with its password hidden, for messages and logs.
  std::string Display() const;
};

// Strict: the scheme, a host and a port are required; a bad URL is an
// InvalidArgument error that shows a good one.
absl::StatusOr<RedisAddress> ParseRedisUrl(const std::string& url);

struct RedisStorageOptions {
  int connect_timeout_ms = 2000;
  int command_timeout_ms = 5000;
  // What the server must do for a write to be as durable as asked: kNormal
  // needs an append-only file (appendonly yes), kFull one fsynced before
  // each reply (appendfsync always too).
  StorageSync sync = StorageSync::kNormal;
};

// Connects to the server of `url` and loads the head's state kept there.
// An unreachable server, a refused password, a database holding something
// else under "shoal:", or state of a newer schema, is an error that names
// the URL and says what to do. When the server does not keep writes as
// `options.sync` asks, a warning is logged (and, if `durability_warning`
// is given, stored there; "" when writes are durable).
absl::StatusOr<std::unique_ptr<TableStorage>> OpenRedisTableStorage(
    const std::string& url, const RedisStorageOptions& options = {},
    std::string* durability_warning = nullptr);

}  // namespace shoal

#endif  // SHOAL_HEAD_REDIS_STORAGE_H_
