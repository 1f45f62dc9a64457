// The project's one pseudo-random generator: SplitMix64 (Steele, Lea and Flood 2014), a
// counter-based generator whose draws are the same on every machine and standard library
// (std distributions are not). Used wherever a draw must be reproducible from a seed: sample
// order, PartialFC's sampled classes, synthetic features and projections.
#pragma once

#include <cmath>
#include <cstdint>

namespace mlcd {

// The SplitMix64 finaliser: a well-mixed 64-bit hash of x (a bijection).
inline uint64_t Mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// One SplitMix64 step from state x: Mix64(x + golden gamma). SplitMix64(a) for a hash of a.
inline uint64_t SplitMix64(uint64_t x) { return Mix64(x + 0x9E3779B97F4A7C15ull); }

// The stream seeded with `state`: draw i is SplitMix64(state + i * gamma).
class SplitMix {
 public:
  explicit SplitMix(uint64_t state) : state_(state) {}

  uint64_t Next() {
    state_ += 0x9E3779B97F4A7C15ull;
    return Mix64(state_);
  }

  // Uniform integer in [0, bound), bound > 0, unbiased (Lemire's multiply-shift with
  // rejection).
  uint64_t Below(uint64_t bound) {
    unsigned __int128 m = static_cast<unsigned __int128>(Next()) * bound;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < bound) {
      const uint64_t threshold = (0 - bound) % bound;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(Next()) * bound;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

  // Integer in [0, bound), bound > 0, by one multiply-shift without rejection (bias below
  // bound / 2^64; one draw per call, so a hot loop's draw count is fixed).
  uint64_t BelowFast(uint64_t bound) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * bound) >> 64);
  }

  // Uniform double in (0, 1].
  double Uniform() {
    return (static_cast<double>(Next() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  }

  // Standard normal draw (Box-Muller; the second value of a pair is kept for the next call).
  double Gaussian() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = Uniform(), u2 = Uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2 * M_PI * u2);
    has_spare_ = true;
    return r * std::cos(2 * M_PI * u2);
  }

 private:
  uint64_t state_;
  double spare_ = 0;
  bool has_spare_ = false;
};

// The seed of stream `member` of the stream family `family` (e.g. a seed and one of its named
// draws): the second draw of SplitMix(family * gamma + member), so neighbouring members and
// families give unrelated streams.
inline uint64_t StreamSeed(uint64_t family, uint64_t member) {
  SplitMix m(family * 0x9E3779B97F4A7C15ull + member);
  m.Next();
  return m.Next();
}

}  // namespace mlcd
