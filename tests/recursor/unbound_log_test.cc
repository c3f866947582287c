#include "weir/recursor/unbound_log.h"

#include <gtest/gtest.h>

namespace weir::recursor {
namespace {

using common::LogLevel;

TEST(UnboundLog, LevelsFromLibunboundsTypes) {
  struct Case {
    const char* line;
    LogLevel level;
    const char* message;
  };
  const Case cases[] = {
      {"[1764638625] libunbound[1234:0] info: resolving example. A IN", LogLevel::kInfo,
       "resolving example. A IN"},
      {"[1764638625] libunbound[1234:1] error: udp connect failed: Network is unreachable", LogLevel::kError,
       "udp connect failed: Network is unreachable"},
      {"[1764638625] libunbound[1234:0] warning: unbound is started as root", LogLevel::kWarning,
       "unbound is started as root"},
      {"[1764638625] libunbound[1234:0] notice: init module 0: iterator", LogLevel::kInfo,
       "init module 0: iterator"},
      {"[1764638625] libunbound[1234:0] debug: cache memory msg=66072", LogLevel::kDebug,
       "cache memory msg=66072"},
      // log-time-ascii: no brackets around the time.
      {"Dec 02 01:23:45 libunbound[1234:0] error: bad: x", LogLevel::kError, "bad: x"},
  };
  for (const Case& c : cases) {
    const UnboundLine u = ParseUnboundLine(c.line);
    EXPECT_EQ(u.level, c.level) << c.line;
    EXPECT_EQ(u.message, c.message) << c.line;
  }
}

TEST(UnboundLog, OtherShapesAreInfoAndWhole) {
  for (const char* line : {"", "no brackets here", "[123 unterminated", "[1] x[1:0] nocolon",
                           "[1] libunbound[1:0] strange: text"}) {
    const UnboundLine u = ParseUnboundLine(line);
    EXPECT_EQ(u.level, LogLevel::kInfo) << line;
    EXPECT_EQ(u.message, line);
  }
}

}  // namespace
}  // namespace weir::recursor
