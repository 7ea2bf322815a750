#include "engine/commands/sweep_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <stdexcept>

namespace trainer::engine {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// VALUE cut at the commas outside brackets, braces, parentheses and quotes.
std::vector<std::string> top_level_split(const std::string& v, const std::string& set) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  char quote = 0;
  for (char c : v) {
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '[' || c == '{' || c == '(') {
      ++depth;
    } else if (c == ']' || c == '}' || c == ')') {
      if (--depth < 0) throw std::invalid_argument("--set " + set + ": '" + std::string(1, c) + "' closes nothing");
    } else if (c == ',' && depth == 0) {
      out.push_back(trim(cur));
      cur.clear();
      continue;
    }
    cur += c;
  }
  if (quote || depth != 0) throw std::invalid_argument("--set " + set + ": an unclosed quote or bracket");
  out.push_back(trim(cur));
  for (const auto& p : out)
    if (p.empty()) throw std::invalid_argument("--set " + set + ": an empty value between commas");
  return out;
}

double parse_bound(const std::string& text, const std::string& set) {
  try {
    size_t used = 0;
    const double v = std::stod(trim(text), &used);
    if (used == trim(text).size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument("--set " + set + ": '" + trim(text) + "' is not a finite number");
}

// "uniform(a,b)" and its kin: the axis, or false when `v` names no distribution.
bool parse_distribution(const std::string& v, const std::string& set, SweepAxis& axis) {
  static const std::pair<const char*, SweepDist> kinds[] = {
      {"uniform(", SweepDist::Uniform}, {"loguniform(", SweepDist::LogUniform}, {"randint(", SweepDist::RandInt}};
  for (const auto& [prefix, kind] : kinds) {
    const std::string p = prefix;
    if (v.rfind(p, 0) != 0) continue;
    if (v.back() != ')') throw std::invalid_argument("--set " + set + ": " + p + "LOW,HIGH) does not end with ')'");
    const auto args = top_level_split(v.substr(p.size(), v.size() - p.size() - 1), set);
    if (args.size() != 2) throw std::invalid_argument("--set " + set + ": " + p + "LOW,HIGH) takes two numbers");
    axis.dist = kind;
    axis.lo = parse_bound(args[0], set);
    axis.hi = parse_bound(args[1], set);
    if (!(axis.lo < axis.hi)) throw std::invalid_argument("--set " + set + ": LOW must be below HIGH");
    if (kind == SweepDist::LogUniform && axis.lo <= 0)
      throw std::invalid_argument("--set " + set + ": loguniform needs 0 < LOW");
    if (kind == SweepDist::RandInt && (axis.lo != std::floor(axis.lo) || axis.hi != std::floor(axis.hi)))
      throw std::invalid_argument("--set " + set + ": randint takes whole numbers");
    return true;
  }
  return false;
}

// A uniform double in [0, 1) from 53 bits: std::uniform_real_distribution differs between standard
// libraries, this does not (mt19937_64 is specified to the bit).
double unit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

std::string draw(const SweepAxis& a, std::mt19937_64& rng) {
  switch (a.dist) {
    case SweepDist::List: return a.values[static_cast<size_t>(unit(rng) * static_cast<double>(a.values.size()))];
    case SweepDist::Uniform: return fmt::format("{:.4g}", a.lo + (a.hi - a.lo) * unit(rng));
    case SweepDist::LogUniform:
      return fmt::format("{:.4g}", std::exp(std::log(a.lo) + (std::log(a.hi) - std::log(a.lo)) * unit(rng)));
    case SweepDist::RandInt:
      return fmt::format("{:.0f}", a.lo + std::floor(unit(rng) * (a.hi - a.lo + 1)));
  }
  return "";
}

// Grid point `index` (mixed radix, the first axis slowest).
SweepPoint grid_point(const SweepSpec& spec, uint64_t index) {
  SweepPoint p;
  p.values.resize(spec.axes.size());
  for (size_t i = spec.axes.size(); i-- > 0;) {
    const auto& a = spec.axes[i];
    p.values[i] = {a.key, a.values[index % a.values.size()]};
    index /= a.values.size();
  }
  return p;
}

std::string name_part(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '[' || c == ']' || c == '{' || c == '}' || c == ' ' || c == '"' || c == '\'') continue;
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '+' || c == '-';
    out += ok ? c : '_';
  }
  return out.empty() ? "_" : out;
}

}  // namespace

bool SweepSpec::has_distribution() const {
  return std::any_of(axes.begin(), axes.end(), [](const SweepAxis& a) { return a.dist != SweepDist::List; });
}

double SweepSpec::grid_size() const {
  double n = 1;
  for (const auto& a : axes) n *= static_cast<double>(a.values.size());
  return n;
}

std::vector<std::string> SweepPoint::overrides() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : values) out.push_back(k + "=" + v);
  return out;
}

SweepSpec parse_sweep_sets(const std::vector<std::string>& sets) {
  SweepSpec spec;
  std::set<std::string> keys;
  for (const auto& set : sets) {
    const auto eq = set.find('=');
    if (eq == std::string::npos || eq == 0)
      throw std::invalid_argument("--set " + set + ": expected KEY=VALUE (VALUE: one value, a,b,c or uniform(a,b))");
    const std::string key = trim(set.substr(0, eq)), value = trim(set.substr(eq + 1));
    if (!keys.insert(key).second)
      throw std::invalid_argument("--set " + set + ": " + key + " is set twice; list its values in one --set (" + key +
                                  "=a,b,c)");
    if (key == "run.name" || key == "run.out_dir")
      throw std::invalid_argument("--set " + set + ": a sweep names its points' run folders itself (use --name and "
                                  "--out-dir for the sweep's folder)");
    SweepAxis axis;
    axis.key = key;
    if (!value.empty() && parse_distribution(value, set, axis)) {
      spec.axes.push_back(axis);
      continue;
    }
    auto values = value.empty() ? std::vector<std::string>{""} : top_level_split(value, set);
    if (values.size() == 1) {
      spec.fixed.push_back(key + "=" + value);
      continue;
    }
    // numbers compared as numbers: 1e-3,0.001 trained one config twice in two folders
    auto canonical = [](const std::string& v) {
      char* end = nullptr;
      const double d = std::strtod(v.c_str(), &end);
      return !v.empty() && end == v.c_str() + v.size() && std::isfinite(d) ? fmt::format("{}", d) : v;
    };
    std::map<std::string, std::string> seen;  // canonical -> as written
    for (const auto& v : values)
      if (const auto [it, fresh] = seen.emplace(canonical(v), v); !fresh)
        throw std::invalid_argument("--set " + set + ": the value " + v + " is listed twice" +
                                    (it->second == v ? "" : " (as " + it->second + ")"));
    axis.values = std::move(values);
    spec.axes.push_back(axis);
  }
  return spec;
}

namespace {
constexpr int64_t kMaxSweepPoints = 100000;  // a sweep's points, grid or drawn (each is a run)
}  // namespace

std::vector<SweepPoint> grid_points(const SweepSpec& spec) {
  for (const auto& a : spec.axes)
    if (a.dist != SweepDist::List)
      throw std::invalid_argument("--set " + a.key + "=...: a distribution is drawn from, not a grid: add --random N");
  if (spec.grid_size() > kMaxSweepPoints)
    throw std::invalid_argument(fmt::format("the grid has {:.0f} points; at most {} (sample some with --random N)",
                                            spec.grid_size(), kMaxSweepPoints));
  std::vector<SweepPoint> points;
  const auto n = static_cast<uint64_t>(spec.grid_size());
  for (uint64_t i = 0; i < n; ++i) points.push_back(grid_point(spec, i));
  name_points(spec, points);
  return points;
}

std::vector<SweepPoint> random_points(const SweepSpec& spec, int64_t n, uint64_t seed) {
  if (n <= 0) throw std::invalid_argument("--random takes a positive count");
  if (n > kMaxSweepPoints)  // each point is a run: a count beyond this is a typo, not a sweep
    throw std::invalid_argument(fmt::format("--random {}: at most {} points", n, kMaxSweepPoints));
  std::mt19937_64 rng(seed);
  std::vector<SweepPoint> points;
  if (!spec.has_distribution()) {
    // distinct grid points: a partial shuffle of the indices when the grid is small, else rejection
    const double size = spec.grid_size();
    if (size <= static_cast<double>(n)) return grid_points(spec);
    std::set<uint64_t> taken;
    while (static_cast<int64_t>(points.size()) < n) {
      const auto i = static_cast<uint64_t>(unit(rng) * size);
      if (taken.insert(i).second) points.push_back(grid_point(spec, i));
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      SweepPoint p;
      for (const auto& a : spec.axes) p.values.emplace_back(a.key, draw(a, rng));
      points.push_back(std::move(p));
    }
  }
  name_points(spec, points);
  return points;
}

void name_points(const SweepSpec& spec, std::vector<SweepPoint>& points) {
  std::map<std::string, int> leaf_count;
  auto leaf = [](const std::string& key) { return key.substr(key.rfind('.') + 1); };
  for (const auto& a : spec.axes) ++leaf_count[leaf(a.key)];
  std::map<std::string, int> used;
  for (auto& p : points) {
    std::string name;
    for (const auto& [k, v] : p.values) {
      const std::string label = leaf_count[leaf(k)] > 1 ? k : leaf(k);
      name += (name.empty() ? "" : ",") + label + "=" + name_part(v);
    }
    if (name.size() > 200) name = name.substr(0, 200);
    if (name.empty()) name = "point";
    const int n = ++used[name];
    p.name = n == 1 ? name : fmt::format("{}-{}", name, n);
  }
}

}  // namespace trainer::engine
