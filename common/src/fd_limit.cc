#include "weir/common/fd_limit.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "weir/common/text.h"

namespace weir::common {

namespace {

uint64_t FromRlim(rlim_t v) { return v == RLIM_INFINITY ? OpenFileLimit::kUnlimited : uint64_t{v}; }
rlim_t ToRlim(uint64_t v) { return v == OpenFileLimit::kUnlimited ? RLIM_INFINITY : static_cast<rlim_t>(v); }

}  // namespace

void DescriptorNeed::Add(std::string what, uint64_t count, std::string key) {
  if (count == 0) return;
  terms_.push_back({std::move(what), count, std::move(key)});
}

uint64_t DescriptorNeed::Total() const {
  uint64_t total = 0;
  for (const Term& t : terms_) total += t.count;
  return total;
}

std::string DescriptorNeed::Explain() const {
  std::string s;
  for (const Term& t : terms_) CatTo(s, s.empty() ? "" : " + ", t.what);
  return s;
}

std::vector<std::string> DescriptorNeed::LargestKeys(size_t n) const {
  std::vector<const Term*> by_size;
  for (const Term& t : terms_)
    if (!t.key.empty()) by_size.push_back(&t);
  std::stable_sort(by_size.begin(), by_size.end(),
                   [](const Term* a, const Term* b) { return a->count > b->count; });
  std::vector<std::string> keys;
  for (const Term* t : by_size) {
    if (keys.size() == n) break;
    if (std::find(keys.begin(), keys.end(), t->key) == keys.end()) keys.push_back(t->key);
  }
  return keys;
}

OpenFileLimitDecision DecideOpenFileLimit(uint64_t needed, OpenFileLimit current) {
  using Action = OpenFileLimitDecision::Action;
  if (current.soft >= needed) return {Action::kKeep, current.soft};
  if (current.hard < needed) return {Action::kRefuse, current.soft};
  return {Action::kRaise, needed};
}

std::string GroupedCount(uint64_t n) {
  if (n == OpenFileLimit::kUnlimited) return "unlimited";
  std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string OpenFileLimitRefusal(const DescriptorNeed& need, OpenFileLimit current) {
  std::string lower;
  for (const std::string& k : need.LargestKeys(2)) CatTo(lower, lower.empty() ? " or lower " : " or ", k);
  return Cat("open-file limit: the config needs ", GroupedCount(need.Total()), " descriptors (",
             need.Explain(), "), the hard limit is ", GroupedCount(current.hard),
             ": raise LimitNOFILE in the systemd unit (or the hard limit it is started under)", lower);
}

absl::StatusOr<OpenFileLimit> ReadOpenFileLimit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0)
    return absl::InternalError(Cat("getrlimit(RLIMIT_NOFILE): ", std::strerror(errno)));
  return OpenFileLimit{FromRlim(r.rlim_cur), FromRlim(r.rlim_max)};
}

absl::Status SetOpenFileSoftLimit(uint64_t soft, uint64_t hard) {
  const rlimit r{ToRlim(soft), ToRlim(hard)};
  if (setrlimit(RLIMIT_NOFILE, &r) != 0)
    return absl::InternalError(
        Cat("cannot raise the open-file limit to ", GroupedCount(soft), ": ", std::strerror(errno)));
  return absl::OkStatus();
}

}  // namespace weir::common
