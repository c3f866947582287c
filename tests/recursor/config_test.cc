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

TEST(RecursorConfig, DnstapTable) {
  EXPECT_FALSE(ParseConfig(kMinimal, "r.toml")->dnstap.enabled());
  auto c = ParseConfig(std::string(kMinimal) + "[dnstap]\nsocket = \"/run/weir/tap.sock\"\nclient = false\n",
                       "r.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->dnstap.socket_path, "/run/weir/tap.sock");
  EXPECT_FALSE(c->dnstap.client);
  EXPECT_TRUE(c->dnstap.upstream);
  c = ParseConfig(std::string(kMinimal) + "[dnstap]\nsocket = \"/a\"\nfile = \"/b\"\n", "r.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("exactly one of 'socket'"), std::string::npos)
      << c.status();
}

TEST(RecursorConfig, MetricsListen) {
  auto c = ParseConfig(kMinimal, "r.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->metrics_enabled);
  auto with = [](const std::string& value) {
    return ParseConfig(std::string(kMinimal).replace(0, 9, "[server]\nmetrics_listen = " + value + "\n"),
                       "r.toml");
  };
  c = with("\"127.0.0.1\"");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->metrics_enabled);
  EXPECT_EQ(c->metrics_listen.ToString(), "127.0.0.1:9154");
  c = with("\"[::1]:0\"");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->metrics_listen.port(), 0);
  c = with("\"nonsense:x\"");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("r.toml:2:"), std::string::npos) << c.status();
  EXPECT_FALSE(with("9154").ok());
}

TEST(RecursorConfig, MgmtAddressIsOneOrAnArrayOfInstances) {
  const std::string keys =
      "node_id = \"r1\"\ntoken_file = \"/etc/weir/token\"\nstate_dir = \"/var/lib/weir\"\n";
  auto c = ParseConfig(std::string(kMinimal) + "[mgmt]\naddress = \"192.0.2.1:8054\"\n" + keys, "r.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->mgmt.addresses.size(), 1u);
  EXPECT_EQ(c->mgmt.addresses[0].ToString(), "192.0.2.1:8054");
  c = ParseConfig(std::string(kMinimal) + "[mgmt]\naddress = [\"192.0.2.1:8054\", \"192.0.2.2\"]\n" + keys,
                  "r.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->mgmt.addresses.size(), 2u);
  EXPECT_EQ(c->mgmt.addresses[1].ToString(), "192.0.2.2:8054");
  c = ParseConfig(std::string(kMinimal) + "[mgmt]\naddress = [\"192.0.2.1:8054\", \"192.0.2.1\"]\n" + keys,
                  "r.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(
      std::string(c.status().message()).find("r.toml:8:30: [mgmt] address: 192.0.2.1:8054 is listed twice"),
      std::string::npos)
      << c.status();
  c = ParseConfig(std::string(kMinimal) + "[mgmt]\naddress = []\n" + keys, "r.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("r.toml:8:11: [mgmt] address: the array is empty"),
            std::string::npos)
      << c.status();
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

TEST(RecursorConfig, LogTable) {
  auto c = ParseConfig(std::string(kMinimal) + "[log]\nlevel = \"warning\"\ntarget = \"stderr\"\n", "r.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->log.level, common::LogLevel::kWarning);
  EXPECT_EQ(c->log.target, common::LogTarget::kStderr);
  c = ParseConfig(std::string(kMinimal) + "[log]\nlevel = \"loud\"\n", "r.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("r.toml:8:9: log level must be"), std::string::npos)
      << c.status();
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

TEST(RecursorConfig, LimitsHaveDefaultsAndAreValidated) {
  auto c = ParseConfig(kMinimal, "r.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_inflight, 10000);
  EXPECT_EQ(c->tcp_max_unsent_bytes, 1 << 20);
  EXPECT_EQ(c->max_entries, 100000);
  EXPECT_EQ(c->max_tagged_names, 100000);
  EXPECT_EQ(c->max_zero_source_entries, 10000);
  EXPECT_EQ(c->max_zone_cuts, 10000);
  c = ParseConfig(std::string(kMinimal) + "[cache]\nmax_zone_cuts = 5\nmax_zero_source_entries = 7\n",
                  "r.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_zone_cuts, 5);
  EXPECT_EQ(c->max_zero_source_entries, 7);
  for (const char* bad : {"[cache]\nmax_zone_cuts = 0\n", "[cache]\nmax_zero_source_entries = -1\n"}) {
    EXPECT_FALSE(ParseConfig(std::string(kMinimal) + bad, "r.toml").ok()) << bad;
  }
  // [server] comes first in kMinimal: add keys through a config of its own.
  auto with_server = [](const std::string& keys) {
    return ParseConfig("[server]\nlisten = [\"127.0.0.1:0\"]\n" + keys +
                           "[acl]\nallow = [\"127.0.0.0/8\"]\n[resolver]\nroot_hints = \"h\"\n",
                       "r.toml");
  };
  c = with_server("max_inflight = 3\ntcp_max_unsent_bytes = 100000\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_inflight, 3);
  EXPECT_EQ(c->tcp_max_unsent_bytes, 100000);
  EXPECT_FALSE(with_server("max_inflight = 0\n").ok());
  EXPECT_FALSE(with_server("tcp_max_unsent_bytes = 1000\n").ok());
  // Front TCP connections: a front opens one per truncated answer, so a
  // source may hold more than a fastpath subscriber.
  c = ParseConfig(kMinimal, "r.toml");
  EXPECT_EQ(c->tcp_limits.max_connections, 1024);
  EXPECT_EQ(c->tcp_limits.max_per_source, 256);
  EXPECT_EQ(c->tcp_limits.idle_timeout, std::chrono::milliseconds(10000));
  EXPECT_EQ(c->tcp_limits.lifetime, std::chrono::milliseconds(120000));
  c = with_server("tcp_max_connections_per_source = 8\ntcp_lifetime_ms = 5000\ntcp_source_prefix_v6 = 48\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->tcp_limits.max_per_source, 8);
  EXPECT_EQ(c->tcp_limits.lifetime, std::chrono::milliseconds(5000));
  EXPECT_EQ(c->tcp_limits.source_prefix_v6, 48);
  c = with_server("tcp_lifetime_ms = 10\n");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("r.toml:3:"), std::string::npos) << c.status();
}

TEST(RecursorConfig, ControlPortIsLoopbackOnlyByDefault) {
  auto c = ParseConfig(kMinimal, "r.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->control_allow.size(), 2u);
  EXPECT_EQ(c->control_allow[0].address.family, 4);
  EXPECT_EQ(c->control_allow[0].prefix, 8);
  EXPECT_EQ(c->control_allow[0].address.bytes[0], 127);
  EXPECT_EQ(c->control_allow[1].address.family, 6);
  EXPECT_EQ(c->control_allow[1].prefix, 128);
  c = ParseConfig(
      "[server]\nlisten = [\"127.0.0.1:0\"]\ncontrol = \"0.0.0.0:5354\"\ncontrol_allow = [\"10.1.0.0/16\"]\n"
      "[acl]\nallow = [\"127.0.0.0/8\"]\n[resolver]\nroot_hints = \"h\"\n",
      "r.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->control_allow.size(), 1u);
  EXPECT_EQ(c->control_allow[0].prefix, 16);
  for (const char* bad : {"[]", "[\"10.1.0.0/33\"]", "[\"nonsense\"]"}) {
    auto b = ParseConfig(std::string("[server]\nlisten = [\"127.0.0.1:0\"]\ncontrol_allow = ") + bad +
                             "\n[acl]\nallow = [\"127.0.0.0/8\"]\n[resolver]\nroot_hints = \"h\"\n",
                         "r.toml");
    EXPECT_FALSE(b.ok()) << bad;
  }
}

// Each libunbound knob of [resolver]: a default, a value taken, a bad value refused with file:line.
TEST(RecursorConfig, ResolverKnobs) {
  auto c = ParseConfig(kMinimal, "r.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->harden_glue);
  EXPECT_EQ(c->qname_minimisation, RecursorConfig::QnameMinimisation::kOn);
  EXPECT_FALSE(c->trust_anchor_signaling);
  EXPECT_FALSE(c->aggressive_nsec);
  EXPECT_TRUE(c->val_override_date.empty());
  EXPECT_TRUE(c->local_zones.empty());
  EXPECT_EQ(c->answer_deadline_ms, 3000);

  c = ParseConfig(
      std::string(kMinimal) +
          "harden_glue = false\nqname_minimisation = \"strict\"\ntrust_anchor_signaling = true\n"
          "aggressive_nsec = true\nval_override_date = \"20260101000000\"\n"
          "local_zones = [\"test. nodefault\", \"Corp.Internal static\", \"x.example.  refuse\"]\n",
      "r.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->harden_glue);
  EXPECT_EQ(c->qname_minimisation, RecursorConfig::QnameMinimisation::kStrict);
  EXPECT_TRUE(c->trust_anchor_signaling);
  EXPECT_TRUE(c->aggressive_nsec);
  EXPECT_EQ(c->val_override_date, "20260101000000");
  EXPECT_EQ(c->local_zones,
            (std::vector<std::string>{"test. nodefault", "corp.internal. static", "x.example. refuse"}));
  c = ParseConfig(std::string(kMinimal) + "qname_minimisation = \"off\"\n", "r.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->qname_minimisation, RecursorConfig::QnameMinimisation::kOff);

  const std::pair<const char*, const char*> bad[] = {
      {"harden_glue = \"yes\"\n", "harden_glue"},
      {"qname_minimisation = \"sometimes\"\n", "qname_minimisation"},
      {"trust_anchor_signaling = 1\n", "trust_anchor_signaling"},
      {"aggressive_nsec = \"on\"\n", "aggressive_nsec"},
      {"val_override_date = \"yesterday\"\n", "val_override_date"},
      {"local_zones = [\"test.\"]\n", "NAME TYPE"},
      {"local_zones = [\"test. forward\"]\n", "is not one of"},
      {"local_zones = [\"bad..name static\"]\n", "not a domain name"},
  };
  for (const auto& [line, want] : bad) {
    c = ParseConfig(std::string(kMinimal) + line, "r.toml");
    ASSERT_FALSE(c.ok()) << line;
    const std::string msg(c.status().message());
    EXPECT_NE(msg.find("r.toml:7:"), std::string::npos) << msg;
    EXPECT_NE(msg.find(want), std::string::npos) << msg;
  }
  c = ParseConfig(std::string("[server]\nanswer_deadline_ms = 50\n") + (kMinimal + 9), "r.toml");
  EXPECT_FALSE(c.ok());
}

}  // namespace
}  // namespace weir::recursor

namespace weir::recursor {
namespace {

TEST(RecursorConfig, SpoofingDefencesOnByDefault) {
  auto c = ParseConfig(kMinimal, "r.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->use_0x20);
  EXPECT_TRUE(c->cookies);
  EXPECT_EQ(c->unwanted_reply_threshold, 10);
  EXPECT_TRUE(c->use_caps_for_id);
  EXPECT_EQ(c->ub_unwanted_reply_threshold, 0);
  EXPECT_TRUE(c->harden_below_nxdomain);
  EXPECT_TRUE(c->harden_dnssec_stripped);
  EXPECT_FALSE(c->harden_referral_path);

  c = ParseConfig(std::string(kMinimal) +
                      "use_caps_for_id = false\ncaps_exempt = [\"Legacy.Example\", \"old.example.\"]\n"
                      "unwanted_reply_threshold = 0\n[last_hop]\nuse_0x20 = false\ncookies = false\n"
                      "unwanted_reply_threshold = 0\n",
                  "r.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->use_caps_for_id);
  EXPECT_EQ(c->caps_exempt, (std::vector<std::string>{"legacy.example.", "old.example."}));
  EXPECT_EQ(c->ub_unwanted_reply_threshold, 0);
  EXPECT_FALSE(c->use_0x20);
  EXPECT_FALSE(c->cookies);
  EXPECT_EQ(c->unwanted_reply_threshold, 0);

  c = ParseConfig(std::string(kMinimal) + "[last_hop]\nunwanted_reply_threshold = 70000\n", "r.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("r.toml:8:"), std::string::npos) << c.status();
  // libunbound's own threshold: its reaction ends libunbound, so only 0 is accepted.
  for (const char* v : {"1", "100", "10000000"}) {
    c = ParseConfig(std::string(kMinimal) + "unwanted_reply_threshold = " + v + "\n", "r.toml");
    ASSERT_FALSE(c.ok()) << v;
    EXPECT_NE(std::string(c.status().message()).find("r.toml:7:"), std::string::npos) << c.status();
    EXPECT_NE(std::string(c.status().message()).find("cannot run its reaction"), std::string::npos)
        << c.status();
  }
  // How libunbound reaches its forwarders, and TCP for all its queries.
  c = ParseConfig(std::string(kMinimal), "r.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->forwarder_transport, RecursorConfig::ForwarderTransport::kWeir);
  EXPECT_FALSE(c->tcp_upstream);
  EXPECT_EQ(c->outgoing_tcp, 1024);
  c = ParseConfig(std::string(kMinimal) +
                      "forwarder_transport = \"libunbound\"\ntcp_upstream = true\noutgoing_tcp = 64\n",
                  "r.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->forwarder_transport, RecursorConfig::ForwarderTransport::kLibunbound);
  EXPECT_TRUE(c->tcp_upstream);
  EXPECT_EQ(c->outgoing_tcp, 64);
  c = ParseConfig(std::string(kMinimal) + "outgoing_tcp = 0\n", "r.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("r.toml:7:"), std::string::npos) << c.status();
  c = ParseConfig(std::string(kMinimal) + "forwarder_transport = \"tcp\"\n", "r.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("r.toml:7:"), std::string::npos) << c.status();
  EXPECT_NE(std::string(c.status().message()).find("\"weir\" or \"libunbound\""), std::string::npos)
      << c.status();
  c = ParseConfig(std::string(kMinimal) + "caps_exempt = [\"bad..name\"]\n", "r.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("r.toml:7:"), std::string::npos) << c.status();
}

TEST(RecursorConfig, ServerCookies) {
  auto c = ParseConfig(kMinimal, "r.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->server_cookies);
  EXPECT_FALSE(c->require_cookies);
  EXPECT_TRUE(c->cookie_secret_file.empty());
  std::string text = kMinimal;
  text.replace(text.find("[acl]"), 5,
               "require_cookies = true\ncookie_secret_file = \"/etc/weir/cookie.secret\"\n[acl]");
  c = ParseConfig(text, "r.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->require_cookies);
  EXPECT_EQ(c->cookie_secret_file, "/etc/weir/cookie.secret");
  text = kMinimal;
  text.replace(text.find("[acl]"), 5, "cookies = false\nrequire_cookies = true\n[acl]");
  c = ParseConfig(text, "r.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("'require_cookies' needs 'cookies' on"), std::string::npos)
      << c.status();
}

}  // namespace
}  // namespace weir::recursor
