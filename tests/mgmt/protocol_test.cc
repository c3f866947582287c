#include "weir/mgmt/protocol.h"

#include <gtest/gtest.h>

#include <random>

#include "weir/mgmt/snapshot.h"

namespace weir::mgmt {
namespace {

TEST(Protocol, RoundTripByteAtATime) {
  Message a{MsgType::kHello, {std::string(kProtocol), "token", "node", "fastpath", "7"}};
  Message b{MsgType::kSnapshot, {"8", std::string("a\0b", 3), ""}};
  const std::string bytes = Encode(a) + Encode(b);
  FrameReader r;
  std::vector<Message> got;
  for (char c : bytes) {
    r.Feed(std::string_view(&c, 1));
    for (;;) {
      auto m = r.Next();
      ASSERT_TRUE(m.ok()) << m.status();
      if (!m->has_value()) break;
      got.push_back(**m);
    }
  }
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].type, MsgType::kHello);
  EXPECT_EQ(got[0].fields, a.fields);
  EXPECT_EQ(got[1].type, MsgType::kSnapshot);
  EXPECT_EQ(got[1].fields, b.fields);
  EXPECT_EQ(r.buffered(), 0u);
}

TEST(Protocol, RejectsBrokenFrames) {
  struct Case {
    std::string bytes;
    std::string error;
  };
  const std::vector<Case> cases = {
      {std::string("\0\0\0\0", 4), "bad frame length 0"},
      {std::string("\x7f\0\0\0", 4), "bad frame length"},
      {std::string("\0\0\0\1\x0b", 5), "unknown message type 11"},
      {std::string("\0\0\0\3\x01\0\0", 7), "truncated field length"},
      {std::string("\0\0\0\6\x01\0\0\0\x09x", 10), "field longer than its frame"},
  };
  for (const Case& c : cases) {
    FrameReader r;
    r.Feed(c.bytes);
    auto m = r.Next();
    ASSERT_FALSE(m.ok()) << c.error;
    EXPECT_NE(std::string(m.status().message()).find(c.error), std::string::npos) << m.status();
  }
}

TEST(Protocol, TooManyFields) {
  Message m{MsgType::kRequest, std::vector<std::string>(kMaxFields + 1, "x")};
  FrameReader r;
  r.Feed(Encode(m));
  auto got = r.Next();
  ASSERT_FALSE(got.ok());
  EXPECT_NE(std::string(got.status().message()).find("too many fields"), std::string::npos);
}

TEST(Protocol, RandomBytesNeverCrash) {
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) {
    std::string s(rng() % 64, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    if (!s.empty() && (rng() & 1)) s[0] = 0;  // plausible lengths
    FrameReader r;
    r.Feed(s);
    for (int k = 0; k < 8; ++k) {
      auto m = r.Next();
      if (!m.ok() || !m->has_value()) break;
    }
  }
}

TEST(Protocol, ParseU64) {
  EXPECT_EQ(*ParseU64("0"), 0u);
  EXPECT_EQ(*ParseU64("18446744073709551615"), UINT64_MAX);
  EXPECT_FALSE(ParseU64("").ok());
  EXPECT_FALSE(ParseU64("18446744073709551616").ok());
  EXPECT_FALSE(ParseU64("12a").ok());
  EXPECT_FALSE(ParseU64("-1").ok());
}

TEST(Snapshot, MessageRoundTripAndValidation) {
  Snapshot s{42, "cdn.example weight=on ecs=on\n", "10.0.0.0/8,bj,192.0.2.0/24\n", "db-1"};
  auto back = SnapshotFromMessage(SnapshotMessage(s));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, s);
  EXPECT_TRUE(ValidateSnapshot(s).ok());
  Snapshot bad_tags = s;
  bad_tags.tags += "x.example color=red\n";
  EXPECT_NE(std::string(ValidateSnapshot(bad_tags).message()).find("tags: line 2"), std::string::npos);
  Snapshot bad_map = s;
  bad_map.citymap = "# c\n10.0.0.0/33,bj,\n";
  EXPECT_NE(std::string(ValidateSnapshot(bad_map).message()).find("citymap: line 2"), std::string::npos);
  EXPECT_FALSE(SnapshotFromMessage(Message{MsgType::kSnapshot, {"x", "", ""}}).ok());
  EXPECT_FALSE(SnapshotFromMessage(Message{MsgType::kSnapshot, {"1", ""}}).ok());
}

}  // namespace
}  // namespace weir::mgmt
