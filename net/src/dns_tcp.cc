#include "weir/net/dns_tcp.h"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

namespace weir::net {

ssize_t SocketStreamIo::Recv(void* buf, size_t len) {
  wants_write_ = false;
  ssize_t n;
  do {
    n = recv(fd_, buf, len, 0);
  } while (n < 0 && errno == EINTR);
  if (n > 0) received_ += static_cast<uint64_t>(n);
  return n;
}

ssize_t SocketStreamIo::Send(const void* buf, size_t len) {
  ssize_t n;
  do {
    n = send(fd_, buf, len, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  wants_write_ = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  return n;
}

ssize_t DnsTcpStream::RecvSome(void* buf, size_t len) {
  return io_ != nullptr ? io_->Recv(buf, len) : recv(fd_, buf, len, 0);
}

ssize_t DnsTcpStream::SendSome(const void* buf, size_t len) {
  return io_ != nullptr ? io_->Send(buf, len) : send(fd_, buf, len, MSG_NOSIGNAL);
}

DnsTcpStream::Status DnsTcpStream::Read(Clock::time_point) {
  if (read_closed_ || paused()) return Status::kOpen;
  // Compact once the parsed part dominates, so `in_` holds at most what is
  // unparsed plus one read.
  if (in_off_ > 0 && in_off_ * 2 >= in_.size()) {
    in_.erase(in_.begin(), in_.begin() + static_cast<ptrdiff_t>(in_off_));
    in_off_ = 0;
  }
  // At most one whole message beyond what is buffered: a client that
  // pipelines faster than it is answered waits in its socket buffer, not here.
  const size_t have = in_.size() - in_off_;
  if (have >= 2 + kMaxDnsMessage) return Status::kOpen;
  uint8_t buf[16384];
  const size_t room = std::min(sizeof(buf), 2 + kMaxDnsMessage - have);
  ssize_t n;
  do {
    n = RecvSome(buf, room);
  } while (n < 0 && errno == EINTR);
  if (n > 0) in_.insert(in_.end(), buf, buf + n);
  if (n == 0) {
    read_closed_ = true;  // RFC 7766 6.2.4: answer what was sent, then close
    return Status::kOpen;
  }
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? Status::kOpen : Status::kClose;
  return Status::kOpen;
}

bool DnsTcpStream::HasQuery() const {
  const size_t have = in_.size() - in_off_;
  return have >= 2 && have >= 2 + ((size_t{in_[in_off_]} << 8) | in_[in_off_ + 1]);
}

bool DnsTcpStream::NextQuery(std::span<const uint8_t>* query, Clock::time_point now) {
  if (paused() || !HasQuery()) return false;
  const size_t len = (size_t{in_[in_off_]} << 8) | in_[in_off_ + 1];
  *query = std::span<const uint8_t>(in_).subspan(in_off_ + 2, len);
  in_off_ += 2 + len;
  ++pending_;
  last_ = now;
  return true;
}

void DnsTcpStream::Queued(bool was_paused) {
  if (!was_paused && paused()) paused_since_ = Clock::now();
}

DnsTcpStream::Status DnsTcpStream::Answer(std::span<const uint8_t> answer) {
  if (pending_ > 0) --pending_;
  if (answer.empty()) return Status::kOpen;
  if (out_.size() + 2 + answer.size() > 4 * max_unsent_) return Status::kOverflow;  // never reads
  const bool was_empty = out_.empty();
  const bool was_paused = paused();
  AppendFramed(answer, &out_);
  Queued(was_paused);
  return was_empty && !corked_ ? Flush() : Status::kOpen;
}

DnsTcpStream::Status DnsTcpStream::Flush() {
  size_t sent = 0;
  while (sent < out_.size()) {
    const ssize_t n = SendSome(out_.data() + sent, out_.size() - sent);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) return Status::kClose;
    sent += static_cast<size_t>(n);
  }
  out_.erase(out_.begin(), out_.begin() + static_cast<ptrdiff_t>(sent));
  return Status::kOpen;
}

uint32_t DnsTcpStream::WantedEvents() const {
  uint32_t ev = 0;
  if (!read_closed_ && !paused()) ev |= EPOLLIN;
  if (!out_.empty()) ev |= EPOLLOUT;
  return ev;
}

void AppendFramed(std::span<const uint8_t> message, std::vector<uint8_t>* out) {
  out->push_back(static_cast<uint8_t>(message.size() >> 8));
  out->push_back(static_cast<uint8_t>(message.size()));
  out->insert(out->end(), message.begin(), message.end());
}

}  // namespace weir::net
