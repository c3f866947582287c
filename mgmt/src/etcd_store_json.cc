#include "etcd_store_json.h"

#include <limits>

#include "absl/status/status.h"
#include "weir/common/text.h"

namespace weir::mgmt::etcd_store_json {

namespace {

using common::Cat;
using Json = nlohmann::json;

// Reads the members of one object, keeping the first problem (a member
// missing or of another type, an integer out of the field's range).
class MemberReader {
 public:
  explicit MemberReader(const Json& object) : object_(object) {
    if (!object_.is_object()) error_ = Cat("not an object but ", object_.type_name());
  }

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  bool Has(const char* name) const { return ok() && object_.contains(name); }

  void String(const char* name, std::string& out) {
    if (const Json* v = Find(name); v != nullptr) {
      if (v->is_string()) {
        out = v->get_ref<const std::string&>();
      } else {
        Wrong(name, "a string", *v);
      }
    }
  }
  void Bool(const char* name, bool& out) {
    if (const Json* v = Find(name); v != nullptr) {
      if (v->is_boolean()) {
        out = v->get<bool>();
      } else {
        Wrong(name, "true or false", *v);
      }
    }
  }
  void Unsigned(const char* name, uint64_t max, uint64_t& out) {
    if (const Json* v = Find(name); v != nullptr) {
      if (v->is_number_unsigned() && v->get<uint64_t>() <= max) {
        out = v->get<uint64_t>();
      } else {
        Wrong(name, Cat("an integer from 0 to ", max).c_str(), *v);
      }
    }
  }
  void Signed(const char* name, int64_t& out) {
    if (const Json* v = Find(name); v != nullptr) {
      if (v->is_number_unsigned() &&
          v->get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        out = static_cast<int64_t>(v->get<uint64_t>());
      } else if (v->is_number_integer() && !v->is_number_unsigned()) {
        out = v->get<int64_t>();
      } else {
        Wrong(name, "a 64-bit integer", *v);
      }
    }
  }

 private:
  const Json* Find(const char* name) {
    if (!ok()) return nullptr;
    auto it = object_.find(name);
    if (it == object_.end()) {
      error_ = Cat("no \"", name, "\"");
      return nullptr;
    }
    return &*it;
  }
  void Wrong(const char* name, const char* want, const Json& v) {
    error_ = Cat("\"", name, "\" is not ", want, " (", v.type_name(), ")");
  }

  const Json& object_;
  std::string error_;
};

// Parses `text` as JSON (nullopt with `error` set when it is not).
std::optional<Json> Parse(std::string_view text, std::string& error) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    error = Cat("not JSON (", text.size(), " bytes)");
    return std::nullopt;
  }
  return j;
}

// `s` as a JSON string can hold it: invalid UTF-8 replaced with U+FFFD, as
// dump() with error_handler_t::replace writes it.
std::string ValidUtf8(const std::string& s) {
  try {
    (void)Json(s).dump();
    return s;
  } catch (const Json::exception&) {
    return Json::parse(Json(s).dump(-1, ' ', false, Json::error_handler_t::replace)).get<std::string>();
  }
}

}  // namespace

Json AccountsJson(const std::vector<AccountRecord>& accounts) {
  Json a = Json::array();
  for (const AccountRecord& r : accounts) {
    a.push_back(Json{{"name", r.name},
                     {"secret", r.secret},
                     {"previous_secret", r.previous_secret},
                     {"allow_unsigned", r.allow_unsigned},
                     {"allow_legacy_md5", r.allow_legacy_md5},
                     {"rps", r.rps},
                     {"created", r.created},
                     {"rotated", r.rotated}});
  }
  return a;
}

absl::StatusOr<std::vector<AccountRecord>> AccountsFromJson(std::string_view text) {
  try {
    std::string error;
    const std::optional<Json> a = Parse(text, error);
    if (!a) return absl::DataLossError(Cat("accounts: ", error));
    if (!a->is_array()) return absl::DataLossError(Cat("accounts: not a list but ", a->type_name()));
    std::vector<AccountRecord> out;
    out.reserve(a->size());
    for (const Json& r : *a) {
      AccountRecord& rec = out.emplace_back();
      MemberReader m(r);
      uint64_t rps = 0;
      m.String("name", rec.name);
      m.String("secret", rec.secret);
      m.String("previous_secret", rec.previous_secret);
      m.Bool("allow_unsigned", rec.allow_unsigned);
      m.Bool("allow_legacy_md5", rec.allow_legacy_md5);
      m.Unsigned("rps", std::numeric_limits<uint32_t>::max(), rps);
      m.Signed("created", rec.created);
      m.Signed("rotated", rec.rotated);
      if (!m.ok()) return absl::DataLossError(Cat("accounts: account ", out.size(), ": ", m.error()));
      rec.rps = static_cast<uint32_t>(rps);
    }
    return out;
  } catch (const Json::exception& e) {
    return absl::DataLossError(Cat("accounts: ", e.what()));
  }
}

Json NodeJson(const NodeRecord& r) {
  return Json{{"node", ValidUtf8(r.node_id)},   {"kind", ValidUtf8(r.kind)},
              {"peer", ValidUtf8(r.peer)},      {"acked_version", r.acked_version},
              {"nack_version", r.nack_version}, {"nack_reason", ValidUtf8(r.nack_reason)},
              {"last_seen", r.last_seen},       {"mgmt", ValidUtf8(r.mgmt)},
              {"connected", r.connected}};
}

std::optional<NodeRecord> NodeFromJson(std::string_view text) {
  try {
    std::string error;
    const std::optional<Json> j = Parse(text, error);
    if (!j) return std::nullopt;
    NodeRecord r;
    MemberReader m(*j);
    constexpr uint64_t kAny = std::numeric_limits<uint64_t>::max();
    m.String("node", r.node_id);
    m.String("kind", r.kind);
    m.String("peer", r.peer);
    m.Unsigned("acked_version", kAny, r.acked_version);
    m.Unsigned("nack_version", kAny, r.nack_version);
    m.String("nack_reason", r.nack_reason);
    m.Signed("last_seen", r.last_seen);
    m.String("mgmt", r.mgmt);
    m.Bool("connected", r.connected);
    if (!m.ok()) return std::nullopt;
    return r;
  } catch (const Json::exception&) {
    return std::nullopt;
  }
}

Json HeadJson(const StoreHead& head) {
  Json j = Json::object();
  j["commit"] = head.commit;
  for (size_t k = 0; k < kHeadParts.size(); ++k) {
    const BlobRef& ref = head.parts[k];
    j[kHeadParts[k]] =
        Json{{"blob", ref.blob}, {"chunks", ref.chunks}, {"bytes", ref.bytes}, {"sha256", ref.sha256}};
  }
  return j;
}

absl::StatusOr<StoreHead> HeadFromJson(std::string_view text) {
  try {
    std::string error;
    const std::optional<Json> j = Parse(text, error);
    if (!j) return absl::DataLossError(Cat("store head: ", error));
    MemberReader m(*j);
    StoreHead head;
    if (m.Has("commit")) m.String("commit", head.commit);
    for (size_t k = 0; k < kHeadParts.size() && m.ok(); ++k) {
      auto it = j->find(kHeadParts[k]);
      if (it == j->end()) {
        if (k >= kRequiredHeadParts) continue;
        return absl::DataLossError(Cat("store head: no \"", kHeadParts[k], "\""));
      }
      MemberReader part(*it);
      BlobRef& ref = head.parts[k];
      constexpr uint64_t kAny = std::numeric_limits<uint64_t>::max();
      part.Unsigned("chunks", kAny, ref.chunks);
      // An empty part needs no blob; a non-empty one all of its fields.
      if (ref.chunks > 0 || part.Has("blob")) part.String("blob", ref.blob);
      if (ref.chunks > 0 || part.Has("bytes")) part.Unsigned("bytes", kAny, ref.bytes);
      if (ref.chunks > 0 || part.Has("sha256")) part.String("sha256", ref.sha256);
      if (!part.ok()) return absl::DataLossError(Cat("store head: \"", kHeadParts[k], "\": ", part.error()));
    }
    if (!m.ok()) return absl::DataLossError(Cat("store head: ", m.error()));
    return head;
  } catch (const Json::exception& e) {
    return absl::DataLossError(Cat("store head: ", e.what()));
  }
}

}  // namespace weir::mgmt::etcd_store_json
