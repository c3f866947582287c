#include "weir/net/loop_mailbox.h"

namespace weir::net {

bool LoopMailbox::Call(std::function<void()> fn, std::chrono::milliseconds timeout) {
  auto p = std::make_shared<Pending>();
  p->fn = std::move(fn);
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back(p);
  }
  loop_.Wake();
  std::unique_lock<std::mutex> l(mu_);
  if (done_.wait_for(l, timeout, [&] { return p->state == Pending::State::kDone; })) return true;
  if (p->state == Pending::State::kQueued) {
    p->state = Pending::State::kAbandoned;  // RunPending skips it
    return false;
  }
  // Started just in time: `fn` refers to the caller's state, so wait for its end.
  done_.wait(l, [&] { return p->state == Pending::State::kDone; });
  return true;
}

void LoopMailbox::RunPending() {
  std::unique_lock<std::mutex> l(mu_);
  while (!queue_.empty()) {
    std::shared_ptr<Pending> p = std::move(queue_.front());
    queue_.pop_front();
    if (p->state == Pending::State::kAbandoned) continue;
    p->state = Pending::State::kRunning;
    l.unlock();
    p->fn();
    l.lock();
    p->state = Pending::State::kDone;
    done_.notify_all();
  }
}

}  // namespace weir::net
