#include "weir/mgmt/control.h"

#include <gtest/gtest.h>

#include <cmath>

#include "weir/common/prometheus.h"
#include "weir/mgmt/structured_reply.h"

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

TEST(MetricsReply, TableAndJsonFromTheSamples) {
  common::PrometheusWriter w;
  w.Counter("weir_queries_total", "Queries.").Add({{"transport", "udp"}}, 12);
  w.Gauge("weir_up", "Up.").Add({}, 1);
  w.Gauge("weir_odd", "Odd.").Add({{"label", "a \"quoted\" #hash\\"}, {"x", "y"}}, HUGE_VAL);
  w.Gauge("weir_ratio", "Ratio.").Add({}, 0.25);
  w.Gauge("weir_whole", "A double that is a whole number.").Add({}, 2.0);
  w.Gauge("weir_below", "Negative.").Add({}, -3);
  auto samples = w.Samples();
  ASSERT_TRUE(samples.ok()) << samples.status();
  const ControlReply r = MetricsReply(*samples).Render();
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.json,
            "[{\"name\":\"weir_queries_total\",\"labels\":{\"transport\":\"udp\"},\"value\":12},"
            "{\"name\":\"weir_up\",\"labels\":{},\"value\":1},"
            "{\"name\":\"weir_odd\",\"labels\":{\"label\":\"a \\\"quoted\\\" #hash\\\\\",\"x\":\"y\"},"
            "\"value\":\"+Inf\"},"
            "{\"name\":\"weir_ratio\",\"labels\":{},\"value\":0.25},"
            "{\"name\":\"weir_whole\",\"labels\":{},\"value\":2},"
            "{\"name\":\"weir_below\",\"labels\":{},\"value\":-3}]");
  EXPECT_EQ(r.text,
            "METRIC                                 VALUE\n"
            "weir_queries_total{transport=udp}      12\n"
            "weir_up                                1\n"
            "weir_odd{label=a \"quoted\" #hash\\,x=y}  +Inf\n"
            "weir_ratio                             0.25\n"
            "weir_whole                             2\n"
            "weir_below                             -3\n");
}

TEST(MetricsReply, HistogramSeries) {
  common::PrometheusWriter w;
  const double bounds[] = {0.001, 0.01};
  const uint64_t buckets[] = {1, 2, 3};
  w.Histogram("weir_latency_seconds", "Latency.").Histogram({{"path", "hit"}}, bounds, buckets, 0.5);
  auto samples = w.Samples();
  ASSERT_TRUE(samples.ok());
  const Json doc = Json::parse(MetricsReply(*samples).Render().json);
  ASSERT_EQ(doc.size(), 5u);
  EXPECT_EQ(doc[0]["name"], "weir_latency_seconds_bucket");
  EXPECT_EQ(doc[0]["labels"]["le"], "0.001");
  EXPECT_EQ(doc[2]["labels"]["le"], "+Inf");
  EXPECT_EQ(doc[2]["value"], 6);
  EXPECT_EQ(doc[3]["name"], "weir_latency_seconds_sum");
  EXPECT_EQ(doc[3]["value"], 0.5);
  EXPECT_EQ(doc[4]["value"], 6);
}

TEST(StructuredReply, TextAndJsonFromOneDocument) {
  StructuredReply r(Json{{"count", 2}, {"rows", Json::array()}});
  r.json()["rows"].push_back(Json{{"name", "a.example."}, {"up", true}, {"ttl", 30}});
  r.json()["rows"].push_back(Json{{"name", "bb.example."}, {"up", false}, {"ttl", nullptr}});
  r.Block([](const Json& d) { return "# " + CellText(d, "count") + " rows\n"; })
      .Table("/rows", {StructuredReply::Field("NAME", "name"), StructuredReply::Field("UP", "up"),
                       StructuredReply::Field("TTL", "ttl"), StructuredReply::Field("MISSING", "nothing")})
      .Text("a note\n");
  const ControlReply out = r.Render();
  EXPECT_TRUE(out.ok);
  EXPECT_EQ(out.json,
            "{\"count\":2,\"rows\":[{\"name\":\"a.example.\",\"up\":true,\"ttl\":30},"
            "{\"name\":\"bb.example.\",\"up\":false,\"ttl\":null}]}");
  EXPECT_EQ(out.text,
            "# 2 rows\n"
            "NAME         UP   TTL  MISSING\n"
            "a.example.   yes  30   -\n"
            "bb.example.  no   -    -\n"
            "a note\n");
  // A name is bytes: invalid UTF-8 is replaced in the JSON, kept in the text.
  StructuredReply bytes(Json{{"name", std::string("x\xff.")}});
  bytes.Block([](const Json& d) { return CellText(d, "name"); });
  EXPECT_EQ(bytes.Render().json, "{\"name\":\"x\xef\xbf\xbd.\"}");
  EXPECT_EQ(bytes.Render().text, "x\xff.");
}

TEST(ParseNodeJson, DocumentOrNull) {
  EXPECT_TRUE(ParseNodeJson("").is_null());
  EXPECT_TRUE(ParseNodeJson("{\"a\":").is_null());
  EXPECT_EQ(ParseNodeJson("{\"b\":1,\"a\":2}").dump(), "{\"b\":1,\"a\":2}") << "members keep their order";
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
