#include "weir/fastpath/config.h"

#include <fstream>

#include <gtest/gtest.h>

namespace weir::fastpath {
namespace {

constexpr char kMinimal[] = R"(
[server]
listen = ["127.0.0.1:5353"]
[acl]
allow = ["127.0.0.0/8"]
[upstream]
ordinary = ["127.0.0.1:5301"]
)";

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(FastpathConfig, MinimalGetsDocumentedDefaults) {
  auto c = ParseConfig(kMinimal, "t.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen.size(), 1u);
  EXPECT_EQ(c->listen[0].port(), 5353);
  EXPECT_EQ(c->workers, 1);
  EXPECT_TRUE(c->tcp);
  EXPECT_EQ(c->weight_option_code, 65001);
  EXPECT_FALSE(c->metrics_enabled);
  EXPECT_EQ(c->max_ttl, 86400u);
  EXPECT_EQ(c->stale_window, 86400u);
  EXPECT_EQ(c->upstream_attempts, 3);
  // Under the 5 s clients wait, and past one try's 1.5 s timeout.
  EXPECT_EQ(c->answer_deadline_ms, 3000);
  // Tagged names go to the ordinary recursors when no weighted group is set.
  ASSERT_EQ(c->weighted.size(), 1u);
  EXPECT_EQ(c->weighted[0].address.ToString(), "127.0.0.1:5301");
}

TEST(FastpathConfig, UpstreamSpoofingDefencesDefaultsAndErrors) {
  auto d = ParseConfig(kMinimal, "t.toml");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->udp_sockets, 256);
  EXPECT_EQ(d->udp_socket_lifetime_s, 600);
  EXPECT_EQ(d->unwanted_reply_threshold, 10);
  EXPECT_TRUE(d->case_randomization);
  EXPECT_TRUE(d->upstream_cookies);

  auto c = ParseConfig(std::string(kMinimal) +
                           "udp_sockets = 8\nudp_socket_lifetime_s = 0\nunwanted_reply_threshold = 0\n"
                           "case_randomization = false\ncookies = false\n",
                       "t.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->udp_sockets, 8);
  EXPECT_EQ(c->udp_socket_lifetime_s, 0);
  EXPECT_EQ(c->unwanted_reply_threshold, 0);
  EXPECT_FALSE(c->case_randomization);
  EXPECT_FALSE(c->upstream_cookies);

  auto zero = ParseConfig(std::string(kMinimal) + "udp_sockets = 0\n", "t.toml");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(Message(zero.status()).find("t.toml:8:"), std::string::npos) << zero.status();
  EXPECT_NE(Message(zero.status()).find("udp_sockets"), std::string::npos) << zero.status();
  auto lifetime = ParseConfig(std::string(kMinimal) + "udp_socket_lifetime_s = 5\n", "t.toml");
  ASSERT_FALSE(lifetime.ok());
  EXPECT_NE(Message(lifetime.status()).find("t.toml:8:"), std::string::npos) << lifetime.status();
  auto cookies = ParseConfig(std::string(kMinimal) + "cookies = 1\n", "t.toml");
  EXPECT_FALSE(cookies.ok());
}

TEST(FastpathConfig, RateLimitTable) {
  auto c = ParseConfig(kMinimal, "t.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rate_limit_qps, 0u);
  EXPECT_EQ(c->rate_limit_bytes_per_second, 0u);
  EXPECT_EQ(c->rate_limit_ipv4_prefix, 32);
  EXPECT_EQ(c->rate_limit_ipv6_prefix, 56);
  EXPECT_EQ(c->rate_limit_table_size, 65536u);
  c = ParseConfig(std::string(kMinimal) +
                      "[rate_limit]\nqps_per_source = 200\nburst = 400\nbytes_per_second = 100000\n"
                      "ipv4_prefix = 24\nipv6_prefix = 48\ntable_size = 4096\n",
                  "t.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rate_limit_qps, 200u);
  EXPECT_EQ(c->rate_limit_burst, 400u);
  EXPECT_EQ(c->rate_limit_bytes_per_second, 100000u);
  EXPECT_EQ(c->rate_limit_ipv4_prefix, 24);
  EXPECT_EQ(c->rate_limit_ipv6_prefix, 48);
  EXPECT_EQ(c->rate_limit_table_size, 4096u);
}

TEST(FastpathConfig, DnstapTableIsReadAndPathsAreRelativeToTheFile) {
  EXPECT_FALSE(ParseConfig(kMinimal, "t.toml")->dnstap.enabled());
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/weir-dnstap-fastpath.toml";
  std::ofstream(path) << kMinimal << "[dnstap]\nfile = \"tap.fstrm\"\nsample = 8\nupstream = false\n";
  auto c = LoadConfig(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->dnstap.file_path, path.substr(0, path.rfind('/') + 1) + "tap.fstrm");
  EXPECT_EQ(c->dnstap.sample, 8u);
  EXPECT_TRUE(c->dnstap.client);
  EXPECT_FALSE(c->dnstap.upstream);
  auto bad =
      ParseConfig(std::string(kMinimal) + "[dnstap]\nsocket = \"/run/tap\"\nqueue_size = 3\n", "t.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(Message(bad.status()).find("t.toml:10:"), std::string::npos) << bad.status();
  EXPECT_NE(Message(bad.status()).find("power of two"), std::string::npos);
}

TEST(FastpathConfig, LogTable) {
  auto c = ParseConfig(kMinimal, "t.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->log.level.has_value()) << "unset: the flags or the default decide";
  EXPECT_FALSE(c->log.target.has_value());
  c = ParseConfig(std::string(kMinimal) + "[log]\nlevel = \"debug\"\ntarget = \"journal\"\n", "t.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->log.level, common::LogLevel::kDebug);
  EXPECT_EQ(c->log.target, common::LogTarget::kJournal);
}

TEST(FastpathConfig, ExampleFileIsValid) {
  auto c = LoadConfig(std::string(WEIR_TEST_DATA_DIR) + "/../examples/fastpath/fastpath.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen.size(), 2u);
  EXPECT_EQ(c->listen[1].ToString(), "[::1]:53");
  EXPECT_EQ(c->weighted[0].name, "recursor-a");
}

struct BadCase {
  const char* text;
  const char* expect;  // substring of the error, including file:line
};

TEST(FastpathConfig, BadConfigsNameFileLineAndReason) {
  const BadCase cases[] = {
      {"[server]\nlisten = [\"127.0.0.1:53\"]\nworkers = 0\n", "t.toml:3:"},
      {"[server]\nlisten = [\"127.0.0.1:53\"]\nworkers = 0\n", "between 1 and 64"},
      {"[server]\nlisten = [\"127.0.0.1:53\"]\nwrokers = 2\n",
       "t.toml:3:1: unknown key 'wrokers' in [server]"},
      {"[server]\nlisten = [\"300.0.0.1:53\"]\n", "t.toml:2:"},
      {"[server]\nlisten = [\"127.0.0.1:99999\"]\n", "bad port"},
      {"[acl]\nallow = [\"10.0.0.1/8\"]\n", "t.toml:2:"},
      {"[server\nlisten = 1\n", "t.toml:1:"},
      {"[cache]\nmin_ttl = 100\nmax_ttl = 10\n", "min_ttl is larger than max_ttl"},
      {"[server]\ntcp = \"yes\"\n", "'tcp' must be true or false"},
      {"[upstream]\nordinary = [42]\n", "t.toml:2:"},
      {"[upstream]\nanswer_deadline_ms = 50\n", "t.toml:2:"},
      {"[upstream]\nanswer_deadline_ms = 50\n", "between 100 and 60000"},
      {"[log]\nlevel = \"verbose\"\n",
       "t.toml:2:9: log level must be error, warning, info or debug, not 'verbose'"},
      {"[log]\ntarget = \"syslog\"\n", "t.toml:2:10: log target must be stderr, journal or auto"},
      {"[log]\nlevel = 3\n", "'level' must be a string"},
      {"[log]\nfile = \"x\"\n", "t.toml:2:1: unknown key 'file' in [log]"},
      {"[rate_limit]\nbytes_per_second = 1000\n", "t.toml:2:"},
      {"[rate_limit]\nbytes_per_second = 1000\n", "at least 1232"},
      {"[rate_limit]\nipv4_prefix = 33\n", "t.toml:2:"},
      {"[rate_limit]\nipv6_prefix = 8\n", "'ipv6_prefix' must be between 16 and 128"},
      {"[rate_limit]\ntable_size = 10\n", "'table_size' must be between 1024 and 16777216"},
      {"[rate_limit]\nqps = 10\n", "t.toml:2:1: unknown key 'qps' in [rate_limit]"},
  };
  for (const auto& bc : cases) {
    auto c = ParseConfig(bc.text, "t.toml");
    ASSERT_FALSE(c.ok()) << bc.text;
    EXPECT_NE(Message(c.status()).find(bc.expect), std::string::npos) << "config:\n"
                                                                      << bc.text << "\nerror: " << c.status();
  }
}

TEST(FastpathConfig, TcpConnectionLimits) {
  auto c = ParseConfig(kMinimal, "t.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->tcp_limits.max_connections, 1024);
  EXPECT_EQ(c->tcp_limits.max_per_source, 64);
  EXPECT_EQ(c->tcp_limits.source_prefix_v4, 32);
  EXPECT_EQ(c->tcp_limits.source_prefix_v6, 56);
  EXPECT_EQ(c->tcp_limits.idle_timeout, std::chrono::milliseconds(10000));
  EXPECT_EQ(c->tcp_limits.lifetime, std::chrono::milliseconds(120000));
  c = ParseConfig(
      "[server]\nlisten = [\"127.0.0.1:53\"]\ntcp_max_connections = 10\ntcp_max_connections_per_source = 0\n"
      "tcp_source_prefix_v4 = 24\ntcp_source_prefix_v6 = 64\ntcp_idle_timeout_ms = 500\ntcp_lifetime_ms = "
      "3000\n"
      "[acl]\nallow = [\"127.0.0.0/8\"]\n[upstream]\nordinary = [\"127.0.0.1:5301\"]\n",
      "t.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->tcp_limits.max_connections, 10);
  EXPECT_EQ(c->tcp_limits.max_per_source, 0);
  EXPECT_EQ(c->tcp_limits.source_prefix_v4, 24);
  EXPECT_EQ(c->tcp_limits.source_prefix_v6, 64);
  EXPECT_EQ(c->tcp_limits.idle_timeout, std::chrono::milliseconds(500));
  EXPECT_EQ(c->tcp_limits.lifetime, std::chrono::milliseconds(3000));
  const BadCase cases[] = {
      {"[server]\ntcp_max_connections_per_source = -1\n", "t.toml:2:"},
      {"[server]\ntcp_source_prefix_v4 = 33\n", "'tcp_source_prefix_v4' must be between 8 and 32"},
      {"[server]\ntcp_source_prefix_v6 = 8\n", "'tcp_source_prefix_v6' must be between 16 and 128"},
      {"[server]\ntcp_lifetime_ms = 999\n", "'tcp_lifetime_ms' must be between 1000 and 86400000"},
      {"[server]\ntcp_idle_timeout_ms = 50\n", "t.toml:2:"},
      {"[server]\ntcp_lifetime_ms = \"2m\"\n", "'tcp_lifetime_ms' must be an integer"},
  };
  for (const auto& bc : cases) {
    auto bad = ParseConfig(bc.text, "t.toml");
    ASSERT_FALSE(bad.ok()) << bc.text;
    EXPECT_NE(Message(bad.status()).find(bc.expect), std::string::npos) << bc.text << "\n" << bad.status();
  }
}

TEST(FastpathConfig, MissingRequiredSectionsAreErrors) {
  auto no_acl =
      ParseConfig("[server]\nlisten=[\"127.0.0.1:53\"]\n[upstream]\nordinary=[\"127.0.0.1:1\"]\n", "t.toml");
  ASSERT_FALSE(no_acl.ok());
  EXPECT_NE(Message(no_acl.status()).find("open resolver"), std::string::npos);
  auto no_up = ParseConfig("[server]\nlisten=[\"127.0.0.1:53\"]\n[acl]\nallow=[\"127.0.0.0/8\"]\n", "t.toml");
  ASSERT_FALSE(no_up.ok());
  EXPECT_NE(Message(no_up.status()).find("ordinary"), std::string::npos);
}

constexpr char kDpdk[] = R"(
[server]
backend = "dpdk"
[acl]
allow = ["198.18.0.0/15"]
[upstream]
ordinary = ["127.0.0.1:5301"]
[dpdk]
eal_args = ["-l", "0,1", "--no-huge"]
lcores = [1]
udp_checksum_v4 = false
[[dpdk.port]]
device = "net_af_packet0,iface=veth0"
addresses = ["198.18.0.1/16", "2001:2::1"]
[[dpdk.port]]
device = "0000:03:00.0"
addresses = ["198.19.0.1/24"]
exception = "none"
)";

TEST(FastpathConfig, DpdkBackendTakesItsPortsAndAddresses) {
  auto c = ParseConfig(kDpdk, "t.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->backend, "dpdk");
  EXPECT_TRUE(c->listen.empty());
  EXPECT_EQ(c->dpdk.eal_args, (std::vector<std::string>{"-l", "0,1", "--no-huge"}));
  EXPECT_EQ(c->dpdk.lcores, std::vector<int>{1});
  EXPECT_FALSE(c->dpdk.udp_checksum_v4);
  EXPECT_EQ(c->dpdk.dns_port, 53);
  EXPECT_EQ(c->dpdk.exception_pps, 20000u);
  ASSERT_EQ(c->dpdk.ports.size(), 2u);
  const DpdkPortConfig& p = c->dpdk.ports[0];
  EXPECT_EQ(p.exception, "tap");
  EXPECT_EQ(p.tap_name, "weir0");
  ASSERT_EQ(p.addresses.size(), 2u);
  EXPECT_EQ(common::IpToString(p.addresses[0].address), "198.18.0.1");
  EXPECT_EQ(p.addresses[0].prefix, 16);
  EXPECT_EQ(p.addresses[1].prefix, 128) << "no prefix: the address alone";
  EXPECT_EQ(c->dpdk.ports[1].exception, "none");
}

TEST(FastpathConfig, ABackendTheBuildLacksIsAnErrorAtItsLine) {
  auto c = ParseConfig(kDpdk, "t.toml", {"kernel"});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(
      Message(c.status()).find("t.toml:3:11: this weir-fastpath was built without the \"dpdk\" backend"),
      std::string::npos)
      << c.status();
  EXPECT_TRUE(ParseConfig(kDpdk, "t.toml", {"kernel", "dpdk"}).ok());
}

TEST(FastpathConfig, BadDpdkConfigsNameFileLineAndReason) {
  const std::string base = kDpdk;
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = base;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  const std::pair<std::string, const char*> cases[] = {
      {with("backend = \"dpdk\"", "backend = \"xdp\""), "t.toml:3:11: 'backend' is \"kernel\""},
      {with("backend = \"dpdk\"", "backend = \"dpdk\"\nlisten = [\"127.0.0.1:53\"]"),
       "'listen' is for the kernel backend"},
      {with("backend = \"dpdk\"", "backend = \"dpdk\"\nworkers = 2"), "'workers' is for the kernel backend"},
      {with("lcores = [1]", "lcores = [1, 1]"), "lcore 1 is listed twice"},
      {with("lcores = [1]", "lcores = [\"1\"]"), "'lcores' entries must be lcore ids"},
      {with("\"198.18.0.1/16\"", "\"198.18.0.1/33\""), "t.toml:14:"},
      {with("\"198.18.0.1/16\"", "\"198.18.0.1/33\""), "the prefix must be 1 to 32"},
      {with("\"198.18.0.1/16\"", "\"eth0\""), "is not an IP address"},
      {with("exception = \"none\"", "exception = \"kni\""), "'exception' is \"tap\", \"kernel\" or \"none\""},
      {with("exception = \"none\"", "tap_name = \"a-name-longer-than-15\""), "at most 15 characters"},
      {with("exception = \"none\"", "exception = \"tap\"\ntap_name = \"weir0\""), "used by two ports"},
      {with("device = \"0000:03:00.0\"", "device = \"net_af_packet0,iface=veth0\""), "configured twice"},
      {with("device = \"0000:03:00.0\"\n", ""), "needs 'device'"},
      {with("addresses = [\"198.19.0.1/24\"]\n", ""), "needs 'addresses'"},
      {with("udp_checksum_v4 = false", "udp_checksum = false"), "unknown key 'udp_checksum' in [dpdk]"},
      {base.substr(0, base.find("[[dpdk.port]]")), "needs at least one [[dpdk.port]]"},
      {with("exception = \"none\"", "exception = \"kernel\""), "exception = \"kernel\" is for net_af_xdp"},
      {with("\"198.18.0.1/16\", \"2001:2::1\"", "\"198.18.0.1/16\", \"198.18.0.1/24\""),
       "address 198.18.0.1 is listed twice"},
      {with("udp_checksum_v4 = false", "exception_pps = -1"), "'exception_pps' must be between"},
  };
  for (const auto& [text, expect] : cases) {
    auto c = ParseConfig(text, "t.toml");
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_NE(Message(c.status()).find(expect), std::string::npos)
        << "got: " << c.status() << "\nwant: " << expect;
  }
}

TEST(FastpathConfig, MissingFileIsNotFound) {
  auto c = LoadConfig("/nonexistent/weir.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
}

TEST(SocketAddress, ParsesEveryForm) {
  EXPECT_EQ(SocketAddress::Parse("192.0.2.1:53")->ToString(), "192.0.2.1:53");
  EXPECT_EQ(SocketAddress::Parse("[2001:db8::1]:5300")->ToString(), "[2001:db8::1]:5300");
  EXPECT_EQ(SocketAddress::Parse("2001:db8::1", 53)->ToString(), "[2001:db8::1]:53");
  EXPECT_EQ(SocketAddress::Parse("192.0.2.1", 53)->port(), 53);
  EXPECT_FALSE(SocketAddress::Parse("192.0.2.1").ok());  // no port, no default
  EXPECT_FALSE(SocketAddress::Parse("[2001:db8::1").ok());
  EXPECT_FALSE(SocketAddress::Parse("host.example:53").ok());
}

}  // namespace
}  // namespace weir::fastpath
