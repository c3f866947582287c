#include "query_mix.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"

#include "weir/common/text.h"
#include "weir/dns/writer.h"

namespace weir::bench {
namespace {

absl::StatusOr<Question> MakeQuestion(std::string_view name, uint16_t qtype, bool tagged) {
  Question q;
  if (!dns::NameKeyFromText(name, &q.qname)) {
    return absl::InvalidArgumentError(common::Cat("invalid name '", name, "'"));
  }
  q.qtype = qtype;
  q.tagged = tagged;
  q.text = dns::NameKeyToText(q.qname.span());
  return q;
}

std::string Absolute(std::string zone) {
  if (zone.empty() || zone.back() != '.') zone += '.';
  return zone;
}

}  // namespace

absl::StatusOr<std::vector<Question>> ParseQueryFile(std::string_view text, std::string_view file_name) {
  std::vector<Question> out;
  absl::Status error;
  common::ForEachLine(text, [&](int line_no, std::string_view line) {
    auto fail = [&](std::string_view why) {
      error = absl::InvalidArgumentError(common::Cat(file_name, ":", line_no, ": ", why));
      return false;
    };
    auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
    std::vector<std::string_view> fields;
    for (size_t i = 0; i < line.size();) {
      while (i < line.size() && is_space(line[i])) ++i;
      size_t j = i;
      while (j < line.size() && !is_space(line[j])) ++j;
      if (j > i) fields.push_back(line.substr(i, j - i));
      i = j;
    }
    if (fields.size() > 2) return fail(common::Cat("expected 'name [type]', got ", fields.size(), " fields"));
    uint16_t qtype = dns::type::kA;
    if (fields.size() == 2) {
      qtype = TypeFromText(fields[1]);
      if (qtype == 0) return fail(common::Cat("unknown type '", fields[1], "'"));
    }
    auto q = MakeQuestion(fields[0], qtype, false);
    if (!q.ok()) return fail(common::ToStd(q.status().message()));
    out.push_back(*std::move(q));
    return true;
  });
  if (!error.ok()) return error;
  if (out.empty()) return absl::InvalidArgumentError(common::Cat(file_name, ": no queries in the file"));
  return out;
}

void QueryMix::Alias::Build(std::span<const double> weights) {
  const size_t n = weights.size();
  prob.assign(n, 0);
  alias.assign(n, 0);
  if (n == 0) return;
  double sum = 0;
  for (double w : weights) sum += w;
  std::vector<double> scaled(n);
  std::vector<uint32_t> small, large;
  for (size_t i = 0; i < n; ++i) {
    scaled[i] = weights[i] * static_cast<double>(n) / sum;
    (scaled[i] < 1.0 ? small : large).push_back(static_cast<uint32_t>(i));
  }
  while (!small.empty() && !large.empty()) {
    const uint32_t s = small.back(), l = large.back();
    small.pop_back();
    prob[s] = scaled[s];
    alias[s] = l;
    scaled[l] -= 1.0 - scaled[s];
    if (scaled[l] < 1.0) {
      large.pop_back();
      small.push_back(l);
    }
  }
  for (uint32_t i : large) prob[i] = 1.0;
  for (uint32_t i : small) prob[i] = 1.0;  // rounding leftovers
}

uint32_t QueryMix::Alias::Draw(std::mt19937_64& rng) const {
  const uint64_t r = rng();
  const uint32_t i = static_cast<uint32_t>((r >> 32) % prob.size());
  const double u = static_cast<double>(r & 0xffffffffu) / 4294967296.0;
  return u < prob[i] ? i : alias[i];
}

absl::StatusOr<QueryMix> QueryMix::Build(const Options& o) {
  QueryMix m;
  m.tcp_fraction_ = o.tcp_fraction;
  m.edns_fraction_ = o.edns_fraction;
  m.ecs_fraction_ = o.ecs_fraction;
  m.weight_fraction_ = o.weight_fraction;
  m.miss_fraction_ = o.miss_fraction;
  const uint16_t qtype = TypeFromText(o.qtype);
  if (qtype == 0) return absl::InvalidArgumentError(common::Cat("--qtype: unknown type '", o.qtype, "'"));
  m.miss_qtype_ = qtype;
  if (!dns::NameKeyFromText(common::Cat("miss.", Absolute(o.zone)), &m.miss_zone_) ||
      m.miss_zone_.len > 200) {
    return absl::InvalidArgumentError(common::Cat("--zone: invalid or too long zone '", o.zone, "'"));
  }

  if (!o.subscriber_ecs_file.empty()) {
    auto subs = SubscriberSubnets::Load(o.subscriber_ecs_file);
    if (!subs.ok()) return subs.status();
    m.subscribers_ = *std::move(subs);
  }

  if (!o.queries_file.empty()) {
    std::ifstream in(o.queries_file, std::ios::binary);
    if (!in) return absl::InvalidArgumentError(common::Cat("cannot read query file ", o.queries_file));
    std::stringstream ss;
    ss << in.rdbuf();
    auto qs = ParseQueryFile(ss.str(), o.queries_file);
    if (!qs.ok()) return qs.status();
    // Each distinct question once (its counters and share row), the file's
    // lines as the order they are sent in.
    absl::flat_hash_map<std::pair<std::string, uint16_t>, uint32_t> seen;
    for (Question& q : *qs) {
      auto [it, fresh] =
          seen.try_emplace({std::string(q.qname.span().begin(), q.qname.span().end()), q.qtype},
                           static_cast<uint32_t>(m.questions_.size()));
      if (fresh) {
        q.tagged = o.queries_weighted;
        m.questions_.push_back(std::move(q));
      }
      m.file_order_.push_back(it->second);
    }
    m.from_file_ = true;
    m.first_tagged_ = o.queries_weighted ? 0 : m.questions_.size();
    return m;
  }

  const std::string zone = Absolute(o.zone);
  for (uint32_t i = 0; i < o.names; ++i) {
    auto q = MakeQuestion(common::Cat("n", i, ".", zone), qtype, false);
    if (!q.ok()) return absl::InvalidArgumentError(common::Cat("--zone: ", q.status().message()));
    m.questions_.push_back(*std::move(q));
  }
  m.first_tagged_ = m.questions_.size();
  for (const std::string& name : o.tagged_names) {
    auto q = MakeQuestion(name, qtype, true);
    if (!q.ok()) return absl::InvalidArgumentError(common::Cat("--tagged-name: ", q.status().message()));
    m.questions_.push_back(*std::move(q));
  }
  for (uint32_t i = 0; i < o.tagged_count; ++i) {
    auto q = MakeQuestion(common::Cat("t", i, ".", Absolute(o.tagged_zone)), qtype, true);
    if (!q.ok()) return absl::InvalidArgumentError(common::Cat("--tagged-zone: ", q.status().message()));
    m.questions_.push_back(*std::move(q));
  }
  const size_t ordinary = m.first_tagged_, tagged = m.questions_.size() - m.first_tagged_;
  if (ordinary + tagged == 0 && o.miss_fraction < 1.0) {
    return absl::InvalidArgumentError("no names to query: --names 0 and no tagged names");
  }
  if (o.tagged_fraction) {
    m.tagged_fraction_ = *o.tagged_fraction;
    if (m.tagged_fraction_ > 0 && tagged == 0) {
      return absl::InvalidArgumentError("--tagged-fraction given but no --tagged-name or --tagged-zone");
    }
    if (m.tagged_fraction_ + m.miss_fraction_ < 1.0 && ordinary == 0) {
      return absl::InvalidArgumentError(
          "--tagged-fraction below 1 with --names 0: nothing to send the rest to");
    }
  } else {
    m.tagged_fraction_ = tagged == 0 ? 0 : ordinary == 0 ? 1.0 - m.miss_fraction_ : 0.1;
  }
  std::vector<double> weights(ordinary);
  for (size_t i = 0; i < ordinary; ++i) weights[i] = 1.0 / std::pow(static_cast<double>(i + 1), o.zipf);
  m.ordinary_.Build(weights);
  return m;
}

Draw QueryMix::Next(std::mt19937_64& rng, uint64_t* cursor) const {
  Draw d;
  // One 64-bit draw split into uniform fractions for the cheap choices.
  auto uniform = [&rng]() { return static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0); };
  if (from_file_) {
    d.question = file_order_[(*cursor)++ % file_order_.size()];
  } else {
    const double u = uniform();
    if (u < miss_fraction_) {
      d.question = kMiss;
    } else if (u < miss_fraction_ + tagged_fraction_) {
      const size_t tagged = questions_.size() - first_tagged_;
      d.question = static_cast<uint32_t>(first_tagged_ + rng() % tagged);
    } else {
      d.question = ordinary_.Draw(rng);
    }
  }
  if (tcp_fraction_ > 0) d.tcp = uniform() < tcp_fraction_;
  if (ecs_fraction_ > 0) d.ecs = uniform() < ecs_fraction_;
  if (weight_fraction_ > 0) d.weight = uniform() < weight_fraction_;
  if (edns_fraction_ > 0) d.edns = uniform() < edns_fraction_;
  if (subscribers_) {
    d.subscriber = true;
    d.subnet = subscribers_->Draw(rng);
  }
  d.edns = d.edns || d.ecs || d.weight || d.subscriber;
  return d;
}

size_t WriteQuery(uint16_t id, std::span<const uint8_t> qname, uint16_t qtype, const QueryOptions& qo,
                  uint8_t* out, size_t cap) {
  dns::ResponseWriter w(out, cap);
  if (w.Begin(id, dns::flag::kRd, qname, qtype, dns::klass::kIn) != dns::ParseError::kOk) return 0;
  if (qo.edns) {
    if (w.BeginOpt(qo.edns_size, false) != dns::ParseError::kOk) return 0;
    if (qo.ecs != nullptr && w.AddEcs(*qo.ecs) != dns::ParseError::kOk) return 0;
    if (qo.weight && w.AddWeights(qo.weight_option_code, {}) != dns::ParseError::kOk) return 0;
  }
  return w.Finish(cap);
}

}  // namespace weir::bench
