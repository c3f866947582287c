// The traffic the CDN side saw per (name, partition, address) over a time
// window: the feedback the weight calibration (calibration.h) acts on. Two
// forms with one meaning: a CSV file (`weirctl traffic import FILE`) and a
// JSON document (weir-mgmt's HTTP endpoint).
//
// CSV, one address of one window per line ('#' comments, blank lines and
// spaces around fields ignored):
//   window_start, window_end, name, partition, address, weight, traffic
//   2026-12-05T10:00:00Z, 2026-12-05T11:00:00Z, cdn.example.net, beijing, 192.0.2.1, 1, 1520000
// JSON:
//   {"samples": [{"window_start": "2026-12-05T10:00:00Z", "window_end": "...",
//                 "name": "cdn.example.net", "partition": "beijing",
//                 "addresses": [{"address": "192.0.2.1", "weight": 1, "traffic": 1520000}]}]}
//
// Times are RFC 3339 or Unix seconds; a window is 1 s to 1 day, its end after
// its start. `name` is a domain name (stored lower case with its trailing
// dot), `partition` a city of the city map, `common` or `subnet` (1 to 64 of
// A-Z a-z 0-9 _ . -), `address` an IPv4 or IPv6 address (stored canonical),
// `weight` the GSLB's weight of the address (1..65535), `traffic` what it
// carried (bytes, requests: one unit per sample), a finite number >= 0.
// Lines of one (window, name, partition) make one sample; an address twice
// in a sample is an error naming the first. Any error rejects the whole
// input; every bad line (CSV) or element (JSON) is reported.
//
// Control plane only.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "weir/common/line_errors.h"
#include "weir/mgmt/calibration.h"

namespace weir::mgmt {

struct TrafficSample {
  CalibrationKey key;
  uint32_t window_start = 0;  // Unix seconds
  uint32_t window_end = 0;
  std::vector<TrafficObservation> addresses;  // in input order
};

// Limits of one input.
inline constexpr size_t kMaxTrafficLines = 1'000'000;

// Every sample of the CSV text, in the order their first line appears; on
// any error nothing (the errors in `errors`, each with its line).
absl::StatusOr<std::vector<TrafficSample>> ParseTrafficCsv(std::string_view text, common::LineErrors* errors);
// The JSON form; errors name the element ("samples[2].addresses[0].weight:
// ...") as line 0 entries of `errors`.
absl::StatusOr<std::vector<TrafficSample>> ParseTrafficJson(std::string_view text,
                                                            common::LineErrors* errors);

}  // namespace weir::mgmt
