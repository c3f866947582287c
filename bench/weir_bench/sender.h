// One sender thread of a run, whatever the transport: what it measured (the
// counters, latencies and weight shares the reporter reads) and the pieces
// every transport shares, so that a query is written, and an answer checked
// and counted, the same way over UDP, TCP, DoT and DoH.
//
// The engine picks the sender's kind once per thread (engine.cc for UDP and
// TCP, stream_engine.cc for DoT and DoH); within a thread nothing is virtual.
//
// Threading: a sender's Loop() runs on its own thread. It writes the
// measured figures (shares, c, latency, interval, handshake) with
// shares.mutex() held; the reporting thread copies them under the same
// mutex once a second.
#pragma once

#include <time.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "latency_histogram.h"
#include "options.h"
#include "query_mix.h"
#include "segment_check.h"
#include "shares.h"
#include "sources.h"
#include "weir/dns/message.h"
#include "weir/dns/wire.h"

namespace weir::bench {

inline constexpr size_t kQueryCap = 512;
inline constexpr size_t kAnswerCap = 4096;

inline uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

// "what: strerror(errno)".
std::string Errno(const char* what);

// A socket of `type` bound to `source` (any port) and connected to `server`
// (non-blocking: the connect may be in progress), so that only the server's
// answers reach it and ICMP errors are reported.
absl::StatusOr<int> ConnectedSocket(const Source& source, const common::SocketAddress& server, int type,
                                    bool nonblocking);

// The canonical key of a unique miss name: "<seq>-<thread>.miss.<zone>".
inline void MissName(uint64_t seq, uint32_t thread, const dns::NameKey& zone, dns::NameKey* out) {
  char label[40];
  const int n = std::snprintf(label, sizeof label, "%llx-%x", static_cast<unsigned long long>(seq), thread);
  out->bytes[0] = static_cast<uint8_t>(n);
  std::memcpy(out->bytes.data() + 1, label, static_cast<size_t>(n));
  std::memcpy(out->bytes.data() + 1 + n, zone.bytes.data(), zone.len);
  out->len = static_cast<uint8_t>(1 + n + zone.len);
}

// The first A or AAAA record of the answer section, if any.
inline bool FirstAddress(const dns::Message& m, common::IpAddress* out) {
  dns::Message::Iterator it = m.Records(dns::Section::kAnswer);
  dns::RrView rr;
  while (it.Next(&rr)) {
    if (rr.type == dns::type::kA && rr.rdlength == 4) {
      out->family = 4;
      std::memcpy(out->bytes.data(), m.bytes().data() + rr.rdata_offset, 4);
      return true;
    }
    if (rr.type == dns::type::kAaaa && rr.rdlength == 16) {
      *out = common::IpAddress::V6(m.bytes().data() + rr.rdata_offset);
      return true;
    }
  }
  return false;
}

// One question sent before the run (preflight, probes, warm-up).
struct Planned {
  dns::NameKey qname;
  uint16_t qtype = 1;
  QueryOptions qo;
};

// What a sender counted. The stream figures stay 0 over UDP.
struct Counters {
  uint64_t sent = 0, sent_tcp = 0, answered = 0, timeouts = 0, mismatched = 0, truncated = 0, send_errors = 0,
           tcp_errors = 0;
  uint64_t rcodes[33] = {};  // [32]: anything above 31
  // --segments-truth: answers compared with the model's, those with an
  // address the model would not give the subscriber, those with no A record.
  uint64_t segments_checked = 0, segments_misscheduled = 0, segments_unanswered = 0;

  // DoT and DoH.
  uint64_t connections_opened = 0;          // connects started
  uint64_t connect_failures = 0;            // refused, unreachable, or not connected within the timeout
  uint64_t handshakes_full = 0;             // TLS handshakes completed without resumption
  uint64_t handshakes_resumed = 0;          // ... that resumed an earlier session
  uint64_t handshake_failures = 0;          // TLS errors, verification failures, timeouts, no h2
  uint64_t connection_errors = 0;           // an open connection reset, failed or closed with answers owed
  uint64_t server_closes = 0;               // closed by the server with nothing owed
  uint64_t connections_skipped = 0;         // new-connection mode: due, but --connections were open
  uint64_t http_errors = 0;                 // DoH responses that are not a DNS answer (status, body)
  uint64_t stream_resets = 0;               // DoH streams the server reset
  std::array<uint64_t, 600> http_status{};  // DoH responses by :status ([0]: out of range)

  void Add(const Counters& o) {
    sent += o.sent;
    sent_tcp += o.sent_tcp;
    answered += o.answered;
    timeouts += o.timeouts;
    mismatched += o.mismatched;
    truncated += o.truncated;
    send_errors += o.send_errors;
    tcp_errors += o.tcp_errors;
    for (int i = 0; i < 33; ++i) rcodes[i] += o.rcodes[i];
    segments_checked += o.segments_checked;
    segments_misscheduled += o.segments_misscheduled;
    segments_unanswered += o.segments_unanswered;
    connections_opened += o.connections_opened;
    connect_failures += o.connect_failures;
    handshakes_full += o.handshakes_full;
    handshakes_resumed += o.handshakes_resumed;
    handshake_failures += o.handshake_failures;
    connection_errors += o.connection_errors;
    server_closes += o.server_closes;
    connections_skipped += o.connections_skipped;
    http_errors += o.http_errors;
    stream_resets += o.stream_resets;
    for (size_t i = 0; i < http_status.size(); ++i) http_status[i] += o.http_status[i];
  }
};

class Sender {
 public:
  virtual ~Sender() = default;
  // Opens what the thread sends on (UDP sockets; nothing for streams, which
  // connect as they go).
  virtual absl::Status Open() = 0;
  // Sends until `end` (or the count, or `stop`), then waits for the answers
  // owed up to the timeout; sets send_end_ns and done.
  virtual void Loop(uint64_t start, uint64_t end, const std::atomic<bool>& stop) = 0;

  // Set by the engine before Open().
  uint32_t index = 0;
  const Options* o = nullptr;
  const QueryMix* mix = nullptr;
  const Sources* sources = nullptr;
  const std::vector<uint8_t>* tracked = nullptr;  // per question: its answers go into the shares
  const SegmentCheck* segments = nullptr;         // --segments-truth, else null
  std::mt19937_64 rng;
  uint64_t cursor = 0;
  uint64_t miss_seq = 0;
  uint64_t count_limit = 0;  // 0: none
  dns::ParseOptions popts;

  // Guarded by shares.mutex(): what the reporter reads.
  ShareCounter shares;
  Counters c;
  LatencyHistogram latency, interval;
  LatencyHistogram handshake;  // connect to TLS established (DoT, DoH)
  // The first connection or handshake failure's reason, for the report.
  std::string first_error;

  std::thread th;
  std::atomic<bool> done{false};
  uint64_t send_end_ns = 0;

  // Writes the query of draw `d` with `id` from source `source` (its ECS
  // prefix) into `out` (kQueryCap bytes); `miss` is the unique name's
  // sequence number of a miss draw. Returns its length, 0 if it does not fit.
  size_t WriteDraw(uint16_t id, const Draw& d, uint32_t source, uint64_t miss, uint8_t* out) const {
    QueryOptions qo;
    qo.edns = d.edns;
    qo.edns_size = o->edns_size;
    qo.ecs = d.ecs ? &sources->sources()[source].ecs : nullptr;
    dns::ClientSubnet subscriber;
    if (d.subscriber) {
      subscriber = SubscriberEcs(d.subnet);
      qo.ecs = &subscriber;
    }
    qo.weight = d.weight;
    qo.weight_option_code = o->weight_option_code;
    if (d.question == kMiss) {
      dns::NameKey name;
      MissName(miss, index, mix->miss_zone(), &name);
      return WriteQuery(id, name.span(), mix->miss_qtype(), qo, out, kQueryCap);
    }
    const Question& q = mix->questions()[d.question];
    return WriteQuery(id, q.qname.span(), q.qtype, qo, out, kQueryCap);
  }

  // The question a query asked: question `question` of the mix, or the
  // miss name `miss` of this thread.
  void AskedQuestion(uint32_t question, uint64_t miss, dns::NameKey* qname, uint16_t* qtype) const {
    if (question == kMiss) {
      MissName(miss, index, mix->miss_zone(), qname);
      *qtype = mix->miss_qtype();
    } else {
      *qname = mix->questions()[question].qname;
      *qtype = mix->questions()[question].qtype;
    }
  }

  // Whether `qname`/`qtype` (of an answer) is the question the query asked.
  bool SameQuestion(const dns::NameKey& qname, uint16_t qtype, uint32_t question, uint64_t miss) const {
    if (question == kMiss) {
      dns::NameKey name;
      MissName(miss, index, mix->miss_zone(), &name);
      return qname == name && qtype == mix->miss_qtype();
    }
    const Question& q = mix->questions()[question];
    return qname == q.qname && qtype == q.qtype;
  }

  // Counts one answer that answers its query: rcode, TC, latency, and for a
  // tracked question (not asked with the weight option) its first address
  // in the city's shares. `first_address(IpAddress*)` is called only then.
  template <class FirstAddressFn>
  void CountAnswer(uint16_t rcode, bool tc, uint64_t latency_ns, uint32_t question, bool weight,
                   uint32_t city, FirstAddressFn&& first_address) {
    ++c.answered;
    ++c.rcodes[rcode < 32 ? rcode : 32];
    if (tc) ++c.truncated;
    latency.Record(latency_ns);
    interval.Record(latency_ns);
    if (question != kMiss && (*tracked)[question] && !weight && rcode == 0) {
      common::IpAddress a;
      if (first_address(&a)) shares.Count(question, city, a);
    }
  }

  // --segments-truth: checks the answer `m` to `question`, asked for
  // subscriber `subnet`, against the model and counts the verdict.
  void CheckSegments(uint32_t question, uint32_t subnet, const dns::Message& m) {
    if (segments == nullptr || question == kMiss || !segments->Covers(question)) return;
    switch (segments->Check(question, subnet, m)) {
      case SegmentCheck::Verdict::kRight:
        ++c.segments_checked;
        break;
      case SegmentCheck::Verdict::kMisscheduled:
        ++c.segments_checked;
        ++c.segments_misscheduled;
        break;
      case SegmentCheck::Verdict::kUnanswered:
        ++c.segments_unanswered;
        break;
    }
  }

  // Keeps the first failure's reason. Call with shares.mutex() held.
  void NoteError(const std::string& why) {
    if (first_error.empty()) first_error = why;
  }
};

}  // namespace weir::bench
