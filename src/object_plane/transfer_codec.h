// The object-transfer protocol's frames, as bytes: what a puller and a
// TransferServer write to each other and how each side reads them back.
// Pure functions, no sockets: the server, the client, their tests and the
// fuzz harness all encode and decode through this one header.
//
// Wire protocol (TCP, inside TLS when the process has TLS on (rpc/tls.h),
// integers little endian, one request at a time per connection):
//   hello    client -> server: "SHXF", u32 token length, token bytes.
//            server -> client: a reply header (kOk, or kBadToken and then
//            the server closes the connection).
//   request  client -> server: u32 id length, u64 offset, u64 length,
//            id bytes.
//   reply    server -> client: u32 status, u64 object size (data plus
//            metadata), u64 payload length, then the payload: the object's
//            bytes [offset, offset + length) when kOk, else a message.
#ifndef SHOAL_OBJECT_PLANE_TRANSFER_CODEC_H_
#define SHOAL_OBJECT_PLANE_TRANSFER_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace shoal::object_plane {

inline constexpr char kTransferMagic[4] = {'S', 'H', 'X', 'F'};
// What a server that refuses a token says (pullers show it their way).
inline constexpr char kWrongToken[] = "wrong cluster token";
// The largest token, object id and reply message either side accepts.
inline constexpr uint32_t kMaxTokenSize = 4096;
inline constexpr uint32_t kMaxIdSize = 1024;
inline constexpr uint64_t kMaxMessageSize = 64 << 10;
inline constexpr size_t kHelloHeaderSize = 8;
inline constexpr size_t kRequestHeaderSize = 20;
inline constexpr size_t kReplyHeaderSize = 20;

enum WireStatus : uint32_t {
  kOk = 0,
  kNotHere = 1,    // unknown or deleted here
  kNotSealed = 2,  // still being written here
  kBadRequest = 3,
  kBadToken = 4,
  kFailed = 5,
};
// The highest status a server sends.
inline constexpr uint32_t kLastWireStatus = kFailed;

struct RequestHeader {
  uint32_t id_size = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

struct ReplyHeader {
  WireStatus status = kOk;  // any u32 a peer sent, not only the named ones
  uint64_t object_size = 0;
  uint64_t length = 0;  // of the payload that follows
};

// Little-endian integers at `p`.
void PutU32(uint8_t* p, uint32_t v);
void PutU64(uint8_t* p, uint64_t v);
uint32_t GetU32(const uint8_t* p);
uint64_t GetU64(const uint8_t* p);

// The whole hello: header then token.
std::string EncodeHello(std::string_view token);
// The length of the token that follows a hello header.
// REQUIRES: `header` has kHelloHeaderSize bytes.
// InvalidArgument when the bytes are not a hello or the token is longer
// than kMaxTokenSize.
absl::StatusOr<uint32_t> DecodeHello(const uint8_t* header);

// REQUIRES: `out` has kRequestHeaderSize bytes.
void EncodeRequestHeader(const RequestHeader& request, uint8_t* out);
// The whole request: header then id.
std::string EncodeRequest(std::string_view id, uint64_t offset,
                          uint64_t length);
// REQUIRES: `header` has kRequestHeaderSize bytes. InvalidArgument ("object
// id too long", what the server answers) when the id passes kMaxIdSize.
absl::StatusOr<RequestHeader> DecodeRequest(const uint8_t* header);

// REQUIRES: `out` has kReplyHeaderSize bytes.
void EncodeReplyHeader(const ReplyHeader& reply, uint8_t* out);
// The whole reply: header then payload.
std::string EncodeReply(WireStatus status, uint64_t object_size,
                        std::string_view payload);
// REQUIRES: `header` has kReplyHeaderSize bytes.
ReplyHeader DecodeReply(const uint8_t* header);
// True when a reply that is not kOk announces a message short enough to be
// one (a longer one is a broken or hostile peer).
bool ReplyMessageFits(const ReplyHeader& reply);

}  // namespace shoal::object_plane

#endif  // SHOAL_OBJECT_PLANE_TRANSFER_CODEC_H_
