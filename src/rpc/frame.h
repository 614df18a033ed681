// The RPC frame format shared by rpc::Channel/Server and BlockingChannel: a
// 17-byte header (u32 length of the rest, u8 kind, u32 method, u64 call id,
// little endian) and a payload.
#ifndef SHOAL_RPC_FRAME_H_
#define SHOAL_RPC_FRAME_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace shoal::rpc {

enum FrameKind : uint8_t {
  kHello = 1,
  kHelloOk = 2,
  kRequest = 3,
  kResponse = 4,
  kError = 5,
};

constexpr size_t kHeaderSize = 17;
constexpr uint32_t kMaxFrameSize = 1u << 30;

inline void EncodeFrameHeader(char (&header)[kHeaderSize], uint8_t kind,
                              uint32_t method, uint64_t call_id,
                              size_t payload_size) {
  uint32_t len = static_cast<uint32_t>(kHeaderSize - 4 + payload_size);
  memcpy(header, &len, 4);
  header[4] = static_cast<char>(kind);
  memcpy(header + 5, &method, 4);
  memcpy(header + 9, &call_id, 8);
}

}  // namespace shoal::rpc

#endif  // SHOAL_RPC_FRAME_H_
