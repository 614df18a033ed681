// The object-transfer frames: what one end encodes the other decodes to the
// same fields, the bytes are the documented layout, and frames that break
// the protocol's limits are refused.
#include "object_plane/transfer_codec.h"

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace shoal::object_plane {
namespace {

const uint8_t* Bytes(const std::string& s) {
  return reinterpret_cast<const uint8_t*>(s.data());
}

TEST(TransferCodecTest, IntegersAreLittleEndian) {
  uint8_t buf[8];
  PutU32(buf, 0x01020304u);
  EXPECT_EQ(buf[0], 0x04);
  EXPECT_EQ(buf[3], 0x01);
  EXPECT_EQ(GetU32(buf), 0x01020304u);
  PutU64(buf, 0x0102030405060708ull);
  EXPECT_EQ(buf[0], 0x08);
  EXPECT_EQ(buf[7], 0x01);
  EXPECT_EQ(GetU64(buf), 0x0102030405060708ull);
}

TEST(TransferCodecTest, HelloRoundTrips) {
  for (const std::string& token :
       {std::string(), std::string("t"), std::string(kMaxTokenSize, 'k')}) {
    std::string hello = EncodeHello(token);
    ASSERT_EQ(hello.size(), kHelloHeaderSize + token.size());
    EXPECT_EQ(hello.substr(0, 4), "SHXF");
    absl::StatusOr<uint32_t> size = DecodeHello(Bytes(hello));
    ASSERT_TRUE(size.ok()) << size.status();
    EXPECT_EQ(*size, token.size());
    EXPECT_EQ(hello.substr(kHelloHeaderSize), token);
  }
}

TEST(TransferCodecTest, HelloWithoutTheMagicIsRefused) {
  // What a plain HTTP client or a TLS ClientHello would send first.
  for (const std::string& bytes :
       {std::string("GET / HT"),
        std::string("\x16\x03\x01\x00\x00\x00\x00\x00", 8),
        std::string("shxf\x00\x00\x00\x00", 8)}) {
    absl::StatusOr<uint32_t> size = DecodeHello(Bytes(bytes));
    EXPECT_TRUE(absl::IsInvalidArgument(size.status())) << bytes;
  }
}

TEST(TransferCodecTest, HelloWithATooLongTokenIsRefused) {
  std::string hello = EncodeHello("x");
  PutU32(reinterpret_cast<uint8_t*>(hello.data()) + 4, kMaxTokenSize + 1);
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeHello(Bytes(hello)).status()));
  PutU32(reinterpret_cast<uint8_t*>(hello.data()) + 4, 0xffffffffu);
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeHello(Bytes(hello)).status()));
}

TEST(TransferCodecTest, RequestRoundTrips) {
  struct Case {
    std::string id;
    uint64_t offset;
    uint64_t length;
  };
  for (const Case& c : {Case{"obj", 0, 100}, Case{"", 0, 0},
                        Case{std::string(kMaxIdSize, 'i'), ~uint64_t{0}, 7},
                        Case{"a-1", uint64_t{1} << 40, uint64_t{4} << 20}}) {
    std::string request = EncodeRequest(c.id, c.offset, c.length);
    ASSERT_EQ(request.size(), kRequestHeaderSize + c.id.size());
    absl::StatusOr<RequestHeader> header = DecodeRequest(Bytes(request));
    ASSERT_TRUE(header.ok()) << header.status();
    EXPECT_EQ(header->id_size, c.id.size());
    EXPECT_EQ(header->offset, c.offset);
    EXPECT_EQ(header->length, c.length);
    EXPECT_EQ(request.substr(kRequestHeaderSize), c.id);
  }
}

TEST(TransferCodecTest, RequestLayoutIsIdSizeOffsetLength) {
  uint8_t header[kRequestHeaderSize];
  EncodeRequestHeader({3, 0x10, 0x20}, header);
  EXPECT_EQ(GetU32(header), 3u);
  EXPECT_EQ(GetU64(header + 4), 0x10u);
  EXPECT_EQ(GetU64(header + 12), 0x20u);
}

TEST(TransferCodecTest, RequestWithATooLongIdIsRefusedSayingSo) {
  uint8_t header[kRequestHeaderSize];
  EncodeRequestHeader({kMaxIdSize + 1, 0, 1}, header);
  absl::StatusOr<RequestHeader> request = DecodeRequest(header);
  ASSERT_TRUE(absl::IsInvalidArgument(request.status()));
  // The server sends this text back to the puller.
  EXPECT_EQ(request.status().message(), "object id too long");
}

TEST(TransferCodecTest, ReplyRoundTrips) {
  struct Case {
    WireStatus status;
    uint64_t object_size;
    std::string payload;
  };
  for (const Case& c : {Case{kOk, 40, std::string(16, 'a')}, Case{kOk, 0, ""},
                        Case{kNotHere, 0, "no such object here"},
                        Case{kBadToken, 0, kWrongToken},
                        Case{static_cast<WireStatus>(77), ~uint64_t{0}, "?"}}) {
    std::string reply = EncodeReply(c.status, c.object_size, c.payload);
    ASSERT_EQ(reply.size(), kReplyHeaderSize + c.payload.size());
    ReplyHeader header = DecodeReply(Bytes(reply));
    EXPECT_EQ(header.status, c.status);
    EXPECT_EQ(header.object_size, c.object_size);
    EXPECT_EQ(header.length, c.payload.size());
    EXPECT_EQ(reply.substr(kReplyHeaderSize), c.payload);
  }
}

TEST(TransferCodecTest, ReplyLayoutIsStatusSizeLength) {
  uint8_t header[kReplyHeaderSize];
  EncodeReplyHeader({kNotSealed, 5, 9}, header);
  EXPECT_EQ(GetU32(header), 2u);
  EXPECT_EQ(GetU64(header + 4), 5u);
  EXPECT_EQ(GetU64(header + 12), 9u);
}

TEST(TransferCodecTest, ReplyMessagesPastTheLimitDoNotFit) {
  EXPECT_TRUE(ReplyMessageFits({kNotHere, 0, 0}));
  EXPECT_TRUE(ReplyMessageFits({kNotHere, 0, kMaxMessageSize}));
  EXPECT_FALSE(ReplyMessageFits({kNotHere, 0, kMaxMessageSize + 1}));
  EXPECT_FALSE(ReplyMessageFits({kFailed, 0, ~uint64_t{0}}));
}

TEST(TransferCodecTest, TruncatedOrGarbledHeadersDecodeWithoutTrust) {
  // Every 20-byte pattern decodes to some fields; the caller's limits
  // (ReplyMessageFits, the status range) decide whether to trust them.
  std::string ones(kReplyHeaderSize, '\xff');
  ReplyHeader reply = DecodeReply(Bytes(ones));
  EXPECT_GT(static_cast<uint32_t>(reply.status), kLastWireStatus);
  EXPECT_FALSE(ReplyMessageFits(reply));
  absl::StatusOr<RequestHeader> request = DecodeRequest(Bytes(ones));
  EXPECT_FALSE(request.ok());
}

}  // namespace
}  // namespace shoal::object_plane
