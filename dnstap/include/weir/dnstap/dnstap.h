// dnstap (https://dnstap.info) for weir's daemons: DNS messages encoded as
// dnstap.Dnstap protobufs and written over Frame Streams to a unix socket
// or a file by libfstrm's I/O thread. docs/dnstap.md says what is tapped.
//
// The data path never waits on it: each producer thread has its own input
// queue of the I/O thread (no lock between producers), encodes on its own
// thread into a buffer that fstrm frees once written, and when its queue is
// full the message is dropped and counted.
//
// A reader on a unix socket is waited for at most `io_timeout` at a time
// (the handshake, each write): a stuck reader costs the I/O thread that
// long and is connected to again after a back-off; while no reader takes
// data the producers drop (and count) what they would send.
//
// Threading: Writer::Open and the destructor on the control thread; each
// Producer is used by exactly one thread at a time; the counters may be
// read from any thread; SetLive from any thread (a reload).
#pragma once

#include <time.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "absl/status/statusor.h"
#include "weir/common/owned_counter.h"
#include "weir/common/prometheus.h"
#include "weir/common/socket_address.h"
#include "weir/common/toml_checker.h"

struct fstrm_iothr;
struct fstrm_iothr_queue;

namespace weir::dnstap {

// Message.Type values of the dnstap schema that weir writes.
enum class MessageType : uint8_t {
  kResolverQuery = 3,
  kResolverResponse = 4,
  kClientQuery = 5,
  kClientResponse = 6,
  kForwarderQuery = 7,
  kForwarderResponse = 8,
};

enum class Protocol : uint8_t { kUdp = 1, kTcp = 2, kDot = 3, kDoh = 4 };

// One end of the exchange; family 0 leaves address and port out.
struct Endpoint {
  uint8_t family = 0;  // 4 or 6
  std::array<uint8_t, 16> bytes{};
  uint16_t port = 0;
};
// The address and port of a socket address (an unset one gives family 0).
Endpoint EndpointOf(const common::SocketAddress& a);

// What one dnstap message says. Spans point at the caller's bytes and are
// copied by Encode. A zero time (tv_sec and tv_nsec 0) is left out.
struct Message {
  MessageType type = MessageType::kClientQuery;
  Protocol protocol = Protocol::kUdp;
  Endpoint query_address;     // the initiator (the client, or weir for upstream queries)
  Endpoint response_address;  // the responder
  timespec query_time{};
  timespec response_time{};
  std::span<const uint8_t> query_message;
  std::span<const uint8_t> response_message;
  std::span<const uint8_t> query_zone;  // wire-format name
  // Dnstap.extra: free-form context (HTTPDNS: "httpdns account=NAME api=d").
  std::string_view extra;
};

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};
using EncodedPayload = std::unique_ptr<uint8_t, FreeDeleter>;

// The dnstap.Dnstap protobuf of `m` (type MESSAGE), in a malloc'ed buffer of
// *len bytes, as fstrm takes it; null when it cannot be allocated.
EncodedPayload Encode(const Message& m, std::string_view identity, std::string_view version, size_t* len);

// The wall clock, as dnstap's times are.
inline timespec Now() {
  timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return t;
}

// [dnstap] of both daemons' configs (docs/dnstap.md).
struct Options {
  std::string socket_path;     // a Frame Streams reader's unix socket
  std::string file_path;       // or a file, truncated at start
  uint32_t sample = 1;         // one query (and its response) in `sample` is tapped
  uint32_t queue_size = 1024;  // messages per producer queue, a power of two
  std::string identity;        // empty: the hostname
  std::string version;         // empty: "weir <version>"
  bool client = true;          // CLIENT_QUERY / CLIENT_RESPONSE
  bool upstream = true;        // FORWARDER_* (fastpath) / RESOLVER_* (recursor)
  bool tapping = true;         // dnstap.enabled: false keeps the output open but taps nothing
  // How long the writer waits on a socket reader: the whole handshake, and
  // each write (not a config key: the stop of the daemon waits this long).
  std::chrono::milliseconds io_timeout{1000};
  bool enabled() const { return !socket_path.empty() || !file_path.empty(); }
};

// Reads a [dnstap] table from `root` into *out when there is one; errors go
// to `c`. Paths stay as written (the caller resolves relative ones).
void ParseConfig(common::TomlChecker& c, const toml::table& root, Options* out);

// What a reload may change of a running [dnstap] (docs/dnstap.md#reload):
// `enabled` and `sample`; every other key, and adding the table, needs a
// restart. `running`/`next`: the table at start (or last reload) and in the
// re-read config, null when absent. Returns the changes that apply live
// ("dnstap sample 10", "dnstap off"; empty when none), or a
// FailedPrecondition naming each key that needs a restart (then nothing of
// the reload may be applied). A table removed turns tapping off.
struct LiveChange {
  bool tapping = true;
  uint32_t sample = 1;
  std::vector<std::string> described;
};
absl::StatusOr<LiveChange> PlanReload(const Options* running, const Options* next);

using common::OwnedCounter;

class Writer;
class ReaderLink;

// One producer thread's side of the writer: its sampling, its fstrm input
// queue, its counters.
class alignas(64) Producer {
 public:
  // Says whether the query just received is tapped (the first of every
  // `sample`); the others are counted as sampled out.
  bool Sample() {
    if (!tapping_->load(std::memory_order_relaxed)) return false;
    const uint32_t sample = sample_->load(std::memory_order_relaxed);
    if (countdown_ == 0 || countdown_ >= sample) {  // >=: the rate was lowered by a reload
      countdown_ = sample - 1;
      return true;
    }
    --countdown_;
    sampled_out_.Add();
    return false;
  }
  // Encodes `m` on this thread and queues it for the I/O thread; when no
  // reader takes data, the queue is full (or memory short) it is dropped
  // and counted.
  void Send(const Message& m);

  bool client() const { return client_; }
  bool upstream() const { return upstream_; }
  uint64_t sent() const { return sent_.Read(); }
  uint64_t dropped() const { return dropped_.Read(); }
  uint64_t sampled_out() const { return sampled_out_.Read(); }

 private:
  friend class Writer;
  fstrm_iothr* iothr_ = nullptr;
  fstrm_iothr_queue* queue_ = nullptr;
  const Writer* writer_ = nullptr;
  const std::atomic<bool>* output_ready_ = nullptr;  // the Writer's
  const std::atomic<bool>* tapping_ = nullptr;
  const std::atomic<uint32_t>* sample_ = nullptr;
  uint32_t countdown_ = 0;
  bool client_ = true;
  bool upstream_ = true;
  OwnedCounter sent_;         // handed to the I/O thread
  OwnedCounter dropped_;      // no reader took data, or its queue was full
  OwnedCounter sampled_out_;  // queries not tapped (sampling)
};

class Writer {
 public:
  // Starts the I/O thread with one input queue per producer. Fails when the
  // options cannot work: a file that cannot be created, a socket path too
  // long for a unix address. A socket nobody listens on is not an error:
  // fstrm connects when a reader appears and discards until then.
  static absl::StatusOr<std::unique_ptr<Writer>> Open(const Options& options, size_t producers);
  // Writes what the queues still hold, then closes the output (ends the
  // file, or the stream with its reader). Producers must be done.
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  size_t producers() const { return producers_.size(); }
  Producer& producer(size_t i) { return *producers_[i]; }
  const Producer& producer(size_t i) const { return *producers_[i]; }
  const std::string& identity() const { return identity_; }
  const std::string& version() const { return version_; }

  // A reload's live change: tapping on or off, one query in `sample`.
  void SetLive(bool tapping, uint32_t sample) {
    sample_.store(sample == 0 ? 1 : sample, std::memory_order_relaxed);
    tapping_.store(tapping, std::memory_order_relaxed);
  }
  bool tapping() const { return tapping_.load(std::memory_order_relaxed); }
  uint32_t sample() const { return sample_.load(std::memory_order_relaxed); }
  // A file, or a socket reader that completed the handshake.
  bool output_ready() const { return output_ready_.load(std::memory_order_acquire); }

  struct Totals {
    uint64_t sent = 0, dropped = 0, sampled_out = 0;
  };
  // The sums over producers (any thread).
  Totals totals() const;
  // weir_dnstap_messages_total{result} from totals(), for a daemon's metrics.
  void RenderMetrics(common::PrometheusWriter& w) const;

 private:
  Writer() = default;
  // Written by the link's threads and by reloads, read by every producer.
  std::atomic<bool> output_ready_{true};
  std::atomic<bool> tapping_{true};
  std::atomic<uint32_t> sample_{1};
  std::unique_ptr<ReaderLink> link_;  // a socket's; outlives iothr_
  fstrm_iothr* iothr_ = nullptr;
  std::vector<std::unique_ptr<Producer>> producers_;
  std::string identity_;
  std::string version_;
};

}  // namespace weir::dnstap
