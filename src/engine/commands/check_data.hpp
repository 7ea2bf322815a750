// `trainer check`'s read of the data a run would read: every image header (or every image, with
// --decode-all), so a file the first epoch would refuse or skip is named before the run starts.
#pragma once

#include <ostream>
#include <string>

#include "data/dataset.hpp"

namespace trainer::engine {

// Reads `ds` (the split named `split`) through Dataset::audit and prints what it read. Bad samples
// are an error naming the first few (data.on_bad_sample: error, `skip_bad` false) or a warning with
// their count (skip: the run will leave them out); a split with nothing left to read prints nothing.
// Headers are read 2 x cores at once (4 to 32), whole images one per core; a read of more than a few
// seconds says how far it got on stderr every 5 s.
void check_data(const data::Dataset& ds, const std::string& split, bool skip_bad, bool decode, std::ostream& out);

// The datasets `check` reads, opened as a run opens them. When the normalisation statistics (mean_std
// without mean and std given) stop at the first bad image, the files are read without them first, so
// that the error names every bad file (the first five, then the count), not the first.
data::DatasetPair open_for_check(const config::RunConfig& c, bool decode);

}  // namespace trainer::engine
