#include "plot.h"

#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace weir::bench {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class PlotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "weir_plot_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    tmp_ = tmpl;
  }
  void TearDown() override { fs::remove_all(tmp_); }

  // A ten-second run with two weighted (name, city) pairs; the second has a
  // name and city full of characters that mean something to a shell, to
  // gnuplot's string syntax and to SVG.
  static Report SmallReport() {
    Report r;
    r.server = "127.0.0.1:53";
    r.mode = "closed loop, 256 outstanding";
    r.duration_s = 10;
    for (uint64_t ns = 20'000; ns < 2'000'000; ns += 7'000) r.latency.Record(ns);
    for (int i = 1; i <= 10; ++i) {
      TimelinePoint p;
      p.t = i;
      p.sent = 1000 + 10 * i;
      p.answered = 990 + 10 * i;
      p.p99_us = 300 + 5 * i;
      r.timeline.push_back(p);
    }
    NameCityShare a;
    a.name = "x.cdn.example.net.";
    a.city = "berlin";
    a.weights_from = "answer";
    for (auto [addr, w] : {std::pair{"192.0.2.1", 3u}, std::pair{"2001:db8::1", 1u}}) {
      AddressShare s;
      s.address = addr;
      s.weight = w;
      s.expected_pct = 25.0 * w;
      for (int i = 0; i < 10; ++i) s.observed_pct_over_time.push_back(s.expected_pct + (i % 2 ? 1.5 : -1.5));
      a.addresses.push_back(s);
    }
    r.shares.push_back(a);
    NameCityShare odd = a;
    odd.name = "it's a \"test\"/$(touch pwned)&<b>@GPVAL_TERMINALS.";
    odd.city = "S\xc3\xa3o Paulo\n'; system 'touch pwned2";
    odd.weights_from = "none";
    odd.addresses.pop_back();  // shorter series: must still plot
    odd.addresses[0].observed_pct_over_time.resize(7);
    odd.addresses[0].address = "192.0.2.1`touch pwned3`";
    r.shares.push_back(odd);
    return r;
  }

  static void ExpectImages(const fs::path& dir, const std::string& name) {
    const std::string png = ReadAll(dir / (name + ".png"));
    ASSERT_GT(png.size(), 8u) << name;
    EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << name;
    const std::string svg = ReadAll(dir / (name + ".svg"));
    EXPECT_THAT(svg, HasSubstr("<svg")) << name;
    EXPECT_THAT(svg, HasSubstr("</svg>")) << name;
  }

  fs::path tmp_;
};

TEST_F(PlotTest, WritesEveryPlotAsPngAndSvg) {
  const fs::path dir = tmp_ / "new" / "plots";  // created with its parent
  std::vector<std::string> files;
  const absl::Status s = WritePlots(SmallReport(), dir.string(), &files);
  ASSERT_TRUE(s.ok()) << s;

  const std::string odd =
      "shares_it_s_a__test____touch_pwned___b__GPVAL_TERMINALS_S__o_Paulo____system__touch_pwned2";
  for (const std::string& name : {std::string("latency_cdf"), std::string("qps_p99"),
                                  std::string("shares_x.cdn.example.net_berlin"), odd}) {
    ExpectImages(dir, name);
    for (const char* ext : {".dat", ".gp", ".png", ".svg"}) {
      EXPECT_NE(std::find(files.begin(), files.end(), (dir / (name + ext)).string()), files.end())
          << name << ext;
    }
  }
  EXPECT_EQ(files.size(), 16u);
  // The odd name reaches the plot as text, not as a command.
  EXPECT_FALSE(fs::exists(dir / "pwned"));
  EXPECT_FALSE(fs::exists(dir / "pwned2"));
  EXPECT_FALSE(fs::exists(dir / "pwned3"));
  EXPECT_THAT(ReadAll(dir / (odd + ".svg")), HasSubstr("GPVAL_TERMINALS"));
  // The expected share is drawn as a dashed line only where it is known.
  EXPECT_THAT(ReadAll(dir / "shares_x.cdn.example.net_berlin.gp"), HasSubstr("75 with lines dt 2"));
  EXPECT_THAT(ReadAll(dir / (odd + ".gp")), ::testing::Not(HasSubstr("dt 2")));
}

TEST_F(PlotTest, EmptyTimelineGivesOnlyTheLatencyPlot) {
  Report r = SmallReport();
  r.timeline.clear();
  std::vector<std::string> files;
  ASSERT_TRUE(WritePlots(r, tmp_.string(), &files).ok());
  ExpectImages(tmp_, "latency_cdf");
  EXPECT_EQ(files.size(), 4u);
  EXPECT_FALSE(fs::exists(tmp_ / "qps_p99.png"));
}

TEST_F(PlotTest, NoAnswersAndNoTimelineWritesNothing) {
  std::vector<std::string> files;
  ASSERT_TRUE(WritePlots(Report{}, (tmp_ / "empty").string(), &files).ok());
  EXPECT_TRUE(files.empty());
  EXPECT_TRUE(fs::is_directory(tmp_ / "empty"));
}

TEST_F(PlotTest, OneLatencyBucketStillPlots) {
  Report r;
  r.latency.Record(50'000);
  ASSERT_TRUE(WritePlots(r, tmp_.string()).ok());
  ExpectImages(tmp_, "latency_cdf");
}

TEST_F(PlotTest, UnwritableDirectoryIsAnError) {
  // Below a regular file: no directory can be made there, even by root.
  const fs::path file = tmp_ / "a_file";
  std::ofstream(file) << "x";
  const absl::Status s = WritePlots(SmallReport(), (file / "plots").string());
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("cannot create plot directory"));
}

TEST_F(PlotTest, ExistingReadOnlyDirectoryIsAnError) {
  // Root writes into read-only directories: as root the write runs with the
  // file-system identity of nobody (setfsuid, this thread only), which has
  // no CAP_DAC_OVERRIDE.
  const bool root = geteuid() == 0;
  ASSERT_EQ(chmod(tmp_.c_str(), root ? 0555 : 0500), 0);
  if (root) {
    setfsgid(65534);
    setfsuid(65534);
  }
  const absl::Status s = WritePlots(SmallReport(), tmp_.string());
  if (root) {
    setfsuid(0);
    setfsgid(0);
  }
  chmod(tmp_.c_str(), 0700);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("cannot write"));
}

TEST_F(PlotTest, MissingGnuplotIsAnError) {
  const absl::Status s = WritePlots(SmallReport(), tmp_.string(), nullptr, "/nonexistent/gnuplot");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("plot latency_cdf: cannot run /nonexistent/gnuplot"));
}

TEST_F(PlotTest, FailingGnuplotNamesPlotStatusAndStderr) {
  // A stand-in that fails the way gnuplot does on a bad script.
  const fs::path fake = tmp_ / "fake-gnuplot";
  std::ofstream(fake)
      << "#!/bin/sh\necho 'first line' >&2\necho \"\\\"$1\\\" line 3: undefined variable\" >&2\n"
         "exit 3\n";
  fs::permissions(fake, fs::perms::owner_all);
  const absl::Status s = WritePlots(SmallReport(), (tmp_ / "out").string(), nullptr, fake.string());
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(std::string(s.message()),
            "plot latency_cdf: gnuplot exited with status 3: \"latency_cdf.gp\" line 3: undefined variable");
}

}  // namespace
}  // namespace weir::bench
