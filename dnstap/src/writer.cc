// The Frame Streams side: fstrm's file writer, or its writer over the link
// to a unix-socket reader (reader_link.h), behind its I/O thread, one SPSC
// input queue per producer.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fstrm.h>

#include "reader_link.h"
#include "tsan_handoff.h"
#include "weir/common/text.h"
#include "weir/dnstap/dnstap.h"

#ifndef WEIR_VERSION
#define WEIR_VERSION "0"
#endif

namespace weir::dnstap {

using common::Cat;

namespace {

constexpr char kContentType[] = "protobuf:dnstap.Dnstap";

// fstrm's option objects, destroyed on every path.
struct WriterOptions {
  fstrm_writer_options* w = fstrm_writer_options_init();
  ~WriterOptions() { fstrm_writer_options_destroy(&w); }
};
struct FileOptions {
  fstrm_file_options* f = fstrm_file_options_init();
  ~FileOptions() { fstrm_file_options_destroy(&f); }
};
struct IothrOptions {
  fstrm_iothr_options* o = fstrm_iothr_options_init();
  ~IothrOptions() { fstrm_iothr_options_destroy(&o); }
};

// fstrm's file writer opens the file on its I/O thread, where a failure is
// only retried: the file is created here first, so a missing directory or a
// permission stops the daemon at start with the reason.
absl::Status CheckFile(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
  if (fd < 0) return absl::FailedPreconditionError(Cat("dnstap file ", path, ": ", std::strerror(errno)));
  close(fd);
  return absl::OkStatus();
}

std::string Hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "weir";
  return name;
}

}  // namespace

void Producer::Send(const Message& m) {
  // No reader takes data (none connected, or one that failed us): the
  // message would only be thrown away on the I/O thread, uncounted.
  if (!output_ready_->load(std::memory_order_acquire)) {
    dropped_.Add();
    return;
  }
  size_t len = 0;
  EncodedPayload payload = Encode(m, writer_->identity(), writer_->version(), &len);
  if (payload == nullptr) {
    dropped_.Add();
    return;
  }
  // On success fstrm owns the buffer and frees it with free() once written.
  HandoffReleased();
  if (fstrm_iothr_submit(iothr_, queue_, payload.get(), len, fstrm_free_wrapper, nullptr) ==
      fstrm_res_success) {
    static_cast<void>(payload.release());  // fstrm frees it
    sent_.Add();
  } else {
    dropped_.Add();  // fstrm_res_again: the queue is full
  }
}

absl::StatusOr<std::unique_ptr<Writer>> Writer::Open(const Options& options, size_t producers) {
  if (options.socket_path.empty() == options.file_path.empty())
    return absl::InvalidArgumentError("dnstap needs exactly one of a socket or a file");
  if (producers == 0) return absl::InvalidArgumentError("dnstap needs at least one producer");
  const uint32_t q = options.queue_size;
  if (q < FSTRM_IOTHR_INPUT_QUEUE_SIZE_MIN || q > FSTRM_IOTHR_INPUT_QUEUE_SIZE_MAX || (q & (q - 1)) != 0) {
    return absl::InvalidArgumentError(Cat("dnstap queue_size must be a power of two from ",
                                          FSTRM_IOTHR_INPUT_QUEUE_SIZE_MIN, " to ",
                                          FSTRM_IOTHR_INPUT_QUEUE_SIZE_MAX));
  }

  WriterOptions wopt;
  fstrm_writer_options_add_content_type(wopt.w, kContentType, sizeof(kContentType) - 1);
  fstrm_writer* writer = nullptr;
  std::unique_ptr<Writer> w(new Writer());
  if (!options.file_path.empty()) {
    if (absl::Status st = CheckFile(options.file_path); !st.ok()) return st;
    FileOptions fopt;
    fstrm_file_options_set_file_path(fopt.f, options.file_path.c_str());
    writer = fstrm_file_writer_init(fopt.f, wopt.w);
  } else {
    if (options.socket_path.size() >= sizeof(sockaddr_un{}.sun_path)) {
      return absl::InvalidArgumentError(
          Cat("dnstap socket path ", options.socket_path, " is longer than a unix socket address allows"));
    }
    w->link_ = std::make_unique<ReaderLink>(
        ReaderLink::Options{
            .path = options.socket_path, .content_type = kContentType, .timeout = options.io_timeout},
        &w->output_ready_);
    fstrm_rdwr* rdwr = w->link_->MakeRdwr();
    writer = fstrm_writer_init(wopt.w, &rdwr);
    if (writer == nullptr) fstrm_rdwr_destroy(&rdwr);
  }
  if (writer == nullptr) return absl::InternalError("dnstap: fstrm could not create its writer");

  IothrOptions iopt;
  fstrm_iothr_options_set_num_input_queues(iopt.o, static_cast<unsigned>(producers));
  fstrm_iothr_options_set_input_queue_size(iopt.o, q);
  fstrm_iothr_options_set_queue_model(iopt.o, FSTRM_IOTHR_QUEUE_MODEL_SPSC);
  // The file is opened again a second after a failure; a reader is the
  // link's business.
  fstrm_iothr_options_set_reopen_interval(iopt.o, 1);
  fstrm_iothr* iothr = fstrm_iothr_init(iopt.o, &writer);
  if (iothr == nullptr) {
    fstrm_writer_destroy(&writer);
    return absl::InternalError("dnstap: fstrm could not start its I/O thread");
  }

  w->iothr_ = iothr;
  w->SetLive(options.tapping, options.sample);
  w->identity_ = options.identity.empty() ? Hostname() : options.identity;
  w->version_ = options.version.empty() ? std::string("weir " WEIR_VERSION) : options.version;
  for (size_t i = 0; i < producers; ++i) {
    auto p = std::make_unique<Producer>();
    p->iothr_ = iothr;
    p->queue_ = fstrm_iothr_get_input_queue_idx(iothr, i);
    p->writer_ = w.get();
    p->output_ready_ = &w->output_ready_;
    p->tapping_ = &w->tapping_;
    p->sample_ = &w->sample_;
    p->client_ = options.client;
    p->upstream_ = options.upstream;
    w->producers_.push_back(std::move(p));
  }
  if (w->link_) w->link_->Start();
  return w;
}

Writer::~Writer() {
  // The link first: a handshake under way is given up, and the writes of
  // what the queues still hold wait at most one timeout from here.
  if (link_) link_->Stop();
  // Joins the I/O thread after it wrote out every queue and closed the output.
  if (iothr_ != nullptr) fstrm_iothr_destroy(&iothr_);
}

Writer::Totals Writer::totals() const {
  Totals t;
  for (const auto& p : producers_) {
    t.sent += p->sent();
    t.dropped += p->dropped();
    t.sampled_out += p->sampled_out();
  }
  return t;
}

void Writer::RenderMetrics(common::PrometheusWriter& w) const {
  const Totals t = totals();
  auto& family =
      w.Counter("weir_dnstap_messages_total",
                "dnstap messages handed to the writer (sent) or dropped on a full queue (dropped), "
                "and queries not tapped by sampling (sampled_out).");
  family.Add({{"result", "sent"}}, t.sent);
  family.Add({{"result", "dropped"}}, t.dropped);
  family.Add({{"result", "sampled_out"}}, t.sampled_out);
}

}  // namespace weir::dnstap
