#include "weir/mgmt/control.h"

#include <gtest/gtest.h>

namespace weir::mgmt {
namespace {

TEST(ControlArgs, ParsesKnownKeysAndRefusesTheRest) {
  auto a = ControlArgs::Parse({"name=www.example.com", "suffix=1", "limit=20"}, {"name", "suffix", "limit"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->Get("name"), "www.example.com");
  EXPECT_TRUE(a->Flag("suffix"));
  EXPECT_FALSE(a->Flag("other"));
  EXPECT_EQ(a->Get("partition", "none"), "none");
  EXPECT_EQ(*a->Number("limit", 5, 1, 100), 20u);
  EXPECT_EQ(*a->Number("absent", 5, 1, 100), 5u);
  EXPECT_FALSE(a->Number("limit", 5, 21, 100).ok());
  EXPECT_FALSE(a->Number("name", 5, 1, 100).ok());

  EXPECT_FALSE(ControlArgs::Parse({"name"}, {"name"}).ok()) << "not key=value";
  EXPECT_FALSE(ControlArgs::Parse({"=x"}, {"name"}).ok());
  EXPECT_FALSE(ControlArgs::Parse({"name="}, {"name"}).ok())
      << "an empty value selects nothing: never everything";
  auto unknown = ControlArgs::Parse({"colour=blue"}, {"name", "type"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown argument 'colour' (takes name, type)"),
            std::string::npos);
  EXPECT_FALSE(ControlArgs::Parse({"name=a", "name=b"}, {"name"}).ok()) << "twice";
  EXPECT_TRUE(ControlArgs::Parse({}, {}).ok());
}

TEST(MetricsText, TableAndJson) {
  const std::string text =
      "# HELP weir_queries_total Queries.\n"
      "# TYPE weir_queries_total counter\n"
      "weir_queries_total{transport=\"udp\"} 12\n"
      "weir_up 1\n"
      "weir_odd{label=\"a \\\"quoted\\\" #hash\\\\\",x=\"y\"} +Inf\n";
  EXPECT_EQ(MetricsAsJson(text),
            "[{\"name\":\"weir_queries_total\",\"labels\":{\"transport\":\"udp\"},\"value\":12},"
            "{\"name\":\"weir_up\",\"labels\":{},\"value\":1},"
            "{\"name\":\"weir_odd\",\"labels\":{\"label\":\"a \\\"quoted\\\" #hash\\\\\",\"x\":\"y\"},"
            "\"value\":\"+Inf\"}]");
  EXPECT_EQ(MetricsAsTable(text),
            "METRIC                                 VALUE\n"
            "weir_queries_total{transport=udp}      12\n"
            "weir_up                                1\n"
            "weir_odd{label=a \"quoted\" #hash\\,x=y}  +Inf\n");
}

TEST(ControlConfig, DefaultSocketAndTcpNeedsAToken) {
  auto parse = [](std::string_view text, ControlConfig* out) {
    auto t = toml::parse(text);
    common::TomlChecker c("test.toml");
    ParseControlTable(c, t, "fastpath", out);
    return c.ok();
  };
  ControlConfig cfg;
  ASSERT_TRUE(parse("", &cfg));
  EXPECT_EQ(cfg.socket_path, "/run/weir-fastpath/control.sock");
  EXPECT_TRUE(cfg.socket_is_default);
  EXPECT_FALSE(cfg.tcp_enabled);
  cfg = {};
  ASSERT_TRUE(parse("[control]\nsocket = \"\"\nlisten = \"127.0.0.1:8953\"\ntoken_file = \"t\"\n", &cfg));
  EXPECT_EQ(cfg.socket_path, "");
  EXPECT_FALSE(cfg.socket_is_default);
  EXPECT_TRUE(cfg.tcp_enabled);
  cfg = {};
  EXPECT_FALSE(parse("[control]\nlisten = \"127.0.0.1:8953\"\n", &cfg)) << "TCP without a token";
  cfg = {};
  EXPECT_FALSE(parse("[control]\nsockets = \"x\"\n", &cfg)) << "unknown key";
  cfg = {};
  EXPECT_FALSE(parse("[control]\nlisten = \"nowhere\"\ntoken_file = \"t\"\n", &cfg));
}

}  // namespace
}  // namespace weir::mgmt
