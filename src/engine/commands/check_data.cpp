#include "engine/commands/check_data.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace trainer::engine {

void check_data(const data::Dataset& ds, const std::string& split, bool skip_bad, bool decode, std::ostream& out) {
  const data::Dataset::Audit a = ds.audit(decode);
  if (a.read == 0) return;
  const std::string what = decode ? "images decoded" : "image headers read";
  if (a.bad.empty()) {
    out << fmt::format("{} data: {} {}, all good\n", split, a.read, what);
    return;
  }
  constexpr size_t kNamed = 5;  // the first few: a folder of a million bad files is one message
  std::string named;
  for (size_t i = 0; i < std::min(kNamed, a.bad.size()); ++i) named += "\n  " + a.bad[i];
  if (a.bad.size() > kNamed) named += fmt::format("\n  ... and {} more", a.bad.size() - kNamed);
  const std::string head = fmt::format("{} data: {} of {} {} are bad:", split, a.bad.size(), a.read, what);
  if (!skip_bad)
    throw data::DataError(head + named + "\n(a run would stop at the first; set data.on_bad_sample: skip to leave "
                                         "them out)");
  out << "warning: " << head << named << "\n(data.on_bad_sample: skip: a run leaves them out)\n";
}

}  // namespace trainer::engine
