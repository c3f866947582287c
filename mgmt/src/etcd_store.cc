#include "weir/mgmt/etcd_store.h"

#include <openssl/rand.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <span>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "etcd_store_json.h"
#include "weir/common/log.h"
#include "weir/common/text.h"

namespace weir::mgmt {

using common::Cat;
using common::ToStd;
using Json = nlohmann::json;

namespace {

using etcd_store_json::kHeadParts;
constexpr const auto& kKinds = kHeadParts;

std::string RandomHex(size_t bytes) {
  std::array<unsigned char, 32> b{};
  bytes = std::min(bytes, b.size());
  if (RAND_bytes(b.data(), static_cast<int>(bytes)) != 1) {
    // No entropy is a broken host; a time-based id still tells commits apart.
    const auto t = std::chrono::steady_clock::now().time_since_epoch().count();
    std::memcpy(b.data(), &t, std::min(sizeof(t), bytes));
  }
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(b.data()), bytes));
}

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The documents' JSON (etcd_store_json.h).
using etcd_store_json::AccountsFromJson;
using etcd_store_json::AccountsJson;
using etcd_store_json::NodeFromJson;
using etcd_store_json::NodeJson;

// A kind's content as its blob holds it. KindContent and Load know each
// kind by its index in kKinds: a new kind needs a case in both.
static_assert(kKinds.size() == 4);
std::string KindContent(const StoredConfig& c, size_t kind) {
  switch (kind) {
    case 0:
      return c.tag_lines.empty() ? std::string() : absl::StrJoin(c.tag_lines, "\n") + "\n";
    case 1:
      return c.citymap;
    case 2:
      return c.accounts.empty() ? std::string() : AccountsJson(c.accounts).dump();
    default:
      return c.calibration;
  }
}

int64_t Now() { return static_cast<int64_t>(std::time(nullptr)); }

// A failure to reach etcd (a member gone, an election under way) rather than
// etcd refusing the request: an idempotent call may be repeated.
bool IsTransient(const absl::Status& st) {
  return st.code() == absl::StatusCode::kUnavailable || st.code() == absl::StatusCode::kUnknown ||
         st.code() == absl::StatusCode::kDeadlineExceeded;
}
constexpr int kAttempts = 3;

// The node registry's writes, off the mgmt loop: an ACK from each of a
// thousand nodes must not wait on etcd one by one. Queued changes are
// folded per node and written in rounds; a write other than a node's
// (re)connection only replaces the record this instance wrote last (a
// transaction comparing the value), so an instance the node left never
// overwrites the record of the instance it moved to.
class NodeWriter {
 public:
  // Records per transaction: a comparison and a put each, well under etcd's
  // default limit of 128 operations.
  static constexpr size_t kRecordsPerTxn = 50;

  NodeWriter(const etcd::ClientOptions& options, std::string prefix)
      : client_(options), prefix_(std::move(prefix)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~NodeWriter() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  struct Change {
    enum class Op { kSeen, kAck, kNack, kGone } op = Op::kSeen;
    NodeRecord record;  // kSeen
    std::string node_id;
    uint64_t version = 0;
    std::string reason;
  };
  void Push(Change c) {
    {
      std::lock_guard<std::mutex> l(mu_);
      queue_.push_back(std::move(c));
    }
    cv_.notify_all();
  }
  // The node's record as this instance last wrote or queued it (nullopt none).
  void Forget(const std::string& node_id) {
    std::lock_guard<std::mutex> l(mu_);
    forget_.push_back(node_id);
  }

 private:
  struct State {
    NodeRecord record;
    std::string written;  // the value in etcd as this instance wrote it ("" none)
    bool dirty = false;
    bool unconditional = false;  // a (re)connection: written whatever is there
  };

  void Run() {
    common::RateLimitedLog log{{.component = "etcd"}};
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait_for(l, std::chrono::milliseconds(500), [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      std::deque<Change> batch;
      batch.swap(queue_);
      std::vector<std::string> forget;
      forget.swap(forget_);
      l.unlock();
      for (const std::string& n : forget) nodes_.erase(n);
      for (Change& c : batch) Fold(c);
      std::vector<std::string> done;  // records this instance no longer keeps
      std::vector<State*> dirty;
      for (auto& [id, s] : nodes_) {
        if (s.dirty && s.record.connected) dirty.push_back(&s);  // Write drops the others
      }
      // A round of ACKs from a thousand nodes is a few transactions (each
      // one etcd revision), not a thousand; a batch whose comparisons do
      // not all hold (a node moved to another instance) is written node
      // by node.
      for (size_t i = 0; i < dirty.size(); i += kRecordsPerTxn) {
        WriteBatch(std::span<State*>(dirty).subspan(i, std::min(kRecordsPerTxn, dirty.size() - i)));
      }
      for (auto& [id, s] : nodes_) {
        if (!s.dirty) continue;
        auto kept = Write(s);
        if (!kept.ok()) {
          log("node registry: ", id, ": ", ToStd(kept.status().message()), " (retrying)");
        } else if (!*kept) {
          done.push_back(id);
        }
      }
      for (const std::string& id : done) nodes_.erase(id);
      l.lock();
    }
  }

  void Fold(Change& c) {
    const std::string& id = c.op == Change::Op::kSeen ? c.record.node_id : c.node_id;
    auto it = nodes_.find(id);
    if (c.op == Change::Op::kSeen) {
      State& s = nodes_[id];
      s.record = std::move(c.record);
      s.dirty = true;
      s.unconditional = true;
      return;
    }
    if (it == nodes_.end()) return;  // another instance holds the node now
    State& s = it->second;
    s.dirty = true;
    s.record.last_seen = Now();
    switch (c.op) {
      case Change::Op::kAck:
        s.record.acked_version = c.version;
        break;
      case Change::Op::kNack:
        s.record.nack_version = c.version;
        s.record.nack_reason = c.reason;
        break;
      case Change::Op::kGone:
        s.record.connected = false;
        break;
      case Change::Op::kSeen:
        break;
    }
  }

  // Writes the records in one transaction when every comparison holds;
  // leaves them dirty (for Write, one by one) otherwise.
  void WriteBatch(std::span<State*> batch) {
    if (batch.size() < 2) return;
    std::vector<etcd::Compare> compare;
    std::vector<etcd::Op> puts;
    std::vector<std::string> values;
    for (State* s : batch) {
      const std::string key = prefix_ + "nodes/" + s->record.node_id;
      values.push_back(NodeJson(s->record).dump());
      if (!s->unconditional && !s->written.empty()) {
        etcd::Compare same;
        same.key = key;
        same.target = etcd::Compare::Target::kValue;
        same.result = etcd::Compare::Result::kEqual;
        same.value = s->written;
        compare.push_back(std::move(same));
      }
      puts.push_back(etcd::Op::Put(key, values.back()));
    }
    auto r = client_.Txn(compare, puts, {});
    if (!r.ok() || !r->succeeded) return;
    for (size_t i = 0; i < batch.size(); ++i) {
      State& s = *batch[i];
      s.written = std::move(values[i]);
      s.dirty = false;
      s.unconditional = false;
    }
  }

  // Writes the record; false when this instance keeps it no longer (the
  // node left, or another instance wrote it since).
  absl::StatusOr<bool> Write(State& s) {
    const std::string key = prefix_ + "nodes/" + s.record.node_id;
    const std::string value = NodeJson(s.record).dump();
    if (s.unconditional || s.written.empty()) {
      auto r = client_.Put(key, value);
      if (!r.ok()) return r.status();
    } else {
      etcd::Compare same;
      same.key = key;
      same.target = etcd::Compare::Target::kValue;
      same.result = etcd::Compare::Result::kEqual;
      same.value = s.written;
      auto r = client_.Txn({same}, {etcd::Op::Put(key, value)}, {});
      if (!r.ok()) return r.status();
      // Another instance wrote the record since: the node is its now.
      if (!r->succeeded) return false;
    }
    s.written = value;
    s.dirty = false;
    s.unconditional = false;
    return s.record.connected;
  }

  etcd::Client client_;
  std::string prefix_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Change> queue_;
  std::vector<std::string> forget_;
  bool stop_ = false;
  std::map<std::string, State> nodes_;  // the writer thread's
  std::thread thread_;
};

class EtcdBackend final : public StoreBackend {
 public:
  explicit EtcdBackend(const EtcdStoreOptions& options)
      : options_(options), client_(options.client), writer_(options.client, options.prefix) {}
  ~EtcdBackend() override {
    if (watcher_) watcher_->Stop();
  }

  absl::Status Init();

  std::string Describe() const override {
    std::string endpoints;
    for (const std::string& e : options_.client.endpoints) endpoints += (endpoints.empty() ? "" : ",") + e;
    return Cat("etcd ", endpoints, " prefix ", options_.prefix);
  }
  absl::StatusOr<StoredConfig> Load() override;
  absl::StatusOr<std::pair<uint64_t, std::string>> Head() override;
  absl::StatusOr<uint64_t> Commit(const StoredConfig& base, const StoredConfig& next,
                                  const AuditRecord& audit) override;
  absl::Status NodeSeen(const NodeRecord& record) override {
    NodeRecord r = record;
    r.mgmt = options_.instance;
    writer_.Push({NodeWriter::Change::Op::kSeen, std::move(r), {}, 0, {}});
    return absl::OkStatus();
  }
  absl::Status NodeAck(const std::string& node_id, uint64_t version) override {
    writer_.Push({NodeWriter::Change::Op::kAck, {}, node_id, version, {}});
    return absl::OkStatus();
  }
  absl::Status NodeNack(const std::string& node_id, uint64_t version, const std::string& reason) override {
    writer_.Push({NodeWriter::Change::Op::kNack, {}, node_id, version, reason});
    return absl::OkStatus();
  }
  absl::Status NodeGone(const std::string& node_id) override {
    writer_.Push({NodeWriter::Change::Op::kGone, {}, node_id, 0, {}});
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<NodeRecord>> Nodes() override;
  absl::Status ForgetNode(const std::string& node_id) override;
  absl::StatusOr<std::vector<AuditRecord>> Audit(int limit) override;
  absl::StatusOr<std::vector<uint64_t>> VersionsAfter(uint64_t version, int limit) override;
  void OnExternalChange(std::function<void()> changed) override;

 private:
  std::string Key(std::string_view rest) const { return Cat(options_.prefix, rest); }
  std::string BlobPrefix(const std::string& blob) const { return Key(Cat("blob/", blob, "/")); }
  absl::StatusOr<std::string> EnsureOrigin();
  absl::StatusOr<std::string> ReadBlob(const etcd_store_json::BlobRef& ref, int64_t revision);
  void DeleteBlobs(const std::vector<std::string>& blobs);
  // Deletes blobs head does not name that are older than head (a commit
  // that died between its blobs and its transaction).
  void SweepBlobs();
  void StartWatch(int64_t from);
  // After a compaction ended the watch: watches again from after `revision`,
  // the revision of the read that follows it (the full read is the resync).
  void MaybeRewatch(int64_t revision) {
    if (rewatch_.exchange(false) && changed_) StartWatch(revision + 1);
  }

  EtcdStoreOptions options_;
  etcd::Client client_;
  NodeWriter writer_;
  std::string origin_;
  std::optional<etcd_store_json::StoreHead> head_;  // as last read or written
  uint64_t head_version_ = 0;
  int64_t read_revision_ = 0;  // the store's revision at the last Load
  std::function<void()> changed_;
  std::unique_ptr<etcd::Watcher> watcher_;
  std::atomic<bool> rewatch_{false};
};

absl::StatusOr<std::string> EtcdBackend::EnsureOrigin() {
  etcd::Compare absent;
  absent.key = Key("origin");
  absent.target = etcd::Compare::Target::kVersion;
  absent.result = etcd::Compare::Result::kEqual;
  absent.number = 0;
  const std::string mine = RandomHex(16);
  auto r = client_.Txn({absent}, {etcd::Op::Put(Key("origin"), mine)}, {etcd::Op::Range(Key("origin"))});
  if (!r.ok()) return r.status();
  if (r->succeeded) {
    common::LogInfo("store", "etcd store created under ", options_.prefix, " (origin ", mine, ")");
    return mine;
  }
  if (r->responses.empty() || r->responses[0].kvs.empty())
    return absl::UnavailableError("etcd: the store's origin vanished while it was read");
  return r->responses[0].kvs[0].value;
}

absl::Status EtcdBackend::Init() {
  auto origin = EnsureOrigin();
  if (!origin.ok()) return origin.status();
  origin_ = *origin;
  SweepBlobs();
  return absl::OkStatus();
}

absl::StatusOr<std::pair<uint64_t, std::string>> EtcdBackend::Head() {
  auto r = client_.Txn({}, {etcd::Op::Range(Key("head")), etcd::Op::Range(Key("origin"))}, {});
  if (!r.ok()) return r.status();
  if (r->responses.size() != 2) return absl::DataLossError("etcd: a short transaction reply");
  MaybeRewatch(r->revision);
  uint64_t version = 0;
  if (!r->responses[0].kvs.empty()) version = static_cast<uint64_t>(r->responses[0].kvs[0].mod_revision);
  if (r->responses[1].kvs.empty()) {
    // The origin was deleted (a restore that asks for a new one).
    auto origin = EnsureOrigin();
    if (!origin.ok()) return origin.status();
    return std::make_pair(version, *origin);
  }
  return std::make_pair(version, r->responses[1].kvs[0].value);
}

absl::StatusOr<std::string> EtcdBackend::ReadBlob(const etcd_store_json::BlobRef& ref, int64_t revision) {
  if (ref.chunks == 0) return std::string();
  const std::string prefix = BlobPrefix(ref.blob);
  auto r = client_.Range(prefix, etcd::PrefixEnd(prefix), revision);
  if (!r.ok()) return r.status();
  if (r->kvs.size() != ref.chunks) {
    return absl::DataLossError(
        Cat("etcd: blob ", ref.blob, " has ", r->kvs.size(), " of its ", ref.chunks, " chunks"));
  }
  std::string out;
  out.reserve(ref.bytes);
  for (const etcd::KeyValue& kv : r->kvs) out += kv.value;
  if (ContentDigest(out) != ref.sha256)
    return absl::DataLossError(Cat("etcd: blob ", ref.blob, " does not match its SHA-256"));
  return out;
}

absl::StatusOr<StoredConfig> EtcdBackend::Load() {
  auto r = client_.Txn({}, {etcd::Op::Range(Key("head")), etcd::Op::Range(Key("origin"))}, {});
  if (!r.ok()) return r.status();
  if (r->responses.size() != 2) return absl::DataLossError("etcd: a short transaction reply");
  StoredConfig out;
  if (r->responses[1].kvs.empty()) {
    auto origin = EnsureOrigin();
    if (!origin.ok()) return origin.status();
    out.origin = *origin;
  } else {
    out.origin = r->responses[1].kvs[0].value;
  }
  std::optional<etcd_store_json::StoreHead> head;
  if (!r->responses[0].kvs.empty()) {
    const etcd::KeyValue& kv = r->responses[0].kvs[0];
    out.version = static_cast<uint64_t>(kv.mod_revision);
    auto parsed = etcd_store_json::HeadFromJson(kv.value);
    if (!parsed.ok())
      return absl::DataLossError(Cat("etcd: ", Key("head"), ": ", ToStd(parsed.status().message())));
    head = *std::move(parsed);
    for (size_t k = 0; k < kKinds.size(); ++k) {
      auto content = ReadBlob(head->parts[k], r->revision);
      if (!content.ok()) return content.status();
      switch (k) {
        case 0:  // one canonical line per tag, each ending with a newline
          out.tag_lines = absl::StrSplit(*content, '\n', absl::SkipEmpty());
          break;
        case 1:
          out.citymap = *std::move(content);
          break;
        case 2:
          if (!content->empty()) {
            auto accounts = AccountsFromJson(*content);
            if (!accounts.ok()) return accounts.status();
            out.accounts = *std::move(accounts);
          }
          break;
        default:
          out.calibration = *std::move(content);
          break;
      }
    }
  }
  origin_ = out.origin;
  head_ = std::move(head);
  head_version_ = out.version;
  read_revision_ = r->revision;
  MaybeRewatch(r->revision);
  return out;
}

void EtcdBackend::DeleteBlobs(const std::vector<std::string>& blobs) {
  for (const std::string& b : blobs) {
    const std::string prefix = BlobPrefix(b);
    if (auto r = client_.Delete(prefix, etcd::PrefixEnd(prefix)); !r.ok())
      common::LogWarning("store", "etcd: cannot delete blob ", b, ": ", ToStd(r.status().message()));
  }
}

absl::StatusOr<uint64_t> EtcdBackend::Commit(const StoredConfig& base, const StoredConfig& next,
                                             const AuditRecord& audit) {
  const std::string id = RandomHex(8);
  // The refs of what stays: head as read, when it is the base.
  const bool head_is_base = head_version_ == base.version && head_.has_value();
  etcd_store_json::StoreHead head;
  head.commit = id;
  std::vector<std::string> written, replaced;
  for (size_t k = 0; k < kKinds.size(); ++k) {
    const std::string content = KindContent(next, k);
    if (head_is_base && content == KindContent(base, k)) {
      head.parts[k] = head_->parts[k];
      continue;
    }
    if (head_is_base && head_->parts[k].chunks > 0) replaced.push_back(head_->parts[k].blob);
    const std::string blob = Cat(id, "-", kKinds[k]);
    size_t chunks = 0;
    for (size_t off = 0; off < content.size(); off += kEtcdChunkBytes, ++chunks) {
      char index[16];
      std::snprintf(index, sizeof(index), "%06zu", chunks);
      // A chunk is written under a key of its own: writing it again is
      // harmless, so a member that went away mid-write is retried.
      auto put = client_.Put(BlobPrefix(blob) + index, content.substr(off, kEtcdChunkBytes));
      for (int attempt = 1; attempt < kAttempts && !put.ok() && IsTransient(put.status()); ++attempt)
        put = client_.Put(BlobPrefix(blob) + index, content.substr(off, kEtcdChunkBytes));
      if (!put.ok()) {
        written.push_back(blob);
        DeleteBlobs(written);
        return absl::Status(put.status().code(),
                            Cat("etcd: cannot write the change: ", ToStd(put.status().message())));
      }
    }
    if (chunks > 0) written.push_back(blob);
    head.parts[k] = etcd_store_json::BlobRef{blob, chunks, content.size(), ContentDigest(content)};
  }
  etcd::Compare at_base;
  at_base.key = Key("head");
  if (base.version == 0) {
    at_base.target = etcd::Compare::Target::kVersion;
    at_base.number = 0;
  } else {
    at_base.target = etcd::Compare::Target::kMod;
    at_base.number = static_cast<int64_t>(base.version);
  }
  etcd::Compare same_origin;
  same_origin.key = Key("origin");
  same_origin.target = etcd::Compare::Target::kValue;
  same_origin.value = base.origin;
  const std::string head_text = etcd_store_json::HeadJson(head).dump();
  char audit_key[64];
  std::snprintf(audit_key, sizeof(audit_key), "audit/%020lld-", static_cast<long long>(NowNanos()));
  const Json audit_json{
      {"time", audit.time}, {"actor", audit.actor}, {"action", audit.action}, {"detail", audit.detail}};
  std::vector<etcd::Op> ops = {etcd::Op::Put(Key("head"), head_text),
                               etcd::Op::Put(Key(Cat(audit_key, id)), audit_json.dump())};
  for (const std::string& b : replaced)
    ops.push_back(etcd::Op::Delete(BlobPrefix(b), etcd::PrefixEnd(BlobPrefix(b))));
  auto r = client_.Txn({at_base, same_origin}, ops, {});
  uint64_t version = 0;
  if (r.ok() && r->succeeded) {
    version = static_cast<uint64_t>(r->revision);
  } else if (r.ok()) {
    DeleteBlobs(written);
    return absl::AbortedError("etcd: the store's head moved since this instance read it");
  } else {
    // The member may have applied it before the answer was lost: head says.
    auto now = client_.Range(Key("head"));
    for (int attempt = 1; attempt < kAttempts && !now.ok() && IsTransient(now.status()); ++attempt)
      now = client_.Range(Key("head"));
    if (now.ok() && !now->kvs.empty()) {
      auto committed = etcd_store_json::HeadFromJson(now->kvs[0].value);
      if (committed.ok() && committed->commit == id)
        version = static_cast<uint64_t>(now->kvs[0].mod_revision);
    }
    if (version == 0) {
      if (now.ok()) DeleteBlobs(written);
      return absl::Status(r.status().code(),
                          Cat("etcd: the change was not committed: ", ToStd(r.status().message())));
    }
  }
  head_ = std::move(head);
  head_version_ = version;
  return version;
}

void EtcdBackend::SweepBlobs() {
  auto r = client_.Txn(
      {}, {etcd::Op::Range(Key("head")), etcd::Op::Range(Key("blob/"), etcd::PrefixEnd(Key("blob/")))}, {});
  if (!r.ok() || r->responses.size() != 2) return;
  // Only keys-only is needed; the sweep runs once at start.
  std::vector<std::string> named;
  int64_t head_rev = 0;
  if (!r->responses[0].kvs.empty()) {
    head_rev = r->responses[0].kvs[0].mod_revision;
    auto head = etcd_store_json::HeadFromJson(r->responses[0].kvs[0].value);
    if (!head.ok()) return;  // nothing is swept from a store this instance cannot read
    for (const etcd_store_json::BlobRef& ref : head->parts) named.push_back(ref.blob);
  }
  std::vector<std::string> stale;
  const std::string prefix = Key("blob/");
  for (const etcd::KeyValue& kv : r->responses[1].kvs) {
    const std::string rest = kv.key.substr(prefix.size());
    const std::string blob = rest.substr(0, rest.find('/'));
    // A blob newer than head may be a commit under way on another instance.
    if (kv.mod_revision >= head_rev || std::find(named.begin(), named.end(), blob) != named.end()) continue;
    if (std::find(stale.begin(), stale.end(), blob) == stale.end()) stale.push_back(blob);
  }
  if (!stale.empty()) {
    common::LogInfo("store", "etcd: deleting ", stale.size(), " blobs of commits that did not complete");
    DeleteBlobs(stale);
  }
}

absl::StatusOr<std::vector<NodeRecord>> EtcdBackend::Nodes() {
  const std::string prefix = Key("nodes/");
  auto r = client_.Range(prefix, etcd::PrefixEnd(prefix));
  if (!r.ok()) return r.status();
  std::vector<NodeRecord> out;
  for (const etcd::KeyValue& kv : r->kvs) {
    if (auto rec = NodeFromJson(kv.value)) out.push_back(*std::move(rec));
  }
  return out;
}

absl::Status EtcdBackend::ForgetNode(const std::string& node_id) {
  writer_.Forget(node_id);
  auto r = client_.Delete(Key(Cat("nodes/", node_id)));
  if (!r.ok()) return r.status();
  if (*r == 0) return absl::NotFoundError(Cat("no node '", node_id, "'"));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<AuditRecord>> EtcdBackend::Audit(int limit) {
  const std::string prefix = Key("audit/");
  auto r = client_.Range(prefix, etcd::PrefixEnd(prefix));
  if (!r.ok()) return r.status();
  std::vector<AuditRecord> out;
  const size_t first =
      r->kvs.size() > static_cast<size_t>(limit) ? r->kvs.size() - static_cast<size_t>(limit) : 0;
  for (size_t i = first; i < r->kvs.size(); ++i) {
    const etcd::KeyValue& kv = r->kvs[i];
    try {
      const Json j = Json::parse(kv.value);
      AuditRecord a;
      a.id = kv.mod_revision;
      a.version = static_cast<uint64_t>(kv.mod_revision);
      a.time = j.at("time").get<int64_t>();
      a.actor = j.at("actor").get<std::string>();
      a.action = j.at("action").get<std::string>();
      a.detail = j.at("detail").get<std::string>();
      out.push_back(std::move(a));
    } catch (const Json::exception&) {
      continue;  // not ours
    }
  }
  return out;
}

absl::StatusOr<std::vector<uint64_t>> EtcdBackend::VersionsAfter(uint64_t version, int limit) {
  const std::string prefix = Key("audit/");
  auto r = client_.Range(prefix, etcd::PrefixEnd(prefix), 0, /*keys_only=*/true);
  if (!r.ok()) return r.status();
  std::vector<uint64_t> out;
  for (const etcd::KeyValue& kv : r->kvs) {
    if (static_cast<uint64_t>(kv.mod_revision) > version)
      out.push_back(static_cast<uint64_t>(kv.mod_revision));
  }
  std::sort(out.begin(), out.end());
  if (out.size() > static_cast<size_t>(limit)) out.resize(static_cast<size_t>(limit));
  return out;
}

void EtcdBackend::StartWatch(int64_t from) {
  if (!watcher_) {
    watcher_ = std::make_unique<etcd::Watcher>(
        options_.client, Key("head"), "",
        [this](const std::vector<etcd::WatchEvent>&, int64_t) {
          if (changed_) changed_();
        },
        [this](int64_t compact_revision) {
          common::LogWarning("store", "etcd watch: the revisions up to ", compact_revision,
                             " were compacted before this instance saw them: reading the store again");
          rewatch_.store(true);
          if (changed_) changed_();
        },
        [](const std::string& message) { common::LogWarning("store", "etcd watch: ", message); });
  }
  watcher_->Start(from);
}

void EtcdBackend::OnExternalChange(std::function<void()> changed) {
  changed_ = std::move(changed);
  StartWatch(read_revision_ + 1);
}

}  // namespace

absl::StatusOr<std::unique_ptr<StoreBackend>> OpenEtcdBackend(const EtcdStoreOptions& options) {
  if (options.client.endpoints.empty()) return absl::InvalidArgumentError("etcd: no endpoints");
  auto b = std::make_unique<EtcdBackend>(options);
  if (absl::Status st = b->Init(); !st.ok()) return st;
  return b;
}

}  // namespace weir::mgmt
