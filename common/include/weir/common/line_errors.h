// The errors of a line-oriented input (the city map CSV, the tag file),
// every one with its line, so one look at a rejected file names all that
// is wrong with it. Control plane only.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "weir/common/text.h"

namespace weir::common {

class LineErrors {
 public:
  // Kept per input; the rest are counted ("... and N more").
  static constexpr size_t kMaxKept = 100;

  // `line` 0: the input as a whole (a limit, a bad option).
  void Add(int line, std::string reason) {
    ++count_;
    errors_.push_back({line, std::move(reason)});
    Trim();
  }

  bool empty() const { return count_ == 0; }
  size_t count() const { return count_; }

  // The first error as "line N: reason" (or the reason alone for the whole
  // input), the message of a parser's status.
  absl::Status First() const {
    if (errors_.empty()) return absl::OkStatus();
    const Error e = Sorted().front();
    return absl::InvalidArgumentError(e.line == 0 ? e.reason : common::Cat("line ", e.line, ": ", e.reason));
  }

  // Every kept error as "NAME:LINE: reason" in line order, then those of
  // the whole input ("NAME: reason"), then "NAME: ... and N more errors"
  // when some were dropped; at most `most` errors (a log line's share).
  std::vector<std::string> Render(std::string_view name, size_t most = kMaxKept) const {
    std::vector<std::string> out;
    for (const Error& e : Sorted()) {
      if (out.size() == most) break;
      out.push_back(e.line == 0 ? common::Cat(name, ": ", e.reason)
                                : common::Cat(name, ":", e.line, ": ", e.reason));
    }
    if (count_ > out.size())
      out.push_back(common::Cat(name, ": ... and ", count_ - out.size(), " more errors"));
    return out;
  }

 private:
  struct Error {
    int line;
    std::string reason;
  };

  std::vector<Error> Sorted() const {
    std::vector<Error> s = errors_;
    // The whole input's errors after its lines' (line 0 sorts as the last).
    std::stable_sort(s.begin(), s.end(), [](const Error& a, const Error& b) {
      return static_cast<unsigned>(a.line - 1) < static_cast<unsigned>(b.line - 1);
    });
    return s;
  }
  // Keeps the kMaxKept first by line (errors may arrive out of line order:
  // a duplicate is found after the whole input was read).
  void Trim() {
    if (errors_.size() <= 2 * kMaxKept) return;
    errors_ = Sorted();
    errors_.resize(kMaxKept);
  }

  std::vector<Error> errors_;
  size_t count_ = 0;
};

}  // namespace weir::common
