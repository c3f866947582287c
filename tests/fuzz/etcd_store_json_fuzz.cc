// Fuzzes the readers of the JSON documents weir-mgmt's etcd store keeps in
// etcd (mgmt/src/etcd_store_json.h): the head, the HTTPDNS accounts, a node
// record, each on the same bytes. None throws or crashes; what one accepts,
// written back, reads as the same value. A node record made of the input's
// bytes (not always UTF-8: a node sends its id, kind and NACK reasons) is
// written without throwing and reads back.
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "etcd_store_json.h"
#include "fuzz_check.h"

namespace {

namespace doc = weir::mgmt::etcd_store_json;

bool SameNode(const weir::mgmt::NodeRecord& a, const weir::mgmt::NodeRecord& b) {
  return a.node_id == b.node_id && a.kind == b.kind && a.peer == b.peer &&
         a.acked_version == b.acked_version && a.nack_version == b.nack_version &&
         a.nack_reason == b.nack_reason && a.last_seen == b.last_seen && a.mgmt == b.mgmt &&
         a.connected == b.connected;
}

bool IsUtf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);

  if (auto node = doc::NodeFromJson(in)) {
    auto back = doc::NodeFromJson(doc::NodeJson(*node).dump());
    FUZZ_CHECK(back.has_value() && SameNode(*back, *node));
  }

  if (auto accounts = doc::AccountsFromJson(in); accounts.ok()) {
    auto back = doc::AccountsFromJson(doc::AccountsJson(*accounts).dump());
    FUZZ_CHECK(back.ok() && *back == *accounts);
  } else {
    FUZZ_CHECK(accounts.status().code() == absl::StatusCode::kDataLoss);
  }

  if (auto head = doc::HeadFromJson(in); head.ok()) {
    auto back = doc::HeadFromJson(doc::HeadJson(*head).dump());
    FUZZ_CHECK(back.ok() && *back == *head);
  } else {
    FUZZ_CHECK(head.status().code() == absl::StatusCode::kDataLoss);
  }

  weir::mgmt::NodeRecord raw;
  raw.node_id = std::string(in.substr(0, size / 2));
  raw.kind = std::string(in.substr(size / 2));
  raw.nack_reason = std::string(in);
  raw.acked_version = size;
  raw.last_seen = -static_cast<int64_t>(size);
  auto back = doc::NodeFromJson(doc::NodeJson(raw).dump());
  FUZZ_CHECK(back.has_value());
  if (IsUtf8(raw.node_id) && IsUtf8(raw.kind) && IsUtf8(raw.nack_reason)) FUZZ_CHECK(SameNode(*back, raw));
  return 0;
}
