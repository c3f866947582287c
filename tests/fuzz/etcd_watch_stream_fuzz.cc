// Fuzzes the etcd watch stream as the watcher reads it (mgmt/src/etcd_json.h):
// the bytes cut at points the input chooses, fed to WatchStreamSplitter,
// each object read with ParseWatchObject. The objects are the same whatever
// the cuts (all at once, byte by byte, or the input's own); a splitter with
// a small limit yields a prefix of them and never holds more than its
// limit; every object a watch reads without error, written back in the
// gateway's form, reads as the same response.
//
// Input: one byte N, then N bytes of piece lengths (used in turn), then the
// stream.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "etcd_json.h"
#include "fuzz_check.h"

namespace {

using Json = nlohmann::json;
namespace etcd = weir::mgmt::etcd;

struct Split {
  std::vector<std::string> objects;
  bool cut_off = false;  // a Feed() was refused
};

// Feeds `stream` in pieces of the lengths in `cuts` (in turn; 0 or none:
// the rest at once), taking the objects after each piece, then Finish().
Split Run(std::string_view stream, const std::vector<size_t>& cuts, size_t limit) {
  Split out;
  etcd::WatchStreamSplitter splitter(limit);
  size_t pos = 0;
  for (size_t i = 0; pos < stream.size(); ++i) {
    size_t n = cuts.empty() ? 0 : cuts[i % cuts.size()];
    if (n == 0 || n > stream.size() - pos) n = stream.size() - pos;
    if (!splitter.Feed(stream.substr(pos, n))) {
      out.cut_off = true;
      return out;
    }
    FUZZ_CHECK(splitter.pending_bytes() <= limit);
    pos += n;
    for (std::string object; splitter.Next(object);) {
      FUZZ_CHECK(object.find('\n') == std::string::npos);
      out.objects.push_back(object);
    }
  }
  if (std::string rest; splitter.Finish(rest)) out.objects.push_back(rest);
  FUZZ_CHECK(splitter.pending_bytes() == 0);
  return out;
}

Json WatchJson(const etcd::WatchResponse& w) {
  Json result = Json::object();
  if (w.created) result["created"] = true;
  if (w.compact_revision > 0) {
    result["canceled"] = true;
    result["compact_revision"] = std::to_string(w.compact_revision);
  }
  Json events = Json::array();
  for (const etcd::WatchBatch& b : w.batches) {
    for (const etcd::WatchEvent& e : b.events) {
      Json kv = {{"key", absl::Base64Escape(e.kv.key)},
                 {"value", absl::Base64Escape(e.kv.value)},
                 {"create_revision", std::to_string(e.kv.create_revision)},
                 {"mod_revision", std::to_string(e.kv.mod_revision)},
                 {"version", std::to_string(e.kv.version)}};
      Json event = {{"kv", std::move(kv)}};
      if (e.type == etcd::WatchEvent::Type::kDelete) event["type"] = "DELETE";
      events.push_back(std::move(event));
    }
  }
  if (!events.empty()) result["events"] = std::move(events);
  return Json{{"result", std::move(result)}};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t n = std::min<size_t>(data[0] % 16, size - 1);
  std::vector<size_t> cuts(data + 1, data + 1 + n);
  const std::string_view stream(reinterpret_cast<const char*>(data) + 1 + n, size - 1 - n);

  const Split whole = Run(stream, {}, etcd::kMaxAnswerBytes);
  FUZZ_CHECK(!whole.cut_off);
  const Split cut = Run(stream, cuts, etcd::kMaxAnswerBytes);
  FUZZ_CHECK(!cut.cut_off && cut.objects == whole.objects);
  const Split bytes = Run(stream, {1}, etcd::kMaxAnswerBytes);
  FUZZ_CHECK(!bytes.cut_off && bytes.objects == whole.objects);

  // A limit the stream's lines may exceed: what comes out before the
  // stream is cut off is what a splitter without the limit gives.
  const Split small = Run(stream, cuts, 64);
  FUZZ_CHECK(small.objects.size() <= whole.objects.size());
  for (size_t i = 0; i < small.objects.size(); ++i) FUZZ_CHECK(small.objects[i] == whole.objects[i]);
  FUZZ_CHECK(small.cut_off || small.objects == whole.objects);

  for (const std::string& object : whole.objects) {
    const etcd::WatchResponse w = etcd::ParseWatchObject(object);
    FUZZ_CHECK(w.compact_revision == 0 || w.error.ok());
    for (size_t i = 0; i < w.batches.size(); ++i) {
      FUZZ_CHECK(!w.batches[i].events.empty());
      FUZZ_CHECK(i == 0 || w.batches[i].revision != w.batches[i - 1].revision);
      for (const etcd::WatchEvent& e : w.batches[i].events)
        FUZZ_CHECK(e.kv.mod_revision == w.batches[i].revision);
    }
    if (w.error.ok()) {
      const etcd::WatchResponse back = etcd::ParseWatchObject(WatchJson(w).dump());
      FUZZ_CHECK(back == w);
    }
  }
  return 0;
}
