// What a weir-fastpath node is, whatever its I/O backend: the shared state
// (tags, learned tags, city map, cache), one WorkerCore and MissChannel per
// worker slot, the forwarder to the recursors, the mgmt client and the
// snapshot apply, and the metrics text. A backend (fastpath/src/kernel/,
// DPDK) runs the worker slots' receive/transmit loops over it.
//
// Threading: Prepare/Start/Stop/Reload from the main thread; ApplyPartitions
// also from the mgmt client's thread (serialised); RenderMetrics from the
// metrics server's threads, each a registered RCU reader, online while it
// renders (it reads the city map for partition names).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "weir/common/clock.h"
#include "weir/common/prometheus.h"
#include "weir/dns/httpdns.h"
#include "weir/dnstap/dnstap.h"
#include "weir/fastpath/config.h"
#include "weir/fastpath/conformance.h"
#include "weir/fastpath/forwarder.h"
#include "weir/fastpath/handler.h"
#include "weir/fastpath/miss_channel.h"
#include "weir/fastpath/worker_core.h"
#include "weir/mgmt/control.h"
#include "weir/mgmt/snapshot.h"
#include "weir/partitions/weight_factors.h"

namespace weir::mgmt {
class NodeClient;
struct NodeStart;
}  // namespace weir::mgmt

namespace weir::fastpath {

HandlerOptions MakeHandlerOptions(const FastpathConfig& c);

class Node {
 public:
  // `test_clock`: every TTL decision uses it (tests only; may be null).
  Node(FastpathConfig config, common::FakeClock* test_clock);
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Loads the tags and city map (the stored mgmt snapshot if there is one,
  // else the files), opens the dnstap output ([dnstap]), creates the cache
  // and `slots` worker cores. Nothing runs yet; on error nothing is left
  // half-applied.
  absl::Status Prepare(int slots);
  // After the backend set each channel's wake_worker: starts the forwarder
  // and the mgmt client.
  absl::Status Start();
  // Stops the mgmt client (no more snapshot applies).
  void StopMgmt();
  // Stops the forwarder, then writes out and closes the dnstap output; the
  // backend's loops must have stopped first.
  void Stop();
  // Re-reads the TLS certificates (the backend's reload, when set) and the
  // city map and tag files (refused when mgmt owns them and there are no
  // certificates or config changes to reload), and the config file for its
  // [log] and [dnstap] tables, which apply live (docs/fastpath-config.md#reload).
  // A config that cannot be read, or a changed key that needs a restart,
  // refuses the whole reload: nothing is applied. `what`, when given: what
  // was reloaded, for the operator ("the city map and tags, log level debug").
  absl::Status Reload(std::string* what = nullptr);

  int slots() const { return static_cast<int>(cores_.size()); }
  // The forwarder's loop heartbeat (null before Start).
  const common::Heartbeat* forwarder_heartbeat() const;
  WorkerCore& core(int slot) { return *cores_[slot]; }
  MissChannel& channel(int slot) { return *channels_[slot]; }
  const FastpathConfig& config() const { return config_; }
  uint32_t NowSeconds() const { return shared_.clock->NowSeconds(); }
  const common::Clock& clock() const { return *shared_.clock; }
  // The HTTPDNS accounts: from weir-mgmt's snapshot with [mgmt], else from
  // [httpdns] accounts_file. Never null (empty when there are none); an
  // immutable vector, replaced whole when a snapshot or reload changes it,
  // so a reader keeps a consistent set for as long as it holds the pointer.
  // Any thread (the HTTPDNS front takes it once per request).
  std::shared_ptr<const std::vector<dns::httpdns::Account>> accounts() const {
    return accounts_.load(std::memory_order_acquire);
  }
  common::FakeClock* test_clock() const { return test_clock_; }

  // The Prometheus text of every counter, the backend's families after the
  // node's; an error only when a family is rendered inconsistently (a bug).
  absl::StatusOr<std::string> RenderMetrics() const;
  // The same families into `w` (weirctl stats reads them as samples).
  void WriteMetrics(common::PrometheusWriter& w) const;
  // The backend's own families (set before Start; called on the metrics threads).
  void SetBackendMetrics(std::function<void(common::PrometheusWriter&)> render) {
    backend_metrics_ = std::move(render);
  }
  // What the backend re-reads on a reload (set before Start; runs on the
  // thread that reloads: the main thread on SIGHUP, the control thread):
  // `apply` false only checks (a reload refused for other files still
  // names bad certificates).
  void SetBackendReload(std::function<absl::Status(bool apply)> reload) {
    backend_reload_ = std::move(reload);
  }

  // One weirctl request from the control channel or weir-mgmt
  // (docs/operator-guide.md#cache-control): cache flush / dump / stats, stats,
  // reload, upstreams, partitions. Any thread, once started; requests run
  // one at a time, as an RCU reader, without stopping the workers.
  mgmt::ControlReply Control(const mgmt::ControlRequest& request);

 private:
  // The files: city map, tags and, standalone with [httpdns], the accounts.
  absl::Status LoadPartitions();
  // Their texts, read whole ("" for a file not configured).
  struct PartitionFiles {
    std::string csv;
    std::string tags;
    std::string accounts;
  };
  // Reads every file; each that cannot be read adds "PATH: reason" to
  // `problems` (and reads as empty).
  void ReadPartitionFiles(PartitionFiles* out, std::vector<std::string>* problems) const;
  // A part to apply with the city map and tags (the HTTPDNS accounts, the
  // weight factors): its text and its name for messages ("accounts", the
  // file's path).
  struct PartText {
    std::string_view text;
    std::string_view name;
  };
  using AccountsText = PartText;
  // What ParsePartitions built; a null part stays as it is.
  struct ParsedPartitions {
    std::unique_ptr<const partitions::CityMap> citymap;
    std::vector<std::string> city_names;  // city_names_ with the new map's cities
    std::unique_ptr<const partitions::TagTable> tags;
    std::shared_ptr<const std::vector<dns::httpdns::Account>> accounts;
    std::optional<partitions::WeightFactors> factors;
  };
  // Validates every text, then swaps them all in (nothing changes on an
  // error, which names every bad line of every text, up to 10 per text);
  // names are for messages. `accounts` null: they stay as they are. After
  // the first apply, a part `changed` does not name is neither parsed nor
  // replaced (a tag push keeps the city map as built).
  // `factors` null: they stay as they are (weir-mgmt's pushes carry them;
  // a standalone node has none).
  absl::Status ApplyPartitions(std::string_view csv, std::string_view csv_name, std::string_view tags_text,
                               std::string_view tags_name, const AccountsText* accounts = nullptr,
                               const mgmt::SnapshotParts& changed = {}, const PartText* factors = nullptr);
  // ApplyPartitions' two steps, under apply_mu_: every error of every text
  // is added to `problems` ("NAME:LINE: reason"); the publish cannot fail.
  ParsedPartitions ParsePartitions(std::string_view csv, std::string_view csv_name,
                                   std::string_view tags_text, std::string_view tags_name,
                                   const AccountsText* accounts, const mgmt::SnapshotParts& changed,
                                   std::vector<std::string>* problems,
                                   const PartText* factors = nullptr) const;
  void PublishPartitions(ParsedPartitions parsed);
  // The factors bound to the cities of the city map now published.
  void BindFactors();
  // Whether LoadPartitions reads the accounts file (standalone, [httpdns] on, a file named).
  bool AccountsFromFile() const;
  // Control()'s commands (fastpath/src/control.cc).
  mgmt::ControlReply CacheFlush(const mgmt::ControlRequest& r);
  mgmt::ControlReply CacheDump(const mgmt::ControlRequest& r);
  mgmt::ControlReply CacheStatsReply();
  mgmt::ControlReply UpstreamsReply() const;
  mgmt::ControlReply PartitionsReply() const;
  // weirctl segments ls NAME / segments diff (level=adaptive's learned segments).
  mgmt::ControlReply SegmentsList(const mgmt::ControlRequest& r);
  mgmt::ControlReply SegmentsDiff(const mgmt::ControlRequest& r);
  // RenderMetrics' parts.
  void RenderPartitions(common::PrometheusWriter& w) const;
  void RenderAnswers(common::PrometheusWriter& w) const;
  // The learned segments of level=adaptive names (weir_segment*, weir_adaptive_lookups_total).
  void RenderSegments(common::PrometheusWriter& w, const ForwarderStats& fs) const;

  FastpathConfig config_;
  common::FakeClock* test_clock_;
  SharedState shared_;
  std::vector<std::unique_ptr<MissChannel>> channels_;
  std::vector<std::unique_ptr<WorkerCore>> cores_;
  std::unique_ptr<Forwarder> forwarder_;
  // One producer per worker slot, then the forwarder's; null without [dnstap].
  std::unique_ptr<dnstap::Writer> dnstap_;
  std::unique_ptr<mgmt::NodeStart> node_start_;  // the mgmt identity, between Prepare and Start
  std::unique_ptr<mgmt::NodeClient> mgmt_client_;
  // Serialises ApplyPartitions (SIGHUP thread, mgmt client thread); guards city_names_.
  std::mutex apply_mu_;
  std::vector<std::string> city_names_;  // id -> city for the life of the process
  partitions::WeightFactors factors_;    // as weir-mgmt pushed them, unbound (apply_mu_)
  // Written under apply_mu_, read by any thread (accounts()).
  std::atomic<std::shared_ptr<const std::vector<dns::httpdns::Account>>> accounts_{
      std::make_shared<const std::vector<dns::httpdns::Account>>()};
  std::function<void(common::PrometheusWriter&)> backend_metrics_;
  std::function<absl::Status(bool apply)> backend_reload_;
  // The weight-conformance window, advanced by scrapes (which may run concurrently).
  mutable std::mutex conformance_mu_;
  mutable ConformanceWindow conformance_;
  std::mutex control_mu_;  // one control request at a time
  // One reload at a time (SIGHUP on the main thread, weirctl on the control
  // thread); guards the live [log] and [dnstap] settings below.
  std::mutex reload_mu_;
  common::LogSettings log_now_;
  dnstap::Options dnstap_now_;
};

// A partition's name as operators see it: "common", the city's name (from
// `cm`, the current city map), "subnet" for the subnet slot.
std::string CityName(const partitions::CityMap* cm, size_t id);
// The name of a cache statistics group (partitions::PartitionStatsGroup):
// "common", "subnet", "segment" (adaptive-level answers) or the city's.
std::string StatsGroupName(const partitions::CityMap* cm, size_t group);

}  // namespace weir::fastpath
