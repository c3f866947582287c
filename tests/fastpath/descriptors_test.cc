#include "weir/fastpath/descriptors.h"

#include <gtest/gtest.h>

namespace weir::fastpath {
namespace {

FastpathConfig Parse(const std::string& text) {
  auto c = ParseConfig(text, "t.toml");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : FastpathConfig{};
}

// The package's config: two addresses, two workers, one IPv4 recursor
// (weighted defaults to it: one endpoint, two health groups), metrics on.
TEST(FastpathDescriptorsTest, CountsEveryTerm) {
  const FastpathConfig c = Parse(R"(
[server]
listen = ["127.0.0.1:53", "[::1]:53"]
workers = 2
metrics_listen = "127.0.0.1:9153"
[acl]
allow = ["127.0.0.0/8"]
[upstream]
ordinary = ["127.0.0.1:5353"]
)");
  const common::DescriptorNeed need = DescriptorsNeeded(c);
  EXPECT_EQ(need.Explain(),
            "tcp_max_connections 1024 + udp_sockets 256 x 1 family x 2 (rotation) + tcp_connections 4 x 1 "
            "recursor + "
            "2 health probes + 6 listeners + workers 2 x 3 + 133 metrics + 66 control + 64 fixed");
  EXPECT_EQ(need.Total(), 1024u + 512 + 4 + 2 + 6 + 6 + 133 + 66 + 64);
  EXPECT_EQ(need.LargestKeys(1), std::vector<std::string>{"[server] tcp_max_connections"});
}

TEST(FastpathDescriptorsTest, BothFamiliesAndNoTcp) {
  const FastpathConfig c = Parse(R"(
[server]
listen = ["127.0.0.1:53"]
tcp = false
[acl]
allow = ["127.0.0.0/8"]
[upstream]
ordinary = ["127.0.0.1:5353"]
weighted = ["[::1]:5353", "127.0.0.2:5353"]
udp_sockets = 100
tcp_connections = 2
)");
  const common::DescriptorNeed need = DescriptorsNeeded(c);
  EXPECT_EQ(
      need.Explain(),
      "udp_sockets 100 x 2 families x 2 (rotation) + tcp_connections 2 x 3 recursors + 3 health probes + "
      "1 listener + workers 1 x 3 + 66 control + 64 fixed");
  EXPECT_EQ(need.Total(), 400u + 6 + 3 + 1 + 3 + 66 + 64);
}

}  // namespace
}  // namespace weir::fastpath
