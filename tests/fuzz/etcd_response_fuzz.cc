// Fuzzes the etcd client's reading of what etcd's JSON gateway answers
// (mgmt/src/etcd_json.h): every reply parser, the error body reader and the
// watch object reader on the same bytes. None throws or crashes; what one
// accepts, written back in the gateway's form (int64 fields as strings,
// bytes as base64), reads as the same value.
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "etcd_json.h"
#include "fuzz_check.h"

namespace {

using Json = nlohmann::json;
namespace etcd = weir::mgmt::etcd;

std::string B64(const std::string& bytes) { return absl::Base64Escape(bytes); }

Json KvJson(const etcd::KeyValue& kv) {
  return Json{{"key", B64(kv.key)},
              {"value", B64(kv.value)},
              {"create_revision", std::to_string(kv.create_revision)},
              {"mod_revision", std::to_string(kv.mod_revision)},
              {"version", std::to_string(kv.version)}};
}

Json RangeJson(const std::vector<etcd::KeyValue>& kvs, int64_t count) {
  Json r = {{"count", std::to_string(count)}, {"kvs", Json::array()}};
  for (const etcd::KeyValue& kv : kvs) r["kvs"].push_back(KvJson(kv));
  return r;
}

Json Header(int64_t revision) { return Json{{"revision", std::to_string(revision)}}; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);

  if (auto range = etcd::ParseRangeReply(in); range.ok()) {
    FUZZ_CHECK(range->kvs.size() <= size);
    Json again = RangeJson(range->kvs, range->count);
    again["header"] = Header(range->revision);
    auto back = etcd::ParseRangeReply(again.dump());
    FUZZ_CHECK(back.ok() && *back == *range);
  } else {
    FUZZ_CHECK(range.status().code() == absl::StatusCode::kInternal);
  }

  if (auto put = etcd::ParsePutReply(in); put.ok()) {
    auto back = etcd::ParsePutReply(Json{{"header", Header(*put)}}.dump());
    FUZZ_CHECK(back.ok() && *back == *put);
  } else {
    FUZZ_CHECK(put.status().code() == absl::StatusCode::kInternal);
  }

  if (auto deleted = etcd::ParseDeleteReply(in); deleted.ok()) {
    auto back = etcd::ParseDeleteReply(Json{{"deleted", std::to_string(*deleted)}}.dump());
    FUZZ_CHECK(back.ok() && *back == *deleted);
  } else {
    FUZZ_CHECK(deleted.status().code() == absl::StatusCode::kInternal);
  }

  if (auto txn = etcd::ParseTxnReply(in); txn.ok()) {
    // A reply does not say which kind each response was once read: a
    // range's that is empty reads like a put's, and so does a delete of
    // nothing. Each is written back as the kind its fields show.
    Json responses = Json::array();
    for (const etcd::OpResult& op : txn->responses) {
      if (!op.kvs.empty() || op.count != 0) {
        responses.push_back(Json{{"response_range", RangeJson(op.kvs, op.count)}});
      } else if (op.deleted != 0) {
        responses.push_back(Json{{"response_delete_range", {{"deleted", std::to_string(op.deleted)}}}});
      } else {
        responses.push_back(Json{{"response_put", Json::object()}});
      }
    }
    const Json again = {
        {"header", Header(txn->revision)}, {"succeeded", txn->succeeded}, {"responses", responses}};
    auto back = etcd::ParseTxnReply(again.dump());
    FUZZ_CHECK(back.ok() && *back == *txn);
  } else {
    FUZZ_CHECK(txn.status().code() == absl::StatusCode::kInternal);
  }

  const absl::Status compact = etcd::ParseCompactReply(in);
  FUZZ_CHECK(compact.ok() || compact.code() == absl::StatusCode::kInternal);

  const etcd::ErrorBody error = etcd::ParseErrorBody(in);
  const absl::StatusCode code = error.status_code();
  FUZZ_CHECK(code != absl::StatusCode::kOk);
  FUZZ_CHECK(code == absl::StatusCode::kUnknown || static_cast<int>(code) == error.code);
  FUZZ_CHECK(error.message.size() <= size);

  const etcd::WatchResponse watch = etcd::ParseWatchObject(in);
  FUZZ_CHECK(watch.compact_revision == 0 || watch.error.ok());
  for (size_t i = 0; i < watch.batches.size(); ++i) {
    FUZZ_CHECK(!watch.batches[i].events.empty());
    FUZZ_CHECK(i == 0 || watch.batches[i].revision != watch.batches[i - 1].revision);
    for (const etcd::WatchEvent& e : watch.batches[i].events)
      FUZZ_CHECK(e.kv.mod_revision == watch.batches[i].revision);
  }
  return 0;
}
