// `trainer sweep`'s points: the --set values that list several values (the grid's axes) or name a
// distribution (random search), expanded into points, each with its run folder's name. No I/O here:
// the command (sweep_command.cpp) validates and runs the points.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace trainer::engine {

enum class SweepDist { List, Uniform, LogUniform, RandInt };

struct SweepAxis {
  std::string key;                  // "optim.lr"
  SweepDist dist = SweepDist::List;
  std::vector<std::string> values;  // List: the values as YAML text, in the order given
  double lo = 0, hi = 0;            // the distributions' bounds (inclusive for randint)
};

struct SweepSpec {
  std::vector<std::string> fixed;  // KEY=VALUE overrides with one value: every point gets them
  std::vector<SweepAxis> axes;
  bool has_distribution() const;
  double grid_size() const;        // points of the grid (a double: a product of axes may be huge)
};

// Splits each --set into a fixed override or an axis. VALUE is cut at its top-level commas (not
// inside [], {}, () or quotes): "0.01,0.05" is two values, "[1, 2]" one. uniform(a,b),
// loguniform(a,b) (0 < a) and randint(a,b) are distributions. A key set twice is refused. Throws
// std::invalid_argument naming the --set.
SweepSpec parse_sweep_sets(const std::vector<std::string>& sets);

struct SweepPoint {
  std::string name;                                         // its run folder: "lr=0.05,batch_size=64"
  std::vector<std::pair<std::string, std::string>> values;  // (key, value text), in axis order
  std::vector<std::string> overrides() const;               // "key=value" for each axis
};

// Every combination, the first axis varying slowest (nested loops in the order given). Throws
// std::invalid_argument when an axis is a distribution (those need --random).
std::vector<SweepPoint> grid_points(const SweepSpec& spec);

// `n` points drawn with `seed` (the same seed, the same points on any machine). Axes of listed
// values alone: n distinct combinations in drawn order (the whole grid when it has no more). A
// distribution draws each point's value, rounded to 4 significant digits (the value run is the one
// its name shows).
std::vector<SweepPoint> random_points(const SweepSpec& spec, int64_t n, uint64_t seed);

// The folder name of a point: "leaf=value" per axis joined by ',' (the key's last part, or the
// whole key where two axes share a leaf), characters other than [A-Za-z0-9._+-] replaced, list
// brackets dropped. Names made equal by that get "-2", "-3", ... in order.
void name_points(const SweepSpec& spec, std::vector<SweepPoint>& points);

}  // namespace trainer::engine
