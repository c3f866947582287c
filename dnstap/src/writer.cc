// The Frame Streams side: fstrm's file or unix-socket writer behind its I/O
// thread, one SPSC input queue per producer.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fstrm.h>

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
struct UnixOptions {
  fstrm_unix_writer_options* u = fstrm_unix_writer_options_init();
  ~UnixOptions() { fstrm_unix_writer_options_destroy(&u); }
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
  size_t len = 0;
  EncodedPayload payload = Encode(m, writer_->identity(), writer_->version(), &len);
  if (payload == nullptr) {
    dropped_.Add();
    return;
  }
  // On success fstrm owns the buffer and frees it with free() once written.
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
    UnixOptions uopt;
    fstrm_unix_writer_options_set_socket_path(uopt.u, options.socket_path.c_str());
    writer = fstrm_unix_writer_init(uopt.u, wopt.w);
  }
  if (writer == nullptr) return absl::InternalError("dnstap: fstrm could not create its writer");

  IothrOptions iopt;
  fstrm_iothr_options_set_num_input_queues(iopt.o, static_cast<unsigned>(producers));
  fstrm_iothr_options_set_input_queue_size(iopt.o, q);
  fstrm_iothr_options_set_queue_model(iopt.o, FSTRM_IOTHR_QUEUE_MODEL_SPSC);
  // A reader that went away is looked for again every second.
  fstrm_iothr_options_set_reopen_interval(iopt.o, 1);
  fstrm_iothr* iothr = fstrm_iothr_init(iopt.o, &writer);
  if (iothr == nullptr) {
    fstrm_writer_destroy(&writer);
    return absl::InternalError("dnstap: fstrm could not start its I/O thread");
  }

  std::unique_ptr<Writer> w(new Writer());
  w->iothr_ = iothr;
  w->identity_ = options.identity.empty() ? Hostname() : options.identity;
  w->version_ = options.version.empty() ? std::string("weir " WEIR_VERSION) : options.version;
  for (size_t i = 0; i < producers; ++i) {
    auto p = std::make_unique<Producer>();
    p->iothr_ = iothr;
    p->queue_ = fstrm_iothr_get_input_queue_idx(iothr, i);
    p->writer_ = w.get();
    p->sample_ = options.sample == 0 ? 1 : options.sample;
    p->client_ = options.client;
    p->upstream_ = options.upstream;
    w->producers_.push_back(std::move(p));
  }
  return w;
}

Writer::~Writer() {
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
