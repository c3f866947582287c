#include "weir/mgmt/etcd_client.h"

#include <curl/curl.h>

#include <mutex>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "etcd_json.h"

namespace weir::mgmt::etcd {

namespace {

using Json = nlohmann::json;

// The pause after a full round of members could not be watched.
constexpr auto kWatchRetryPause = std::chrono::milliseconds(500);
// The longest the watcher sleeps in libcurl before it looks at its stop
// flag again; Stop() also wakes it at once (curl_multi_wakeup).
constexpr int kWatchPollMs = 100;
// gRPC's status code, which etcd's gateway puts in "code"; absl's codes
// are the same numbers.
constexpr int kGrpcUnavailable = 14;

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string TrimSlash(std::string endpoint) {
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  return endpoint;
}

std::string B64(std::string_view bytes) {
  // absl's string_view is its own type in Debian's build.
  return absl::Base64Escape(absl::string_view(bytes.data(), bytes.size()));
}

// etcd has no empty key: a range from "" starts at the lowest key, "\0"
// (as clientv3's WithPrefix("") does).
std::string RangeKey(const std::string& key, const std::string& range_end) {
  return key.empty() && !range_end.empty() ? std::string(1, '\0') : key;
}

Json RangeRequest(const std::string& key, const std::string& range_end, int64_t revision, bool keys_only,
                  int64_t limit) {
  Json r = {{"key", B64(RangeKey(key, range_end))}};
  if (!range_end.empty()) r["range_end"] = B64(range_end);
  if (revision != 0) r["revision"] = std::to_string(revision);
  if (keys_only) r["keys_only"] = true;
  if (limit != 0) r["limit"] = std::to_string(limit);
  return r;
}

Json DeleteRequest(const std::string& key, const std::string& range_end) {
  Json r = {{"key", B64(RangeKey(key, range_end))}};
  if (!range_end.empty()) r["range_end"] = B64(range_end);
  return r;
}

Json OpRequest(const Op& op) {
  switch (op.kind) {
    case Op::Kind::kRange:
      return {{"request_range", RangeRequest(op.key, op.range_end, 0, op.keys_only, op.limit)}};
    case Op::Kind::kPut:
      return {{"request_put", {{"key", B64(op.key)}, {"value", B64(op.value)}}}};
    case Op::Kind::kDelete:
      return {{"request_delete_range", DeleteRequest(op.key, op.range_end)}};
  }
  return Json::object();
}

Json CompareRequest(const Compare& c) {
  static constexpr const char* kTargets[] = {"VERSION", "CREATE", "MOD", "VALUE"};
  static constexpr const char* kResults[] = {"EQUAL", "GREATER", "LESS", "NOT_EQUAL"};
  Json r = {{"key", B64(c.key)},
            {"target", kTargets[static_cast<int>(c.target)]},
            {"result", kResults[static_cast<int>(c.result)]}};
  switch (c.target) {
    case Compare::Target::kVersion:
      r["version"] = std::to_string(c.number);
      break;
    case Compare::Target::kCreate:
      r["create_revision"] = std::to_string(c.number);
      break;
    case Compare::Target::kMod:
      r["mod_revision"] = std::to_string(c.number);
      break;
    case Compare::Target::kValue:
      r["value"] = B64(c.value);
      break;
  }
  return r;
}

// libcurl's write callback: appends to a std::string, up to kMaxAnswerBytes
// (returning less than it was given makes libcurl fail the transfer).
size_t AppendBody(char* data, size_t size, size_t count, void* user) {
  auto* out = static_cast<std::string*>(user);
  size_t n = size * count;
  if (out->size() + n > kMaxAnswerBytes) return 0;
  out->append(data, n);
  return n;
}

// The options every request to etcd shares.
void SetCommonOptions(CURL* curl, const ClientOptions& options, curl_slist* headers) {
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options.connect_timeout.count()));
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(curl, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  if (!options.ca_file.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, options.ca_file.c_str());
  if (!options.cert_file.empty()) curl_easy_setopt(curl, CURLOPT_SSLCERT, options.cert_file.c_str());
  if (!options.key_file.empty()) curl_easy_setopt(curl, CURLOPT_SSLKEY, options.key_file.c_str());
}

curl_slist* JsonHeaders() {
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  // No "Expect: 100-continue" round trip before a large body (a 1 MiB value).
  return curl_slist_append(headers, "Expect:");
}

// The Unavailable refusals of etcd's after which a write may still be
// committed ("etcdserver: request timed out", also "... possibly due to
// previous leader failure"): only "no leader" and its kin are certain not
// to have been applied.
bool MayHaveApplied(const std::string& message) { return absl::StrContains(message, "timed out"); }

}  // namespace

std::string PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

Op Op::Range(std::string key, std::string range_end) {
  Op op;
  op.kind = Kind::kRange;
  op.key = std::move(key);
  op.range_end = std::move(range_end);
  return op;
}

Op Op::Put(std::string key, std::string value) {
  Op op;
  op.kind = Kind::kPut;
  op.key = std::move(key);
  op.value = std::move(value);
  return op;
}

Op Op::Delete(std::string key, std::string range_end) {
  Op op;
  op.kind = Kind::kDelete;
  op.key = std::move(key);
  op.range_end = std::move(range_end);
  return op;
}

// ---------------------------------------------------------------- Client

struct Client::Impl {
  ClientOptions options;
  CURL* curl = nullptr;
  curl_slist* headers = nullptr;
  size_t preferred = 0;  // the member that answered last
  std::string last_endpoint;
  std::string body;

  // POSTs `request` to `path` (e.g. "/v3/kv/range") of the members in turn
  // until one answers 200, and leaves its answer in `body`. `write`: the
  // call changes the store, so once it may have reached a member it is not
  // sent to another.
  absl::Status Call(const char* path, const Json& request, bool write);
  // The error for a 200 answer (in `body`) that its parser could not read:
  // a write was applied, and what etcd said of it is lost (Unknown).
  absl::Status Unreadable(const absl::Status& parse_error, bool write) const {
    auto what = absl::StrCat("etcd ", last_endpoint, ": ", parse_error.message());
    return write ? absl::UnknownError(what) : absl::InternalError(what);
  }
};

Client::Client(ClientOptions options) : impl_(std::make_unique<Impl>()) {
  GlobalInit();
  for (auto& e : options.endpoints) e = TrimSlash(std::move(e));
  impl_->options = std::move(options);
  impl_->curl = curl_easy_init();
  impl_->headers = JsonHeaders();
  if (impl_->curl == nullptr) return;
  SetCommonOptions(impl_->curl, impl_->options, impl_->headers);
  curl_easy_setopt(impl_->curl, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(impl_->options.request_timeout.count()));
  curl_easy_setopt(impl_->curl, CURLOPT_WRITEFUNCTION, &AppendBody);
  curl_easy_setopt(impl_->curl, CURLOPT_WRITEDATA, &impl_->body);
}

Client::~Client() {
  if (impl_->curl != nullptr) curl_easy_cleanup(impl_->curl);
  curl_slist_free_all(impl_->headers);
}

std::string Client::current_endpoint() const { return impl_->last_endpoint; }

absl::Status Client::Impl::Call(const char* path, const Json& request, bool write) {
  if (options.endpoints.empty()) return absl::InvalidArgumentError("etcd: no endpoints configured");
  if (curl == nullptr) return absl::InternalError("etcd: curl_easy_init failed");
  const std::string payload = request.dump();
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, payload.data());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(payload.size()));

  const size_t n = options.endpoints.size();
  std::vector<std::string> failures;
  for (size_t i = 0; i < n; ++i) {
    const size_t index = (preferred + i) % n;
    const std::string& endpoint = options.endpoints[index];
    last_endpoint = endpoint;
    const std::string url = absl::StrCat(endpoint, path);
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    body.clear();
    char error_buffer[CURL_ERROR_SIZE] = {};
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error_buffer);
    CURLcode rc = curl_easy_perform(curl);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, nullptr);

    if (rc != CURLE_OK) {
      std::string what = error_buffer[0] != '\0' ? error_buffer : curl_easy_strerror(rc);
      if (rc == CURLE_WRITE_ERROR) {
        return absl::ResourceExhaustedError(
            absl::StrCat("etcd ", endpoint, ": answer larger than ", kMaxAnswerBytes, " bytes"));
      }
      // Whether any of the request left: a failed connect (refused,
      // timed out, TLS handshake) sent nothing, so any member may take it.
      long request_bytes = 0;
      curl_easy_getinfo(curl, CURLINFO_REQUEST_SIZE, &request_bytes);
      const bool sent = request_bytes > 0 && rc != CURLE_COULDNT_CONNECT &&
                        rc != CURLE_COULDNT_RESOLVE_HOST && rc != CURLE_SSL_CONNECT_ERROR &&
                        rc != CURLE_PEER_FAILED_VERIFICATION;
      if (sent && write) {
        return absl::UnknownError(absl::StrCat("etcd ", endpoint, ": ", what,
                                               " after the request was sent; it may have been applied"));
      }
      failures.push_back(absl::StrCat(endpoint, ": ", what));
      continue;
    }

    long http_status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &http_status);
    if (http_status == 200) {
      preferred = index;
      return absl::OkStatus();
    }
    ErrorBody error = ParseErrorBody(body);
    if (error.message.empty()) error.message = absl::StrCat("HTTP status ", http_status);
    // Unavailable: the member has no leader, is stopping or overloaded
    // (or a proxy in front of it cannot reach it); another may serve.
    const bool unavailable = http_status == 503 || error.code == kGrpcUnavailable ||
                             (error.code == 0 && (http_status == 502 || http_status == 504));
    if (unavailable) {
      if (write && MayHaveApplied(error.message)) {
        return absl::UnknownError(absl::StrCat("etcd ", endpoint, ": ", error.message));
      }
      failures.push_back(absl::StrCat(endpoint, ": ", error.message));
      continue;
    }
    // etcd refused (a compacted revision is OUT_OF_RANGE, a request too
    // large INVALID_ARGUMENT): the same everywhere, so returned as it is.
    preferred = index;
    return absl::Status(error.status_code(), absl::StrCat("etcd ", endpoint, ": ", error.message));
  }
  return absl::UnavailableError(absl::StrCat("etcd: no member answered: ", absl::StrJoin(failures, "; ")));
}

absl::StatusOr<RangeResult> Client::Range(const std::string& key, const std::string& range_end,
                                          int64_t revision, bool keys_only, int64_t limit) {
  const bool write = false;
  if (absl::Status st =
          impl_->Call("/v3/kv/range", RangeRequest(key, range_end, revision, keys_only, limit), write);
      !st.ok())
    return st;
  auto result = ParseRangeReply(impl_->body);
  if (!result.ok()) return impl_->Unreadable(result.status(), write);
  return result;
}

absl::StatusOr<int64_t> Client::Put(const std::string& key, const std::string& value) {
  const bool write = true;
  if (absl::Status st = impl_->Call("/v3/kv/put", {{"key", B64(key)}, {"value", B64(value)}}, write);
      !st.ok())
    return st;
  auto revision = ParsePutReply(impl_->body);
  if (!revision.ok()) return impl_->Unreadable(revision.status(), write);
  return revision;
}

absl::StatusOr<int64_t> Client::Delete(const std::string& key, const std::string& range_end) {
  const bool write = true;
  if (absl::Status st = impl_->Call("/v3/kv/deleterange", DeleteRequest(key, range_end), write); !st.ok())
    return st;
  auto deleted = ParseDeleteReply(impl_->body);
  if (!deleted.ok()) return impl_->Unreadable(deleted.status(), write);
  return deleted;
}

absl::StatusOr<TxnResult> Client::Txn(const std::vector<Compare>& compare, const std::vector<Op>& success,
                                      const std::vector<Op>& failure) {
  Json request = Json::object();
  bool write = false;
  auto ops = [&write](const std::vector<Op>& list) {
    Json a = Json::array();
    for (const Op& op : list) {
      write = write || op.kind != Op::Kind::kRange;
      a.push_back(OpRequest(op));
    }
    return a;
  };
  Json c = Json::array();
  for (const Compare& each : compare) c.push_back(CompareRequest(each));
  request["compare"] = std::move(c);
  request["success"] = ops(success);
  request["failure"] = ops(failure);

  if (absl::Status st = impl_->Call("/v3/kv/txn", request, write); !st.ok()) return st;
  auto result = ParseTxnReply(impl_->body);
  if (!result.ok()) return impl_->Unreadable(result.status(), write);
  return result;
}

absl::Status Client::Compact(int64_t revision) {
  const bool write = true;
  if (absl::Status st = impl_->Call("/v3/kv/compaction", {{"revision", std::to_string(revision)}}, write);
      !st.ok())
    return st;
  absl::Status read = ParseCompactReply(impl_->body);
  return read.ok() ? read : impl_->Unreadable(read, write);
}

// ---------------------------------------------------------------- Watcher

struct Watcher::Impl {
  CURLM* multi = nullptr;
};

namespace {

// One watch stream's state, filled by libcurl's callbacks on the watcher's
// thread and read by the same thread between curl_multi_perform calls.
struct Stream {
  const std::atomic<bool>* running = nullptr;
  WatchStreamSplitter splitter;  // the answer's bytes not yet taken as objects
};

// Returning less than it was given makes libcurl fail the transfer.
size_t AppendStream(char* data, size_t size, size_t count, void* user) {
  const size_t n = size * count;
  return static_cast<Stream*>(user)->splitter.Feed(std::string_view(data, n)) ? n : 0;
}

// Aborts the transfer (libcurl calls it at least every kWatchPollMs while
// the stream is open) once Stop() was called.
int StopCheck(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<Stream*>(user)->running->load() ? 0 : 1;
}

}  // namespace

Watcher::Watcher(ClientOptions options, std::string key, std::string range_end, EventsFn on_events,
                 CompactedFn on_compacted, ErrorFn on_error)
    : impl_(std::make_unique<Impl>()),
      options_(std::move(options)),
      key_(std::move(key)),
      range_end_(std::move(range_end)),
      on_events_(std::move(on_events)),
      on_compacted_(std::move(on_compacted)),
      on_error_(std::move(on_error)) {
  GlobalInit();
  for (auto& e : options_.endpoints) e = TrimSlash(std::move(e));
  impl_->multi = curl_multi_init();
}

Watcher::~Watcher() {
  Stop();
  if (impl_->multi != nullptr) curl_multi_cleanup(impl_->multi);
}

void Watcher::Start(int64_t start_revision) {
  Stop();
  next_revision_.store(start_revision);
  running_.store(true);
  thread_ = std::thread(&Watcher::Run, this);
}

void Watcher::Stop() {
  running_.store(false);
  if (impl_->multi != nullptr) curl_multi_wakeup(impl_->multi);
  if (thread_.joinable()) {
    if (thread_.get_id() == std::this_thread::get_id()) return;  // from a callback: it ends on its own
    thread_.join();
  }
}

void Watcher::Run() {
  auto report = [this](const std::string& message) {
    if (on_error_) on_error_(message);
  };
  if (options_.endpoints.empty() || impl_->multi == nullptr) {
    report(options_.endpoints.empty() ? "etcd watch: no endpoints configured"
                                      : "etcd watch: curl_multi_init failed");
    return;
  }
  CURL* curl = curl_easy_init();
  curl_slist* headers = JsonHeaders();
  // etcd's require-leader metadata: a member cut off from its cluster ends
  // the stream instead of keeping it open and silent.
  headers = curl_slist_append(headers, "Grpc-Metadata-hasleader: true");
  Stream stream;
  stream.running = &running_;
  if (curl != nullptr) {
    SetCommonOptions(curl, options_, headers);
    // No overall timeout: a watch is idle for hours. A dead peer is found
    // by TCP keepalive instead.
    curl_easy_setopt(curl, CURLOPT_TCP_KEEPIDLE, 5L);
    curl_easy_setopt(curl, CURLOPT_TCP_KEEPINTVL, 2L);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &AppendStream);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &stream);
    curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, &StopCheck);
    curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &stream);
  } else {
    report("etcd watch: curl_easy_init failed");
    running_.store(false);
  }

  // Sleeps up to `d`; Stop() wakes it.
  auto pause = [this](std::chrono::milliseconds d) {
    const auto until = std::chrono::steady_clock::now() + d;
    while (running_.load()) {
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      curl_multi_poll(impl_->multi, nullptr, 0, static_cast<int>(left.count()), nullptr);
    }
  };

  const size_t n = options_.endpoints.size();
  size_t member = 0;
  size_t failed_in_row = 0;  // members that could not be watched since the last stream was created
  while (running_.load()) {
    const std::string& endpoint = options_.endpoints[member];
    Json create = {{"key", B64(RangeKey(key_, range_end_))},
                   {"start_revision", std::to_string(next_revision_.load())},
                   {"progress_notify", true}};
    if (!range_end_.empty()) create["range_end"] = B64(range_end_);
    const std::string payload = Json{{"create_request", std::move(create)}}.dump();
    const std::string url = absl::StrCat(endpoint, "/v3/watch");
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, payload.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(payload.size()));
    stream.splitter.Clear();

    bool created = false;
    bool stop_stream = false;
    int64_t compacted_at = 0;
    std::string failure;

    // One object of the stream: {"result": WatchResponse} or {"error": ...}.
    auto handle_object = [&](std::string_view object) {
      WatchResponse response = ParseWatchObject(object);
      created = created || response.created;
      for (const WatchBatch& batch : response.batches) {
        // A revision delivered before (a resumed watch starts at one
        // that was) is not delivered again.
        if (batch.revision < next_revision_.load()) continue;
        if (on_events_) on_events_(batch.events, batch.revision);
        next_revision_.store(batch.revision + 1);
      }
      if (response.compact_revision > 0) {
        compacted_at = response.compact_revision;
        stop_stream = true;
      } else if (!response.error.ok()) {
        failure = std::string(response.error.message());
        stop_stream = true;
      }
    };

    CURLcode rc = CURLE_OK;
    bool done = false;
    curl_multi_add_handle(impl_->multi, curl);
    while (!done && !stop_stream && running_.load()) {
      int still_running = 0;
      curl_multi_perform(impl_->multi, &still_running);
      int queued = 0;
      while (CURLMsg* msg = curl_multi_info_read(impl_->multi, &queued)) {
        if (msg->msg == CURLMSG_DONE) {
          done = true;
          rc = msg->data.result;
        }
      }
      long http_status = 0;
      curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &http_status);
      if (http_status == 200) {
        for (std::string object; !stop_stream && stream.splitter.Next(object);) handle_object(object);
      }
      if (!done && !stop_stream && running_.load()) {
        curl_multi_poll(impl_->multi, nullptr, 0, kWatchPollMs, nullptr);
      }
    }
    long http_status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &http_status);
    curl_multi_remove_handle(impl_->multi, curl);
    // The gateway ends a stream it closes (the member stopping) with an
    // {"error": ...} object that has no newline after it.
    std::string rest;
    if (done && rc == CURLE_OK && http_status == 200 && !stop_stream && stream.splitter.Finish(rest)) {
      handle_object(rest);
    }
    if (!running_.load()) break;

    if (compacted_at > 0) {
      running_.store(false);
      if (on_compacted_) on_compacted_(compacted_at);
      break;
    }
    if (failure.empty()) {
      if (done && rc != CURLE_OK) {
        failure = rc == CURLE_WRITE_ERROR
                      ? absl::StrCat("watch answer line larger than ", kMaxAnswerBytes, " bytes")
                      : curl_easy_strerror(rc);
      } else if (http_status != 200) {
        // Not a stream: the whole answer is etcd's error body.
        std::string body;
        stream.splitter.Finish(body);
        const ErrorBody e = ParseErrorBody(body);
        failure = e.message.empty() ? absl::StrCat("HTTP status ", http_status) : e.message;
      } else {
        failure = "watch stream ended";
      }
    }
    report(absl::StrCat("etcd ", endpoint, ": ", failure));
    if (created) failed_in_row = 0;
    member = (member + 1) % n;
    if (++failed_in_row >= n) {
      failed_in_row = 0;
      pause(kWatchRetryPause);
    }
  }
  if (curl != nullptr) curl_easy_cleanup(curl);
  curl_slist_free_all(headers);
}

}  // namespace weir::mgmt::etcd
