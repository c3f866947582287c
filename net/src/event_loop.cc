#include "weir/net/event_loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "weir/common/text.h"

namespace weir::net {

namespace {
// The epoll data word: generation (high 32 bits) and descriptor (low 32).
// The wake descriptor uses generation 0, which no watched one gets.
uint64_t DataOf(int fd, uint32_t generation) {
  return (uint64_t{generation} << 32) | static_cast<uint32_t>(fd);
}
}  // namespace

EventLoop::~EventLoop() {
  if (wakefd_ >= 0) close(wakefd_);
  if (epfd_ >= 0) close(epfd_);
}

absl::Status EventLoop::Init() {
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epfd_ < 0) return absl::InternalError(common::Cat("epoll_create1: ", std::strerror(errno)));
  wakefd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wakefd_ < 0) return absl::InternalError(common::Cat("eventfd: ", std::strerror(errno)));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = DataOf(wakefd_, 0);
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, wakefd_, &ev) != 0) {
    return absl::InternalError(common::Cat("epoll_ctl: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

void EventLoop::Watch(int fd, uint32_t events, FdCallback cb) {
  auto it = fds_.find(fd);
  epoll_event ev{};
  ev.events = events;
  if (it != fds_.end()) {
    it->second.events = events;
    graveyard_.push_back(std::move(it->second.cb));  // it may be the one running
    it->second.cb = std::move(cb);
    ev.data.u64 = DataOf(fd, it->second.generation);
    epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev);
    return;
  }
  Watched w{events, next_generation_++, std::move(cb)};
  if (next_generation_ == 0) next_generation_ = 1;
  ev.data.u64 = DataOf(fd, w.generation);
  epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev);
  fds_.emplace(fd, std::move(w));
}

void EventLoop::Modify(int fd, uint32_t events) {
  auto it = fds_.find(fd);
  if (it == fds_.end() || it->second.events == events) return;
  it->second.events = events;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = DataOf(fd, it->second.generation);
  epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev);
}

void EventLoop::Unwatch(int fd) {
  auto it = fds_.find(fd);
  if (it == fds_.end()) return;
  graveyard_.push_back(std::move(it->second.cb));  // it may be the one running
  fds_.erase(it);
  epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
}

uint32_t EventLoop::EventsOf(int fd) const {
  auto it = fds_.find(fd);
  return it == fds_.end() ? 0 : it->second.events;
}

EventLoop::TimerId EventLoop::At(Clock::time_point at, std::function<void()> fn) {
  const TimerId id = next_timer_++;
  timer_fns_.emplace(id, std::move(fn));
  timers_.push({at, id});
  return id;
}

void EventLoop::Wake() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wakefd_, &one, sizeof(one));
}

int EventLoop::RunOnce(std::chrono::milliseconds max_wait) {
  // Cancelled timers at the top are dropped first so they do not shorten the wait.
  while (!timers_.empty() && !timer_fns_.contains(timers_.top().id)) timers_.pop();
  int64_t wait_ms = max_wait.count();
  if (!timers_.empty()) {
    const auto until = std::chrono::ceil<std::chrono::milliseconds>(timers_.top().at - Clock::now()).count();
    wait_ms = std::clamp<int64_t>(until, 0, wait_ms);
  }
  epoll_event events[64];
  if (before_wait_) before_wait_();
  const int n = epoll_wait(epfd_, events, 64, static_cast<int>(wait_ms));
  if (after_wait_) after_wait_();
  int ran = 0;
  for (int i = 0; i < n; ++i) {
    const int fd = static_cast<int>(events[i].data.u64 & 0xffffffffu);
    const auto generation = static_cast<uint32_t>(events[i].data.u64 >> 32);
    if (generation == 0) {
      uint64_t v;
      [[maybe_unused]] ssize_t r = read(wakefd_, &v, sizeof(v));
      if (on_wake_) on_wake_();
      ++ran;
      continue;
    }
    auto it = fds_.find(fd);
    if (it == fds_.end() || it->second.generation != generation) continue;  // unwatched in this batch
    it->second.cb(events[i].events);
    ++ran;
  }
  graveyard_.clear();
  const auto now = Clock::now();
  while (!timers_.empty() && timers_.top().at <= now) {
    const TimerId id = timers_.top().id;
    timers_.pop();
    auto it = timer_fns_.find(id);
    if (it == timer_fns_.end()) continue;
    std::function<void()> fn = std::move(it->second);
    timer_fns_.erase(it);
    fn();
    ++ran;
  }
  return ran;
}

bool StopLoopThread(std::atomic<bool>& running, EventLoop& loop, std::thread& thread) {
  if (!running.exchange(false)) return false;
  loop.Wake();
  thread.join();
  return true;
}

}  // namespace weir::net
