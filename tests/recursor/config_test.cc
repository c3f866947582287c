#include "weir/recursor/config.h"

#include <gtest/gtest.h>

namespace weir::recursor {
namespace {

constexpr const char* kMinimal = R"([server]
listen = ["127.0.0.1:5353"]
[acl]
allow = ["127.0.0.0/8"]
[resolver]
root_hints = "root.hints"
)";

TEST(RecursorConfig, MinimalHasDefaults) {
  auto c = ParseConfig(kMinimal, "r.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen.size(), 1u);
  EXPECT_EQ(c->source_v4, 24);
  EXPECT_EQ(c->source_v6, 56);
  EXPECT_EQ(c->max_subnets, 100);
  EXPECT_EQ(c->max_cname_chain, 8);
  EXPECT_EQ(c->weight_option_code, 65001);
}

TEST(RecursorConfig, ErrorsNameFileLineColumn) {
  auto c = ParseConfig(std::string(kMinimal) + "[ecs]\nsource_v4 = 33\n", "r.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("r.toml:8:"), std::string::npos) << c.status();
  c = ParseConfig(std::string(kMinimal) + "[cache]\nmax_subnet = 3\n", "r.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("unknown key 'max_subnet'"), std::string::npos);
  c = ParseConfig("[server\n", "r.toml");
  EXPECT_FALSE(c.ok());
}

TEST(RecursorConfig, NeverFallsBackToBuiltInRootHints) {
  auto c = ParseConfig("[server]\nlisten = [\"127.0.0.1:0\"]\n[acl]\nallow = [\"127.0.0.0/8\"]\n", "r.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("root_hints"), std::string::npos);
  c = ParseConfig(
      "[server]\nlisten = [\"127.0.0.1:0\"]\n[acl]\nallow = [\"127.0.0.0/8\"]\n[resolver]\nforwarders = "
      "[\"127.0.0.1:5300\"]\n",
      "r.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->forwarders[0].port(), 5300);
}

TEST(RecursorConfig, AclRequired) {
  auto c = ParseConfig("[server]\nlisten = [\"127.0.0.1:0\"]\n[resolver]\nroot_hints = \"h\"\n", "r.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("[acl]"), std::string::npos);
}

}  // namespace
}  // namespace weir::recursor
