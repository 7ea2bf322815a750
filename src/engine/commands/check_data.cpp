#include "engine/commands/check_data.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <sstream>
#include <thread>

namespace trainer::engine {
namespace {

int audit_threads() {
  // a header read mostly waits on the disk (a network filesystem's round trip): more reads in flight
  // than cores; a decode is a core's work
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::clamp(2 * cores, 4, 32);
}

}  // namespace

void check_data(const data::Dataset& ds, const std::string& split, bool skip_bad, bool decode, std::ostream& out) {
  const std::string what = decode ? "images decoded" : "image headers read";
  data::Dataset::AuditOptions o;
  o.decode = decode;
  o.threads = decode ? std::max(1u, std::thread::hardware_concurrency()) : audit_threads();
  o.progress = [&](int64_t done, int64_t total) {  // a large folder: what it is doing, on stderr
    std::cerr << fmt::format("check: {} data: {} of {} {} ({:.0f} %)\n", split, done, total, what,
                             100.0 * static_cast<double>(done) / static_cast<double>(std::max<int64_t>(total, 1)))
              << std::flush;
  };
  const data::Dataset::Audit a = ds.audit(o);
  if (a.read == 0) return;
  if (a.bad.empty()) {
    out << fmt::format("{} data: {} {}, all good\n", split, a.read, what);
    return;
  }
  constexpr size_t kNamed = 5;  // the first few: a folder of a million bad files is one message
  std::string named;
  for (size_t i = 0; i < std::min(kNamed, a.bad.size()); ++i) named += "\n  " + a.bad[i];
  if (a.bad.size() > kNamed) named += fmt::format("\n  ... and {} more", a.bad.size() - kNamed);
  const std::string head = fmt::format("{} data: {} of {} {} are bad:", split, a.bad.size(), a.read, what);
  if (skip_bad && a.bad.size() == static_cast<size_t>(a.read))
    throw data::DataError(head + named + "\n(every one: with data.on_bad_sample: skip a run has nothing left to read)");
  if (!skip_bad)
    throw data::DataError(head + named + "\n(a run would stop at the first; set data.on_bad_sample: skip to leave "
                                         "them out)");
  out << "warning: " << head << named << "\n(data.on_bad_sample: skip: a run leaves them out)\n";
}

data::DatasetPair open_for_check(const config::RunConfig& c, bool decode) {
  try {
    return data::create_datasets(c.data, c.model, c.run.seed);
  } catch (const data::DataError&) {
    if (c.data.normalize.mode != config::NormalizeMode::MeanStd) throw;
    auto plain = c.data;
    plain.normalize.mode = config::NormalizeMode::None;
    const auto ds = data::create_datasets(plain, c.model, c.run.seed);
    std::ostringstream unused;
    const bool skip_bad = c.data.on_bad_sample == "skip";
    check_data(*ds.train, "train", skip_bad, decode, unused);  // throws naming every bad file
    if (ds.val) check_data(*ds.val, "val", skip_bad, decode, unused);
    throw;  // the files read: the statistics' own error
  }
}

}  // namespace trainer::engine
