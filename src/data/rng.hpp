// Counter-based randomness: every random choice is a pure function of (seed, epoch, index), so a
// sample gets the same augmentation and a permutation the same order whatever the number of
// workers or ranks, and after a resume. No shared generator, no hidden state between samples.
#pragma once

#include <cstdint>

namespace trainer::data {

// splitmix64's finaliser: a bijective 64-bit mix with full avalanche.
constexpr uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

constexpr uint64_t hash_key(uint64_t a, uint64_t b) { return mix64(mix64(a) ^ (b * 0xD6E8FEB86659FD93ull)); }
constexpr uint64_t hash_key(uint64_t a, uint64_t b, uint64_t c) { return hash_key(hash_key(a, b), c); }

// A small splitmix64 stream seeded from a key: cheap to create per sample, on the stack.
class SampleRng {
 public:
  explicit SampleRng(uint64_t key) : state_(key) {}
  uint64_t next() { return mix64(state_++ * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull); }
  // Uniform integer in [0, n) (n > 0); the modulo bias is < n / 2^64, irrelevant here.
  uint64_t below(uint64_t n) { return next() % n; }
  // Uniform double in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  bool coin() { return (next() >> 63) != 0; }

 private:
  uint64_t state_;
};

// Stream names keep unrelated random uses apart even with equal (seed, epoch, index).
enum class RngStream : uint64_t { Shuffle = 1, Augment = 2, Synthetic = 3, ResizedCrop = 4, ColorJitter = 5, AlternateFlip = 6 };

inline SampleRng make_rng(RngStream stream, int64_t seed, int64_t epoch, int64_t index) {
  return SampleRng(hash_key(hash_key(static_cast<uint64_t>(stream), static_cast<uint64_t>(seed)),
                            static_cast<uint64_t>(epoch), static_cast<uint64_t>(index)));
}

}  // namespace trainer::data
