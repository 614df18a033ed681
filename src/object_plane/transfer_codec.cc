#include "object_plane/transfer_codec.h"

#include <cstring>

#include "absl/status/status.h"

namespace shoal::object_plane {

void PutU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

void PutU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint32_t GetU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

std::string EncodeHello(std::string_view token) {
  std::string hello(kHelloHeaderSize, '\0');
  auto* p = reinterpret_cast<uint8_t*>(hello.data());
  memcpy(p, kTransferMagic, sizeof(kTransferMagic));
  PutU32(p + 4, static_cast<uint32_t>(token.size()));
  hello.append(token);
  return hello;
}

absl::StatusOr<uint32_t> DecodeHello(const uint8_t* header) {
  if (memcmp(header, kTransferMagic, sizeof(kTransferMagic)) != 0) {
    return absl::InvalidArgumentError("not an object-transfer hello");
  }
  uint32_t token_size = GetU32(header + 4);
  if (token_size > kMaxTokenSize) {
    return absl::InvalidArgumentError("token too long");
  }
  return token_size;
}

void EncodeRequestHeader(const RequestHeader& request, uint8_t* out) {
  PutU32(out, request.id_size);
  PutU64(out + 4, request.offset);
  PutU64(out + 12, request.length);
}

std::string EncodeRequest(std::string_view id, uint64_t offset,
                          uint64_t length) {
  std::string request(kRequestHeaderSize, '\0');
  EncodeRequestHeader({static_cast<uint32_t>(id.size()), offset, length},
                      reinterpret_cast<uint8_t*>(request.data()));
  request.append(id);
  return request;
}

absl::StatusOr<RequestHeader> DecodeRequest(const uint8_t* header) {
  RequestHeader request;
  request.id_size = GetU32(header);
  request.offset = GetU64(header + 4);
  request.length = GetU64(header + 12);
  if (request.id_size > kMaxIdSize) {
    return absl::InvalidArgumentError("object id too long");
  }
  return request;
}

void EncodeReplyHeader(const ReplyHeader& reply, uint8_t* out) {
  PutU32(out, reply.status);
  PutU64(out + 4, reply.object_size);
  PutU64(out + 12, reply.length);
}

std::string EncodeReply(WireStatus status, uint64_t object_size,
                        std::string_view payload) {
  std::string reply(kReplyHeaderSize, '\0');
  EncodeReplyHeader({status, object_size, payload.size()},
                    reinterpret_cast<uint8_t*>(reply.data()));
  reply.append(payload);
  return reply;
}

ReplyHeader DecodeReply(const uint8_t* header) {
  ReplyHeader reply;
  reply.status = static_cast<WireStatus>(GetU32(header));
  reply.object_size = GetU64(header + 4);
  reply.length = GetU64(header + 12);
  return reply;
}

bool ReplyMessageFits(const ReplyHeader& reply) {
  return reply.length <= kMaxMessageSize;
}

}  // namespace shoal::object_plane
