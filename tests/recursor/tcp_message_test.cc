#include "weir/recursor/tcp_message.h"

#include <gtest/gtest.h>

#include <vector>

namespace weir::recursor {
namespace {

TEST(TcpMessageReader, AsksForThePrefixThenExactlyTheMessage) {
  TcpMessageReader r;
  EXPECT_EQ(r.Want(), 2u);
  const uint8_t first[] = {0x00};
  ASSERT_TRUE(r.Append(first));
  EXPECT_EQ(r.Want(), 1u);
  const uint8_t second[] = {0x03};
  ASSERT_TRUE(r.Append(second));
  EXPECT_EQ(r.Want(), 3u);
  EXPECT_FALSE(r.Complete());
  const uint8_t body[] = {1, 2, 3};
  ASSERT_TRUE(r.Append(body));
  EXPECT_TRUE(r.Complete());
  EXPECT_EQ(r.Want(), 0u);
  EXPECT_EQ(std::vector<uint8_t>(r.Message().begin(), r.Message().end()), std::vector<uint8_t>({1, 2, 3}));
}

TEST(TcpMessageReader, RefusesBytesPastTheMessage) {
  TcpMessageReader r;
  const uint8_t too_much[] = {0x00, 0x01, 0xaa, 0xbb};  // a 1-byte message and one byte more
  EXPECT_FALSE(r.Append(too_much));
  EXPECT_EQ(r.buffered(), 0u);
  const uint8_t prefix_and_body[] = {0x00, 0x01};
  ASSERT_TRUE(r.Append(prefix_and_body));
  const uint8_t body_and_more[] = {0xaa, 0xbb};
  EXPECT_FALSE(r.Append(body_and_more));
}

TEST(TcpMessageReader, NeverBuffersMoreThanTheLargestMessage) {
  // A server that keeps sending: a reader that takes only Want() bytes at a
  // time stops at 2 + 65535 however much is offered.
  TcpMessageReader r;
  std::vector<uint8_t> stream(1 << 20, 0xff);
  size_t off = 0;
  while (!r.Complete()) {
    const size_t n = std::min<size_t>(r.Want(), 4096);
    ASSERT_TRUE(r.Append({stream.data() + off, n}));
    off += n;
  }
  EXPECT_EQ(r.buffered(), TcpMessageReader::kMaxBytes);
  EXPECT_EQ(r.Message().size(), 65535u);
  const uint8_t more[] = {0};
  EXPECT_FALSE(r.Append(more));
}

}  // namespace
}  // namespace weir::recursor
