#pragma once
// The fixture generator's deterministic random numbers (tests/make_fixtures.cpp,
// tests/fixture_inflate_llama.cpp): splitmix64 and a polar Box-Muller whose logarithm is
// computed with + - * / only (IEEE exact, and the build forbids FMA contraction), not
// <random>'s distributions or libm, whose results differ between implementations, so that
// a file is byte-identical from run to run and from machine to machine.
#include <cmath>
#include <cstdint>
#include <string_view>

namespace flashspec::fixtures {

inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Natural log of x > 0 from frexp (exact) and the atanh series on [sqrt(1/2), sqrt(2)):
// log m = 2 z (1 + z^2/3 + z^4/5 + ...), z = (m - 1) / (m + 1), |z| <= 0.1716, so that 12
// terms reach double precision.
inline double det_log(double x) {
  static constexpr double kInvOdd[12] = {1.0 / 1,  1.0 / 3,  1.0 / 5,  1.0 / 7,  1.0 / 9,  1.0 / 11,
                                         1.0 / 13, 1.0 / 15, 1.0 / 17, 1.0 / 19, 1.0 / 21, 1.0 / 23};
  int e = 0;
  double m = std::frexp(x, &e);  // x = m * 2^e, m in [0.5, 1)
  if (m < 0.70710678118654752) {
    m *= 2.0;
    e -= 1;
  }
  const double z = (m - 1.0) / (m + 1.0);
  const double z2 = z * z;
  double p = kInvOdd[11];
  for (int k = 10; k >= 0; --k) p = p * z2 + kInvOdd[k];
  return double(e) * 0.69314718055994531 + 2.0 * z * p;
}

// e^x for |x| <= 3 by its Taylor series (used for a handful of values).
inline double det_exp(double x) {
  double term = 1.0, sum = 1.0;
  for (int k = 1; k < 40; ++k) {
    term *= x / double(k);
    sum += term;
  }
  return sum;
}

struct Rng {
  explicit Rng(uint64_t seed) : state(seed) {}
  uint64_t bits() { return splitmix64(state); }
  double uniform() { return double(bits() >> 11) * 0x1.0p-53; }  // [0, 1)
  double normal() {  // N(0, 1), Marsaglia's polar form of Box-Muller
    if (has_spare) {
      has_spare = false;
      return spare;
    }
    for (;;) {
      const double u = 2.0 * uniform() - 1.0, v = 2.0 * uniform() - 1.0;
      const double s = u * u + v * v;
      if (s <= 0.0 || s >= 1.0) continue;
      const double m = std::sqrt(-2.0 * det_log(s) / s);
      spare = v * m;
      has_spare = true;
      return u * m;
    }
  }
  uint64_t state;
  double spare = 0.0;
  bool has_spare = false;
};

}  // namespace flashspec::fixtures
