// Helpers shared by the fastpath unit tests.
#pragma once

#include <gtest/gtest.h>

#include <string_view>

#include "weir/fastpath/handler.h"

namespace weir::fastpath::testing {

// Publishes a tag table and a city map (given as their file texts) into
// `shared`. Call before the thread becomes an RCU reader: Publish waits
// for a grace period.
inline void PublishPartitions(SharedState* shared, std::string_view tags_text, std::string_view citymap_csv) {
  auto tags = partitions::TagTable::FromText(tags_text);
  ASSERT_TRUE(tags.ok()) << tags.status();
  shared->tags.Publish(*std::move(tags));
  auto cm = partitions::CityMap::FromCsv(citymap_csv);
  ASSERT_TRUE(cm.ok()) << cm.status();
  shared->citymap.Publish(*std::move(cm));
}

// Two cities with their ECS sources, as most tests use them.
inline constexpr std::string_view kTwoCities =
    "198.18.0.0/16,alpha,198.18.0.0/24\n"
    "198.19.0.0/16,beta,198.19.0.0/24\n";

}  // namespace weir::fastpath::testing
