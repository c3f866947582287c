#include "reader_link.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

#include "tsan_handoff.h"
#include "weir/common/text.h"

namespace weir::dnstap {

using common::Cat;

namespace {

int64_t Nanos(ReaderLink::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// fstrm's control frames with their header (escape, length), encoded by
// libfstrm; an empty string when it cannot.
std::string EncodeControl(fstrm_control_type type, std::string_view content_type) {
  fstrm_control* c = fstrm_control_init();
  std::string out;
  size_t len = 0;
  if (fstrm_control_set_type(c, type) == fstrm_res_success &&
      (content_type.empty() ||
       fstrm_control_add_field_content_type(c, reinterpret_cast<const uint8_t*>(content_type.data()),
                                            content_type.size()) == fstrm_res_success) &&
      fstrm_control_encoded_size(c, &len, FSTRM_CONTROL_FLAG_WITH_HEADER) == fstrm_res_success) {
    out.resize(len);
    if (fstrm_control_encode(c, out.data(), &len, FSTRM_CONTROL_FLAG_WITH_HEADER) != fstrm_res_success) {
      out.clear();
    }
  }
  fstrm_control_destroy(&c);
  return out;
}

}  // namespace

ReaderLink::ReaderLink(Options options, std::atomic<bool>* ready)
    : options_(std::move(options)), ready_(ready), wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  ready_->store(false, std::memory_order_release);
}

ReaderLink::~ReaderLink() {
  Stop();
  const int fd = fd_.exchange(-1);
  if (fd >= 0) close(fd);
  if (wake_fd_ >= 0) close(wake_fd_);
}

fstrm_rdwr* ReaderLink::MakeRdwr() {
  fstrm_rdwr* rdwr = fstrm_rdwr_init(this);
  fstrm_rdwr_set_open(rdwr, &ReaderLink::OpenCb);
  fstrm_rdwr_set_close(rdwr, &ReaderLink::CloseCb);
  fstrm_rdwr_set_write(rdwr, &ReaderLink::WriteCb);
  return rdwr;
}

void ReaderLink::Start() {
  thread_ = std::thread([this] { Run(); });
}

void ReaderLink::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  stop_deadline_ns_.store(Nanos(Clock::now() + options_.timeout), std::memory_order_relaxed);
  stop_.store(true, std::memory_order_release);
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    static_cast<void>(write(wake_fd_, &one, sizeof(one)));
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

// fstrm opens and closes its writer; the link's connection is its own.
fstrm_res ReaderLink::OpenCb(void*) { return fstrm_res_success; }
fstrm_res ReaderLink::CloseCb(void*) { return fstrm_res_success; }
fstrm_res ReaderLink::WriteCb(void* self, const struct iovec* iov, int iovcnt) {
  return static_cast<ReaderLink*>(self)->Write(iov, iovcnt);
}

ReaderLink::Clock::time_point ReaderLink::Deadline() const {
  const Clock::time_point d = Clock::now() + options_.timeout;
  if (!stop_.load(std::memory_order_acquire)) return d;
  const Clock::time_point stop{std::chrono::nanoseconds(stop_deadline_ns_.load(std::memory_order_relaxed))};
  return std::min(d, stop);
}

ReaderLink::Wait ReaderLink::WaitFor(int fd, short events, Clock::time_point deadline,
                                     bool connecting) const {
  for (;;) {
    if (connecting && stop_.load(std::memory_order_acquire)) return Wait::kStopped;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return Wait::kTimedOut;
    std::array<pollfd, 2> p{{{fd, events, 0}, {wake_fd_, POLLIN, 0}}};
    const int n = poll(p.data(), connecting ? 2 : 1, static_cast<int>(left.count()) + 1);
    if (n < 0 && errno != EINTR) return Wait::kFailed;
    if (n <= 0) continue;
    if ((p[0].revents & (POLLERR | POLLNVAL)) != 0) return Wait::kFailed;
    if ((p[0].revents & (events | POLLHUP)) != 0) return Wait::kReady;
  }
}

bool ReaderLink::SendAll(int fd, iovec* iov, int iovcnt, Clock::time_point deadline, bool connecting) const {
  while (iovcnt > 0) {
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = static_cast<size_t>(std::min(iovcnt, IOV_MAX));
    const ssize_t n = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
      if (WaitFor(fd, POLLOUT, deadline, connecting) != Wait::kReady) return false;
      continue;
    }
    size_t done = static_cast<size_t>(n);
    while (iovcnt > 0 && done >= iov->iov_len) {
      done -= iov->iov_len;
      ++iov;
      --iovcnt;
    }
    if (iovcnt > 0) {
      iov->iov_base = static_cast<uint8_t*>(iov->iov_base) + done;
      iov->iov_len -= done;
    }
  }
  return true;
}

bool ReaderLink::ReadAll(int fd, uint8_t* data, size_t n, Clock::time_point deadline, bool connecting) const {
  while (n > 0) {
    const ssize_t r = recv(fd, data, n, MSG_DONTWAIT);
    if (r == 0) return false;  // the reader closed
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
      if (WaitFor(fd, POLLIN, deadline, connecting) != Wait::kReady) return false;
      continue;
    }
    data += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

int ReaderLink::Connect(std::string* why, bool* listening) const {
  *listening = true;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (options_.path.size() >= sizeof(a.sun_path)) {
    *why = "the path is too long";
    return -1;
  }
  std::memcpy(a.sun_path, options_.path.data(), options_.path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *why = std::strerror(errno);
    return -1;
  }
  const Clock::time_point deadline = Clock::now() + options_.timeout;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0) {
    const int e = errno;
    // A unix socket connects at once, or refuses (ENOENT, ECONNREFUSED:
    // nobody listens), or its backlog is full (EAGAIN: a reader that does
    // not accept).
    *why = std::strerror(e);
    *listening = e != ENOENT && e != ECONNREFUSED;
    close(fd);
    return -1;
  }
  if (!Handshake(fd, deadline, why)) {
    close(fd);
    return -1;
  }
  return fd;
}

bool ReaderLink::Handshake(int fd, Clock::time_point deadline, std::string* why) const {
  auto timed_out = [&] {
    *why = stop_.load(std::memory_order_acquire)
               ? "stopping"
               : Cat("no Frame Streams handshake within ", options_.timeout.count(), " ms");
    return false;
  };
  std::string ready = EncodeControl(FSTRM_CONTROL_READY, options_.content_type);
  std::string start = EncodeControl(FSTRM_CONTROL_START, options_.content_type);
  if (ready.empty() || start.empty()) {
    *why = "cannot encode a control frame";
    return false;
  }
  iovec iov{ready.data(), ready.size()};
  if (!SendAll(fd, &iov, 1, deadline, true)) return timed_out();
  // ACCEPT: the escape (0), the frame's length, the frame.
  std::array<uint32_t, 2> head{};
  if (!ReadAll(fd, reinterpret_cast<uint8_t*>(head.data()), sizeof(head), deadline, true)) return timed_out();
  const uint32_t len = ntohl(head[1]);
  if (head[0] != 0 || len > FSTRM_CONTROL_FRAME_LENGTH_MAX) {
    *why = "not a Frame Streams reader (no control frame)";
    return false;
  }
  std::vector<uint8_t> frame(len);
  if (!ReadAll(fd, frame.data(), len, deadline, true)) return timed_out();
  fstrm_control* c = fstrm_control_init();
  fstrm_control_type type = FSTRM_CONTROL_STOP;
  const bool accepted =
      fstrm_control_decode(c, frame.data(), len, 0) == fstrm_res_success &&
      fstrm_control_get_type(c, &type) == fstrm_res_success && type == FSTRM_CONTROL_ACCEPT &&
      fstrm_control_match_field_content_type(c,
                                             reinterpret_cast<const uint8_t*>(options_.content_type.data()),
                                             options_.content_type.size()) == fstrm_res_success;
  fstrm_control_destroy(&c);
  if (!accepted) {
    *why = Cat("the reader did not accept ", options_.content_type);
    return false;
  }
  iov = {start.data(), start.size()};
  if (!SendAll(fd, &iov, 1, deadline, true)) return timed_out();
  return true;
}

void ReaderLink::Run() {
  ReconnectBackoff backoff(options_.backoff_first, options_.backoff_max);
  Clock::time_point next{};
  bool was_listening = false;
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    // Connected: wait for the I/O thread to let the reader go, or the stop.
    cv_.wait(l, [&] { return stopping_ || fd_.load(std::memory_order_acquire) < 0; });
    if (stopping_) return;
    if (reader_failed_) {
      reader_failed_ = false;
      backoff.Failed(Clock::now());
      next = backoff.next();
    }
    if (cv_.wait_until(l, next, [&] { return stopping_; })) return;
    l.unlock();
    std::string why;
    bool listening = false;
    const int fd = Connect(&why, &listening);
    l.lock();
    if (stopping_) {
      if (fd >= 0) close(fd);
      return;
    }
    if (fd >= 0) {
      backoff.Succeeded();
      was_listening = true;
      fd_.store(fd, std::memory_order_release);
      ready_->store(true, std::memory_order_release);
      common::LogInfo("dnstap", "connected to the reader at ", options_.path);
      continue;
    }
    if (listening) {
      // Something accepts the connection but is no reader we can use.
      backoff.Failed(Clock::now());
      next = backoff.next();
      log_("reader at ", options_.path, ": ", why, ": trying again in ",
           std::chrono::duration_cast<std::chrono::milliseconds>(backoff.delay()).count(), " ms");
    } else {
      if (was_listening)
        common::LogInfo("dnstap", "no reader at ", options_.path, " (", why, "): looking every ",
                        std::chrono::duration_cast<std::chrono::milliseconds>(options_.retry).count(), " ms");
      was_listening = false;
      next = Clock::now() + options_.retry;
    }
  }
}

void ReaderLink::DropReader(std::string_view why) {
  int fd = -1;
  {
    // Under the lock, so the connect thread sees the failure with the
    // socket gone and backs off, and cannot mark a reader ready between
    // the two stores.
    std::lock_guard<std::mutex> l(mu_);
    ready_->store(false, std::memory_order_release);
    fd = fd_.exchange(-1, std::memory_order_acq_rel);
    reader_failed_ = true;
  }
  if (fd >= 0) close(fd);
  log_("reader at ", options_.path, ": ", why, ": connecting again");
  cv_.notify_all();
}

fstrm_res ReaderLink::Write(const struct iovec* iov, int iovcnt) {
  HandoffAcquired();  // the producers' messages, through fstrm's queue
  if (iovcnt <= 0) return fstrm_res_success;
  // fstrm's control frames come alone, escape first: its START (the link
  // sent its own after the reader's ACCEPT) and its STOP at the end.
  if (iovcnt == 1 && iov[0].iov_len >= 12) {
    std::array<uint32_t, 3> head{};
    std::memcpy(head.data(), iov[0].iov_base, sizeof(head));
    if (head[0] == 0) {
      if (ntohl(head[2]) == FSTRM_CONTROL_STOP) Finish();
      return fstrm_res_success;
    }
  }
  const int fd = fd_.load(std::memory_order_acquire);
  // No reader: the frames are let go (the producers stop handing any over
  // while the link is not ready). fstrm's writer never sees a failure, so
  // it never closes.
  if (fd < 0) return fstrm_res_success;
  std::vector<iovec> copy(iov, iov + iovcnt);
  if (!SendAll(fd, copy.data(), iovcnt, Deadline(), false)) {
    DropReader(Cat("took no data for ", options_.timeout.count(), " ms, or closed"));
  }
  return fstrm_res_success;
}

void ReaderLink::Finish() {
  const int fd = fd_.exchange(-1, std::memory_order_acq_rel);
  ready_->store(false, std::memory_order_release);
  if (fd < 0) return;
  const std::string stop = EncodeControl(FSTRM_CONTROL_STOP, "");
  iovec iov{const_cast<char*>(stop.data()), stop.size()};
  const Clock::time_point deadline = Deadline();
  if (!stop.empty() && SendAll(fd, &iov, 1, deadline, false)) {
    // The reader's FINISH; whatever it sends, the stream is over.
    std::array<uint8_t, 12> finish{};
    static_cast<void>(ReadAll(fd, finish.data(), finish.size(), deadline, false));
  }
  close(fd);
}

}  // namespace weir::dnstap
