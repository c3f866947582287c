#include "options.h"

#include <arpa/inet.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace weir::bench {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Runs ParseOptions over "weir-bench" followed by `args`.
struct Parsed {
  std::optional<Options> options;
  int exit_code = -1;
};
Parsed Parse(std::initializer_list<std::string> args) {
  std::vector<std::string> storage{"weir-bench"};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  Parsed p;
  p.options = ParseOptions(static_cast<int>(storage.size()), argv.data(), &p.exit_code);
  return p;
}

void ExpectUsageError(std::initializer_list<std::string> args) {
  std::string joined;
  for (const std::string& a : args) joined += a + " ";
  ::testing::internal::CaptureStderr();
  const Parsed p = Parse(args);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(p.options.has_value()) << joined;
  EXPECT_EQ(p.exit_code, 2) << joined;
  EXPECT_THAT(err, HasSubstr("weir-bench: ")) << joined;
}

class OptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "weir_options_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    tmp_ = tmpl;
    map_ = (tmp_ / "citymap.csv").string();
    std::ofstream(map_) << "127.1.0.0/16,a,\n127.2.0.0/16,b,\n";
  }
  void TearDown() override { fs::remove_all(tmp_); }
  fs::path tmp_;
  std::string map_;
};

TEST_F(OptionsTest, Defaults) {
  const Parsed p = Parse({});
  ASSERT_TRUE(p.options.has_value());
  const Options& o = *p.options;
  EXPECT_EQ(o.server_text, "127.0.0.1:53");
  EXPECT_EQ(o.server.family(), AF_INET);
  EXPECT_EQ(o.server.ToString(), "127.0.0.1:53");
  EXPECT_TRUE(o.queries_file.empty());
  EXPECT_EQ(o.names, 1000u);
  EXPECT_EQ(o.zone, "bench.test.");
  EXPECT_EQ(o.zipf, 0);
  EXPECT_TRUE(o.tagged_names.empty());
  EXPECT_FALSE(o.tagged_fraction.has_value());
  EXPECT_EQ(o.miss_fraction, 0);
  EXPECT_EQ(o.qtype, "A");
  EXPECT_EQ(o.tcp_fraction, 0);
  EXPECT_EQ(o.edns_size, 1232);
  EXPECT_EQ(o.weight_option_code, 65001);
  EXPECT_TRUE(o.citymap_file.empty());
  EXPECT_TRUE(o.city_share.empty());
  EXPECT_EQ(o.sources_per_city, 16u);
  EXPECT_TRUE(o.probe);
  EXPECT_FALSE(o.warmup);
  EXPECT_FALSE(o.rate.has_value());
  EXPECT_EQ(o.outstanding, 100u);
  EXPECT_EQ(o.threads, 1u);
  EXPECT_EQ(o.timeout_ms, 2000u);
  EXPECT_EQ(o.duration_s, 10);
  EXPECT_EQ(o.count, 0u);
  EXPECT_EQ(o.seed, 1u);
  EXPECT_EQ(o.progress, Progress::kAuto);
}

TEST_F(OptionsTest, ValuesAreTaken) {
  const Parsed p = Parse({"--server",
                          "[::1]:5353",
                          "--rate",
                          "20000",
                          "--ramp",
                          "5",
                          "-T",
                          "4",
                          "--names",
                          "50",
                          "--zipf",
                          "1.1",
                          "--tagged-name",
                          "x.cdn.example.",
                          "--tagged-name",
                          "y.cdn.example.",
                          "--tagged-fraction",
                          "0.25",
                          "--miss-fraction",
                          "0.5",
                          "--qtype",
                          "AAAA",
                          "--edns-fraction",
                          "1",
                          "--seed",
                          "42",
                          "--progress",
                          "never",
                          "-l",
                          "2.5",
                          "--no-probe",
                          "--warmup"});
  ASSERT_TRUE(p.options.has_value());
  const Options& o = *p.options;
  EXPECT_EQ(o.server.family(), AF_INET6);
  EXPECT_EQ(o.server.port(), 5353);
  ASSERT_TRUE(o.rate.has_value());
  EXPECT_EQ(*o.rate, 20000);
  EXPECT_EQ(o.ramp_s, 5);
  EXPECT_EQ(o.threads, 4u);
  EXPECT_EQ(o.names, 50u);
  EXPECT_DOUBLE_EQ(o.zipf, 1.1);
  EXPECT_EQ(o.tagged_names, (std::vector<std::string>{"x.cdn.example.", "y.cdn.example."}));
  ASSERT_TRUE(o.tagged_fraction.has_value());
  EXPECT_DOUBLE_EQ(*o.tagged_fraction, 0.25);
  EXPECT_DOUBLE_EQ(o.miss_fraction, 0.5);
  EXPECT_EQ(o.qtype, "AAAA");
  EXPECT_EQ(o.edns_fraction, 1);
  EXPECT_EQ(o.seed, 42u);
  EXPECT_EQ(o.progress, Progress::kNever);
  EXPECT_DOUBLE_EQ(o.duration_s, 2.5);
  EXPECT_FALSE(o.probe);
  EXPECT_TRUE(o.warmup);
}

TEST_F(OptionsTest, NoProbe) {
  EXPECT_TRUE(Parse({}).options->probe);
  EXPECT_FALSE(Parse({"--no-probe"}).options->probe);
}

TEST_F(OptionsTest, ServerWithoutPortUsesFiftyThree) {
  const Parsed p = Parse({"-s", "192.0.2.53"});
  ASSERT_TRUE(p.options.has_value());
  EXPECT_EQ(p.options->server.ToString(), "192.0.2.53:53");
}

TEST_F(OptionsTest, CityShareIsParsedIntoPairs) {
  const Parsed p = Parse({"--citymap", map_, "--city-share", "a=1,b=2.5,c=0"});
  ASSERT_TRUE(p.options.has_value());
  const auto& cs = p.options->city_share;
  ASSERT_EQ(cs.size(), 3u);
  EXPECT_EQ(cs[0].first, "a");
  EXPECT_DOUBLE_EQ(cs[0].second, 1);
  EXPECT_EQ(cs[1].first, "b");
  EXPECT_DOUBLE_EQ(cs[1].second, 2.5);
  EXPECT_EQ(cs[2].first, "c");
  EXPECT_DOUBLE_EQ(cs[2].second, 0);
  EXPECT_EQ(p.options->citymap_file, map_);
}

TEST_F(OptionsTest, UsageErrors) {
  ExpectUsageError({"--rate", "1000", "--outstanding", "10"});
  ExpectUsageError({"--queries", "q.txt", "--names", "10"});
  ExpectUsageError({"--queries", "q.txt", "--tagged-name", "x.example."});
  ExpectUsageError({"--tagged-count", "5"});
  ExpectUsageError({"--tagged-zone", "t.example."});
  ExpectUsageError({"--citymap", map_, "--city-share", "a=x"});
  ExpectUsageError({"--citymap", map_, "--city-share", "a=1,=2"});
  ExpectUsageError({"--citymap", map_, "--city-share", "a"});
  ExpectUsageError({"--citymap", map_, "--city-share", "a=-1"});
  ExpectUsageError({"--citymap", map_, "--city-share", "a=1x"});
  ExpectUsageError({"--city-share", "a=1"});  // needs --citymap
  ExpectUsageError({"--citymap", map_, "--source", "127.0.0.1"});
  ExpectUsageError({"--citymap", (tmp_ / "missing.csv").string()});
  ExpectUsageError({"--weights", map_});  // needs --citymap
  ExpectUsageError({"--server", "nonsense"});
  ExpectUsageError({"--miss-fraction", "1.5"});
  ExpectUsageError({"--tagged-fraction", "1.5"});
  ExpectUsageError({"--tcp-fraction", "-0.1"});
  ExpectUsageError({"--ecs-fraction", "half"});
  ExpectUsageError({"--miss-fraction", "0.6", "--tagged-fraction", "0.6"});
  ExpectUsageError({"--ramp", "5"});  // needs --rate
  ExpectUsageError({"--progress", "sometimes"});
  ExpectUsageError({"--threads", "0"});
  ExpectUsageError({"--edns-size", "100"});
  ExpectUsageError({"--no-such-option"});
}

TEST_F(OptionsTest, TransportDefaultsAndPorts) {
  const Parsed udp = Parse({});
  ASSERT_TRUE(udp.options.has_value());
  EXPECT_EQ(udp.options->transport, Transport::kUdp);
  const Parsed dot = Parse({"--transport", "dot"});
  ASSERT_TRUE(dot.options.has_value());
  EXPECT_EQ(dot.options->transport, Transport::kDot);
  EXPECT_EQ(dot.options->server.ToString(), "127.0.0.1:853");
  EXPECT_EQ(dot.options->queries_per_connection, 100u);
  EXPECT_EQ(dot.options->connections, 0u);
  EXPECT_TRUE(dot.options->tls_resume);
  EXPECT_FALSE(dot.options->tls_insecure);
  EXPECT_FALSE(dot.options->new_connections_per_second.has_value());
  const Parsed doh = Parse({"--transport", "doh", "--server", "192.0.2.1"});
  ASSERT_TRUE(doh.options.has_value());
  EXPECT_EQ(doh.options->server.ToString(), "192.0.2.1:443");
  EXPECT_EQ(doh.options->doh_path, "/dns-query");
  EXPECT_EQ(doh.options->doh_method, DohMethod::kPost);
  EXPECT_EQ(doh.options->doh_json_path, "/resolve");
  const Parsed json = Parse({"--transport", "doh-json", "--server", "[::1]:8443"});
  ASSERT_TRUE(json.options.has_value());
  EXPECT_EQ(json.options->transport, Transport::kDohJson);
  EXPECT_EQ(json.options->server.ToString(), "[::1]:8443");
}

TEST_F(OptionsTest, TransportValuesAreTaken) {
  const Parsed p =
      Parse({"--transport", "doh", "--doh-method", "get", "--doh-path", "/q", "--queries-per-connection", "0",
             "--connections", "8", "--no-tls-resume", "--tls-insecure", "--tls-name", "dns.example"});
  ASSERT_TRUE(p.options.has_value());
  const Options& o = *p.options;
  EXPECT_EQ(o.doh_method, DohMethod::kGet);
  EXPECT_EQ(o.doh_path, "/q");
  EXPECT_EQ(o.queries_per_connection, 0u);
  EXPECT_EQ(o.connections, 8u);
  EXPECT_FALSE(o.tls_resume);
  EXPECT_TRUE(o.tls_insecure);
  EXPECT_EQ(o.tls_name, "dns.example");
  // The new-connection mode: one query per connection unless told.
  const Parsed n = Parse({"--transport", "dot", "--new-connections-per-second", "500"});
  ASSERT_TRUE(n.options.has_value());
  EXPECT_EQ(n.options->new_connections_per_second, 500.0);
  EXPECT_EQ(n.options->queries_per_connection, 1u);
  const Parsed n4 =
      Parse({"--transport", "dot", "--new-connections-per-second", "5", "--queries-per-connection", "4"});
  ASSERT_TRUE(n4.options.has_value());
  EXPECT_EQ(n4.options->queries_per_connection, 4u);
}

TEST_F(OptionsTest, TransportUsageErrors) {
  ExpectUsageError({"--transport", "quic"});
  ExpectUsageError({"--tls-insecure"});  // needs a stream transport
  ExpectUsageError({"--queries-per-connection", "5"});
  ExpectUsageError({"--transport", "dot", "--tcp-fraction", "0.5"});
  ExpectUsageError({"--transport", "dot", "--doh-path", "/x"});
  ExpectUsageError({"--transport", "doh", "--doh-method", "put"});
  ExpectUsageError({"--transport", "doh", "--doh-path", "dns-query"});
  ExpectUsageError({"--transport", "doh", "--doh-path", "/dns-query?x=1"});
  ExpectUsageError({"--transport", "doh-json", "--doh-method", "get"});
  ExpectUsageError({"--transport", "doh-json", "--weight-fraction", "0.1"});
  ExpectUsageError({"--transport", "doh-json", "--edns-fraction", "0.1"});
  ExpectUsageError({"--transport", "dot", "--tls-insecure", "--tls-ca", map_});
  ExpectUsageError({"--transport", "dot", "--tls-ca", (tmp_ / "missing.pem").string()});
  ExpectUsageError({"--transport", "dot", "--new-connections-per-second", "5", "--rate", "100"});
  ExpectUsageError({"--transport", "dot", "--new-connections-per-second", "5", "--outstanding", "10"});
  ExpectUsageError(
      {"--transport", "dot", "--new-connections-per-second", "5", "--queries-per-connection", "0"});
  ExpectUsageError({"--transport", "dot", "--connections", "0"});
}

TEST_F(OptionsTest, HelpExitsZero) {
  ::testing::internal::CaptureStdout();
  const Parsed p = Parse({"--help"});
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_FALSE(p.options.has_value());
  EXPECT_EQ(p.exit_code, 0);
  EXPECT_THAT(out, HasSubstr("--city-share"));
  EXPECT_THAT(out, HasSubstr("--tagged-fraction"));
}

}  // namespace
}  // namespace weir::bench
