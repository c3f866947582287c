// A client of etcd v3 for weir-mgmt's etcd store (docs/mgmt.md#etcd): the
// KV calls (range, put, delete, txn, compaction) and watches, through etcd's
// JSON gateway (/v3/...) with libcurl. Keys and values are arbitrary bytes
// (base64 on the wire); revisions are etcd's int64 revisions.
//
// Endpoints: several members of one cluster ("http://127.0.0.1:2379" or
// "https://..."). A call goes to the member that answered last; when a
// member cannot be reached (refused, reset, timed out, or it answers that it
// has no leader), the call moves on to the next member, each member tried
// once per call. A write (put, delete, a txn that writes, compaction) that
// may already have reached a member (reset or timed out after it was sent,
// or etcd's "request timed out") is not sent to another: it fails Unknown.
// etcd's own refusals (a compacted revision, a request too large) are
// returned as they are, never retried elsewhere.
//
// A Client is used by one thread at a time (it keeps its connections open
// between calls). A Watcher runs its own thread.
//
// Control plane only.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace weir::mgmt::etcd {

struct ClientOptions {
  std::vector<std::string> endpoints;  // at least one; "http://host:port" or "https://host:port"
  // One member's answer to one call; the whole call may take endpoints x this.
  std::chrono::milliseconds request_timeout{3000};
  std::chrono::milliseconds connect_timeout{1000};
  // TLS to etcd (https endpoints): the CA that signed the members'
  // certificates ("" the system's), and this client's certificate and key
  // for etcd's client-certificate authentication ("" none).
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
};

struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;  // how many times the key was written since it was created
  friend bool operator==(const KeyValue&, const KeyValue&) = default;
};

// One comparison of a transaction (etcd's Compare).
struct Compare {
  enum class Target { kVersion, kCreate, kMod, kValue };
  enum class Result { kEqual, kGreater, kLess, kNotEqual };
  std::string key;
  Target target = Target::kMod;
  Result result = Result::kEqual;
  int64_t number = 0;  // kVersion, kCreate, kMod
  std::string value;   // kValue
};

// One operation of a transaction.
struct Op {
  enum class Kind { kRange, kPut, kDelete };
  Kind kind = Kind::kRange;
  std::string key;
  // kRange / kDelete: the end of the range (exclusive); "" the key alone.
  // PrefixEnd(key) makes it every key starting with `key`.
  std::string range_end;
  std::string value;       // kPut
  bool keys_only = false;  // kRange
  int64_t limit = 0;       // kRange; 0 no limit

  static Op Range(std::string key, std::string range_end = {});
  static Op Put(std::string key, std::string value);
  static Op Delete(std::string key, std::string range_end = {});
};

struct RangeResult {
  int64_t revision = 0;  // the store's revision when it was read
  std::vector<KeyValue> kvs;
  int64_t count = 0;  // keys in the range (kvs may hold fewer when limited)
  friend bool operator==(const RangeResult&, const RangeResult&) = default;
};

struct OpResult {
  std::vector<KeyValue> kvs;  // a range's
  int64_t count = 0;          // a range's
  int64_t deleted = 0;        // a delete's
  friend bool operator==(const OpResult&, const OpResult&) = default;
};

struct TxnResult {
  bool succeeded = false;           // the comparisons held: `success` ran (else `failure`)
  int64_t revision = 0;             // the store's revision after the transaction
  std::vector<OpResult> responses;  // one per operation that ran, in order
  friend bool operator==(const TxnResult&, const TxnResult&) = default;
};

// The end of the range of every key starting with `prefix` (etcd's rule:
// the prefix with its last byte below 0xff incremented, trailing 0xff
// bytes dropped; "\0" for an empty or all-0xff prefix: every key).
std::string PrefixEnd(std::string_view prefix);

// How a failure reads: the member (endpoint) and what went wrong; etcd's
// message when etcd refused. A compacted revision is OutOfRange; a failed
// call that reached no member is Unavailable (as is a read that timed out
// on every member); a transport failure after the request was sent, when the
// member may have applied it, is Unknown (the caller must find out, e.g. by
// reading back, before it repeats a write). Other refusals carry etcd's gRPC
// code (absl's codes are the same numbers): InvalidArgument for a request
// too large, OutOfRange also for a future revision.
class Client {
 public:
  explicit Client(ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // `revision` 0: the latest. An empty `key` with a `range_end` starts at
  // the lowest key (etcd has no empty key), so Range("", PrefixEnd(""))
  // reads every key; the same holds for Delete and Op::Range/Op::Delete.
  absl::StatusOr<RangeResult> Range(const std::string& key, const std::string& range_end = {},
                                    int64_t revision = 0, bool keys_only = false, int64_t limit = 0);
  // Returns the revision of the write.
  absl::StatusOr<int64_t> Put(const std::string& key, const std::string& value);
  // Returns how many keys were deleted.
  absl::StatusOr<int64_t> Delete(const std::string& key, const std::string& range_end = {});
  absl::StatusOr<TxnResult> Txn(const std::vector<Compare>& compare, const std::vector<Op>& success,
                                const std::vector<Op>& failure);
  // Compacts the history up to `revision` (tests and maintenance).
  absl::Status Compact(int64_t revision);

  // The endpoint the last call went to ("" before the first).
  std::string current_endpoint() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct WatchEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  KeyValue kv;  // a delete's: the key and mod_revision (the deletion's revision)
  friend bool operator==(const WatchEvent&, const WatchEvent&) = default;
};

// Watches [key, range_end) from `start_revision` on, on its own thread, and
// follows the stream across members: when the member goes away, it watches
// again on the next member from the revision after the last event it
// delivered (members tried in turn, a pause of 500 ms after a full round in
// which no member could be watched).
//
// `on_events` gets each batch of events in revision order (one revision's
// events together). `on_compacted` is called when the revision to resume
// from was compacted: events were lost, the caller must read the whole range
// again; the watcher then stops (Start it again from the revision read).
// `on_error` reports each failure to reach a member. All three run on the
// watcher's thread and must not call Start() or Stop() (Stop() joins that
// thread); a caller that restarts after on_compacted does so from its own
// thread.
//
// Start() and Stop() are called from one thread at a time.
class Watcher {
 public:
  using EventsFn = std::function<void(const std::vector<WatchEvent>& events, int64_t revision)>;
  using CompactedFn = std::function<void(int64_t compact_revision)>;
  // `on_error` (may be empty) is told each failure to reach a member, for the log.
  using ErrorFn = std::function<void(const std::string& message)>;

  Watcher(ClientOptions options, std::string key, std::string range_end, EventsFn on_events,
          CompactedFn on_compacted, ErrorFn on_error = {});
  ~Watcher();  // Stop()
  Watcher(const Watcher&) = delete;
  Watcher& operator=(const Watcher&) = delete;

  // Starts watching from `start_revision` (> 0). Stops a running watch first.
  void Start(int64_t start_revision);
  // Returns once the thread has ended (within about 200 ms, also when the
  // stream is idle or the watcher is pausing between rounds).
  void Stop();
  // The revision after the last event delivered (where a resumed watch starts).
  int64_t next_revision() const { return next_revision_.load(); }

 private:
  void Run();

  // libcurl's handles: Stop() wakes the thread through them.
  struct Impl;
  std::unique_ptr<Impl> impl_;
  ClientOptions options_;
  std::string key_, range_end_;
  EventsFn on_events_;
  CompactedFn on_compacted_;
  ErrorFn on_error_;
  std::atomic<bool> running_{false};
  std::atomic<int64_t> next_revision_{0};
  std::thread thread_;
};

}  // namespace weir::mgmt::etcd
