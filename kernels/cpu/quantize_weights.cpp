// Weight quantizers: least-squares searches of each block's scales (see the header), then
// the format's packing. Everything below a type's packer works on plain integer codes:
// signed codes q for a grid x ~= d * level(q) (Q4_0, Q5_0, Q8_0, IQ4_NL, Q3_K, Q6_K) or
// unsigned codes for x ~= d * q + m (Q5_1, Q2_K, Q4_K, Q5_K). MXFP4, whose scale is a
// power of two, only searches its exponent.
#include "kernels/cpu/quantize_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "core/half.h"
#include "kernels/cpu/kquant_scales.h"

namespace flashspec {

namespace {

constexpr float kHalfMax = 65504.0f;
constexpr float kInf = std::numeric_limits<float>::infinity();

// v clamped to [lo, hi] (NaN gives lo) and rounded to nearest, ties to even. Adding and
// subtracting 1.5 * 2^23 rounds any |v| < 2^22 in the current (nearest) mode, inline, and
// the clamp is two comparisons: std::nearbyint, std::fmin and std::fmax are library calls
// on baseline x86-64, and this is the quantizers' inner loop.
inline int round_clamp(float v, int lo, int hi) {
  constexpr float kMagic = 12582912.0f;
  float c = v >= float(lo) ? v : float(lo);
  c = c <= float(hi) ? c : float(hi);
  return int((c + kMagic) - kMagic);
}

// A scale as stored: fp16, kept finite.
inline uint16_t half_of(float v) { return float_to_fp16(std::fmin(std::fmax(v, -kHalfMax), kHalfMax)); }
inline float as_half(float v) { return fp16_to_float(half_of(v)); }

// The fp16 value one step away from h in magnitude (dir = +-1), if finite and h is not 0
// going down.
inline bool half_neighbour(uint16_t h, int dir, uint16_t& out) {
  const int mag = h & 0x7fff;
  if (mag + dir < 0 || mag + dir >= 0x7c00) return false;
  out = uint16_t((h & 0x8000) | (mag + dir));
  return true;
}

// ---- Grids of levels for x ~= d * level(code). nearest(v) is the level closest to v as a
// float, written without table lookups or calls so that the search loops vectorize;
// code(level) turns a level from nearest() back into the stored code.

// Integer levels qmin..qmax (code = level).
struct LinearGrid {
  int qmin, qmax;
  float lo() const { return float(qmin); }
  float hi() const { return float(qmax); }
  int steps() const { return qmax - qmin; }
  float nearest(float v) const { return float(round_clamp(v, qmin, qmax)); }
  int code(float level) const { return int(level); }
  float level(int c) const { return float(c); }
};

// IQ4_NL's 16 levels (code = index): the lowest level plus each gap passed, by midpoints.
struct NonLinearGrid {
  float mid[15], gap[15];
  NonLinearGrid() {
    for (int k = 0; k < 15; ++k) {
      mid[k] = 0.5f * float(kIQ4NLValues[k] + kIQ4NLValues[k + 1]);  // exact: halves of integers
      gap[k] = float(kIQ4NLValues[k + 1] - kIQ4NLValues[k]);
    }
  }
  float lo() const { return float(kIQ4NLValues[0]); }
  float hi() const { return float(kIQ4NLValues[15]); }
  int steps() const { return 15; }
  float nearest(float v) const {
    float l = lo();
    for (int k = 0; k < 15; ++k) l += v > mid[k] ? gap[k] : 0.0f;
    return l;
  }
  int code(float level) const {
    int c = 0;
    while (float(kIQ4NLValues[c]) != level) ++c;
    return c;
  }
  float level(int c) const { return float(kIQ4NLValues[c]); }
};

constexpr int kMaxSub = 32;  // longest run fitted at once (a 32-weight block or sub-block)

// sum(x * l)^2 / sum(l * l) for the nearest levels l of x * iscale: the squared error of
// those codes at their least-squares scale is sum(x * x) minus this. n is a multiple of 8;
// eight partial sums keep the loop vectorizable.
template <class Grid>
double fit_score(const float* x, int n, const Grid& g, float iscale, double& d) {
  float sxl[8] = {}, sll[8] = {};
  for (int i0 = 0; i0 < n; i0 += 8)
    for (int k = 0; k < 8; ++k) {
      const float l = g.nearest(x[i0 + k] * iscale);
      sxl[k] += x[i0 + k] * l;
      sll[k] += l * l;
    }
  double a = 0, b = 0;
  for (int k = 0; k < 8; ++k) {
    a += sxl[k];
    b += sll[k];
  }
  d = b > 0 ? a / b : 0.0;
  return b > 0 ? a * a / b : -1.0;
}

// Codes for x ~= d * level(q) minimizing the squared error over d and the codes; returns d
// (0 for an all-zero run). Candidate scales put the largest |x| at or a little inside
// either end of the grid (one tenth of a level step apart, from half a step inside to half
// a step outside), each scored with its nearest codes at their least-squares scale; the
// best then alternates nearest codes and least-squares scale while that helps (each step
// can only lower the error). Three times as many candidates measured within 0.5% of this
// error (Q3_K: worse) at twice the time.
template <class Grid>
float fit_scale(const float* x, int n, const Grid& g, int8_t* q) {
  float amax = 0.0f, xm = 0.0f;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      xm = x[i];
    }
  if (!(amax > 0.0f) || !std::isfinite(amax)) {
    for (int i = 0; i < n; ++i) q[i] = int8_t(g.code(g.nearest(0.0f)));
    return 0.0f;
  }
  const float step = (g.hi() - g.lo()) / float(g.steps()) / 10.0f;
  double best = -1.0, d = 0.0;
  float best_iscale = 0.0f;
  for (const float e : {g.lo(), g.hi()}) {
    if (e == 0.0f) continue;
    for (int s = -5; s <= 5; ++s) {
      const float iscale = (e + (e < 0 ? -step : step) * float(s)) / xm;
      double dc;
      const double sc = fit_score(x, n, g, iscale, dc);
      if (sc > best) {
        best = sc;
        d = dc;
        best_iscale = iscale;
      }
    }
  }
  for (int it = 0; it < 8 && d != 0.0; ++it) {
    double dc;
    const double sc = fit_score(x, n, g, float(1.0 / d), dc);
    if (!(sc > best)) break;
    best = sc;
    best_iscale = float(1.0 / d);
    d = dc;
  }
  for (int i = 0; i < n; ++i) q[i] = int8_t(g.code(g.nearest(x[i] * best_iscale)));
  return float(d);
}

// x ~= d * q + m with q in 0..nmax and d >= 0; with nonpositive_min, m <= 0 (K-quant mins
// are subtracted magnitudes).
struct Affine {
  float d, m;
};

// Sums over a run of n (a multiple of 8) of the codes q = nearest((x - m) / d) in 0..nmax:
// sum(q), sum(q q), sum(x q). Eight partial sums keep the loop vectorizable.
struct CodeSums {
  double q = 0, qq = 0, xq = 0;
};

CodeSums affine_code_sums(const float* x, int n, int nmax, float m, float id) {
  float sq[8] = {}, sqq[8] = {}, sxq[8] = {};
  for (int i0 = 0; i0 < n; i0 += 8)
    for (int k = 0; k < 8; ++k) {
      const float q = float(round_clamp((x[i0 + k] - m) * id, 0, nmax));
      sq[k] += q;
      sqq[k] += q * q;
      sxq[k] += x[i0 + k] * q;
    }
  CodeSums r;
  for (int k = 0; k < 8; ++k) {
    r.q += sq[k];
    r.qq += sqq[k];
    r.xq += sxq[k];
  }
  return r;
}

// Least-squares (d, m) for codes with sums c over a run with sum(x) = sx, sum(x x) = sxx,
// and the squared error; false when the codes determine no positive scale. Codes all
// equal (det = 0) leave d and m free along a line: the one with m = 0 is taken.
bool solve_affine(int n, double sx, double sxx, const CodeSums& c, bool nonpositive_min, Affine& out,
                  double& err) {
  const double det = n * c.qq - c.q * c.q;
  double d = 0, m = 0;
  if (det > 0) {
    d = (n * c.xq - c.q * sx) / det;
    m = (c.qq * sx - c.q * c.xq) / det;
  }
  if (det <= 0 || (nonpositive_min && m > 0)) {
    if (c.qq <= 0) return false;
    m = 0;
    d = c.xq / c.qq;
  }
  if (!(d > 0)) return false;
  out = {float(d), float(m)};
  err = sxx - 2 * d * c.xq - 2 * m * sx + d * d * c.qq + 2 * d * m * c.q + n * m * m;
  return true;
}

// Codes and (d, m) minimizing the squared error: candidate steps spread the range over
// nmax - 1 .. nmax + 1 levels from the minimum, each with its least-squares (d, m), the
// best alternated with nearest codes while that helps. n is a multiple of 8.
Affine fit_affine(const float* x, int n, int nmax, bool nonpositive_min, uint8_t* q) {
  float lo = x[0], hi = x[0];
  double sx = 0, sxx = 0;
  for (int i = 0; i < n; ++i) {
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
    sx += x[i];
    sxx += double(x[i]) * x[i];
  }
  if (nonpositive_min && lo > 0.0f) lo = 0.0f;
  Affine best{0.0f, std::isfinite(lo) ? lo : 0.0f};
  if (!(hi > lo) || !std::isfinite(hi - lo)) {  // constant run: all of it in the min
    std::memset(q, 0, size_t(n));
    return best;
  }
  double best_err = kInf;
  float code_m = lo, code_id = 0.0f;  // the codes of `best`: nearest((x - code_m) * code_id)
  for (int s = -10; s <= 10; ++s) {
    const float id = (float(nmax) + 0.1f * float(s)) / (hi - lo);
    Affine a;
    double err;
    const CodeSums sums = affine_code_sums(x, n, nmax, lo, id);
    if (solve_affine(n, sx, sxx, sums, nonpositive_min, a, err) && err < best_err) {
      best_err = err;
      best = a;
      code_m = lo;
      code_id = id;
    }
  }
  for (int it = 0; it < 8 && best.d > 0.0f; ++it) {
    const float id = 1.0f / best.d, m = best.m;
    Affine a;
    double err;
    if (!solve_affine(n, sx, sxx, affine_code_sums(x, n, nmax, m, id), nonpositive_min, a, err) ||
        !(err < best_err))
      break;
    best_err = err;
    best = a;
    code_m = m;
    code_id = id;
  }
  for (int i = 0; i < n; ++i) q[i] = uint8_t(round_clamp((x[i] - code_m) * code_id, 0, nmax));
  return best;
}

// ---- 32-weight blocks with one fp16 scale: fit, then the stored scale and its two fp16
// neighbours tried with their nearest codes, measured as dequantize_row decodes.

// Scale 0 is a candidate too: where the scale underflows fp16 (weights near 1e-7), zeros
// are closer than anything the rounded scale can express.
template <class Grid>
uint16_t quantize_scaled_block(const float* x, const Grid& g, int8_t* q) {
  const float d = fit_scale(x, 32, g, q);
  const uint16_t h0 = half_of(d);
  uint16_t best_h = h0;
  float best_err = kInf;
  int8_t cand[32];
  for (int dir : {0, -1, 1, 2}) {
    uint16_t h = dir == 2 ? 0 : h0;
    if ((dir == -1 || dir == 1) && !half_neighbour(h0, dir, h)) continue;
    const float dh = fp16_to_float(h);
    const float id = dh != 0.0f ? 1.0f / dh : 0.0f;
    float err = 0.0f;
    for (int i = 0; i < 32; ++i) {
      const float l = g.nearest(x[i] * id);
      cand[i] = int8_t(g.code(l));
      const float e = dh * l - x[i];
      err += e * e;
    }
    if (err < best_err) {
      best_err = err;
      best_h = h;
      std::memcpy(q, cand, 32);
    }
  }
  return best_h;
}

// Nibbles of 32 codes as Q4_0 / IQ4_NL / MXFP4 store them: weight i low, weight i + 16 high.
void pack_nibbles(const uint8_t* c, uint8_t* qs) {
  for (int i = 0; i < 16; ++i) qs[i] = uint8_t((c[i] & 0x0f) | ((c[i + 16] & 0x0f) << 4));
}

// Nibbles and bit 4 of 32 five-bit codes as Q5_0 / Q5_1 store them.
void pack_q5(const uint8_t* c, uint8_t* qs, uint8_t* qh) {
  pack_nibbles(c, qs);
  uint32_t h = 0;
  for (int i = 0; i < 32; ++i) h |= uint32_t((c[i] >> 4) & 1) << i;
  std::memcpy(qh, &h, 4);
}

// Q4_0 / Q5_0: signed codes -zero .. zero - 1 stored as q + zero (w = d * (stored - zero)).
template <class Block, int kZero>
void quantize_zero_point(const float* x, Block* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    int8_t q[32];
    y[b].d = quantize_scaled_block(x, LinearGrid{-kZero, kZero - 1}, q);
    uint8_t c[32];
    for (int i = 0; i < 32; ++i) c[i] = uint8_t(q[i] + kZero);
    if constexpr (std::is_same_v<Block, BlockQ5_0>)
      pack_q5(c, y[b].qs, y[b].qh);
    else
      pack_nibbles(c, y[b].qs);
  }
}

void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t nb) {
  // -127..127: the symmetric range llama.cpp writes (-128 is valid but buys nothing).
  for (int64_t b = 0; b < nb; ++b, x += 32) y[b].d = quantize_scaled_block(x, LinearGrid{-127, 127}, y[b].qs);
}

void quantize_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    int8_t q[32];
    y[b].d = quantize_scaled_block(x, NonLinearGrid{}, q);
    pack_nibbles(reinterpret_cast<const uint8_t*>(q), y[b].qs);
  }
}

// The MXFP4 code whose level times d is nearest v: the first of equally near ones, as
// ggml picks (so 0 is code 0, never the -0 of code 8).
inline uint8_t mxfp4_code(float v, float d) {
  uint8_t best = 0;
  float best_err = std::fabs(float(kMXFP4Values[0]) * d - v);
  for (uint8_t c = 1; c < 16; ++c) {
    const float err = std::fabs(float(kMXFP4Values[c]) * d - v);
    if (err < best_err) {
      best = c;
      best_err = err;
    }
  }
  return best;
}

// MXFP4: ggml derives the exponent from the block's largest magnitude, the scale
// 2^(floor(log2 amax) - 3), which clips magnitudes above 1.5 * 2^floor(log2 amax) to the
// top level 12. The exponents one below and one above are tried too, and the one of least
// squared error is kept (ggml's on a tie), so no block comes out worse than ggml's.
void quantize_mxfp4(const float* x, BlockMXFP4* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += QK_MXFP4) {
    float amax = 0.0f;
    for (int i = 0; i < QK_MXFP4; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    int e0 = 0;  // an all-zero block: ggml's e = 0, every code 0
    if (amax > 0.0f) {
      int k = 0;
      std::frexp(amax, &k);  // amax in [2^(k-1), 2^k): floor(log2 amax) = k - 1, exactly
      e0 = std::clamp(k - 1 - 2 + 127, 0, 255);
    }
    double best_err = kInf;
    uint8_t best_e = uint8_t(e0), best_c[QK_MXFP4] = {};
    for (int e : {e0, e0 - 1, e0 + 1}) {
      if (e < 0 || e > 255 || (amax == 0.0f && e != e0)) continue;
      const float d = e8m0_half_to_float(uint8_t(e));
      uint8_t c[QK_MXFP4];
      double err = 0;
      for (int i = 0; i < QK_MXFP4; ++i) {
        c[i] = mxfp4_code(x[i], d);
        const double r = double(d * float(kMXFP4Values[c[i]])) - double(x[i]);  // inf past 2^128
        err += r * r;
      }
      if (err < best_err) {
        best_err = err;
        best_e = uint8_t(e);
        std::memcpy(best_c, c, sizeof c);
      }
    }
    y[b].e = best_e;
    pack_nibbles(best_c, y[b].qs);
  }
}

void quantize_q5_1(const float* x, BlockQ5_1* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    uint8_t q[32], cand[32];
    const Affine a = fit_affine(x, 32, 31, false, q);
    // The stored pair: each of d and m at its fp16 value or a neighbour, nearest codes.
    const uint16_t d0 = half_of(a.d), m0 = half_of(a.m);
    uint16_t best_d = d0, best_m = m0;
    float best_err = kInf;
    // (d = 0 too: every weight at the min, for runs whose step underflows fp16.)
    for (int dd : {0, -1, 1, 2})
      for (int dm : {0, -1, 1}) {
        uint16_t hd = dd == 2 ? 0 : d0, hm = m0;
        const bool d_ok = dd == 0 || dd == 2 || half_neighbour(d0, dd, hd);
        if (!d_ok || (dm != 0 && !half_neighbour(m0, dm, hm))) continue;
        const float d = fp16_to_float(hd), m = fp16_to_float(hm);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        float err = 0.0f;
        for (int i = 0; i < 32; ++i) {
          cand[i] = uint8_t(round_clamp((x[i] - m) * id, 0, 31));
          const float e = d * float(cand[i]) + m - x[i];
          err += e * e;
        }
        if (err < best_err) {
          best_err = err;
          best_d = hd;
          best_m = hm;
          std::memcpy(q, cand, 32);
        }
      }
    y[b].d = best_d;
    y[b].m = best_m;
    pack_q5(q, y[b].qs, y[b].qh);
  }
}

// ---- K-quants: 256 weights in sub-blocks, each with an integer scale (and min) times an
// fp16 super-block scale (and min scale).

struct KSpec {
  int nsub, len;     // sub-blocks and their length (nsub * len = 256)
  int qmin, qmax;    // codes
  int smin, smax;    // integer sub-block scales
  int mmax;          // integer sub-block mins 0..mmax; 0 for the types without mins
};

struct KBlock {
  float D = 0.0f, Dm = 0.0f;  // fp16-exact super-block scale and min scale
  int sc[16] = {}, mq[16] = {};
  int8_t q[QK_K] = {};  // codes in qmin..qmax
  double err = kInf;
};

// Nearest codes of one sub-block for the value dl * q - ml (dequantize_row's arithmetic).
void sub_block_codes(const float* x, const KSpec& s, float dl, float ml, int8_t* q) {
  const float id = dl != 0.0f ? 1.0f / dl : 0.0f;
  for (int i = 0; i < s.len; ++i) q[i] = int8_t(round_clamp((x[i] + ml) * id, s.qmin, s.qmax));
}

// The squared error of those codes; eight partial sums keep the loop vectorizable.
float sub_block_error(const float* x, const KSpec& s, float dl, float ml) {
  const float id = dl != 0.0f ? 1.0f / dl : 0.0f;
  float part[8] = {};
  for (int i0 = 0; i0 < s.len; i0 += 8)
    for (int k = 0; k < 8; ++k) {
      const float q = float(round_clamp((x[i0 + k] + ml) * id, s.qmin, s.qmax));
      const float e = dl * q - ml - x[i0 + k];
      part[k] += e * e;
    }
  float err = 0.0f;
  for (float p : part) err += p;
  return err;
}

// Sub-block j's integer scale and min, starting from (sc, mq), set to the best of their
// neighbours (each +-1) for the super-block scales of b; codes follow. Returns the error.
double settle_sub_block(const float* x, const KSpec& s, int j, int sc, int mq, KBlock& b) {
  float best = kInf;
  for (int dsc = -1; dsc <= 1; ++dsc) {
    const int c = sc + dsc;
    if (c < s.smin || c > s.smax) continue;
    for (int dm = (s.mmax > 0 ? -1 : 0); dm <= (s.mmax > 0 ? 1 : 0); ++dm) {
      const int m = mq + dm;
      if (m < 0 || m > s.mmax) continue;
      const float err = sub_block_error(x, s, b.D * float(c), b.Dm * float(m));
      if (err < best) {
        best = err;
        b.sc[j] = c;
        b.mq[j] = m;
      }
    }
  }
  sub_block_codes(x, s, b.D * float(b.sc[j]), b.Dm * float(b.mq[j]), b.q + j * s.len);
  return best;
}

// b's integers and codes for its super-block scales b.D, b.Dm, starting each sub-block
// from the rounded ratio of its own fitted scale d[j] (and min M[j]) or, with `from_b`,
// from b's current integers; b.err becomes the block's squared error.
void settle_block(const float* x, const KSpec& s, const float* d, const float* M, bool from_b, KBlock& b) {
  double total = 0;
  for (int j = 0; j < s.nsub; ++j) {
    int sc = b.sc[j], mq = b.mq[j];
    if (!from_b) {
      sc = b.D != 0.0f ? round_clamp(d[j] / b.D, s.smin, s.smax) : 0;
      mq = b.Dm != 0.0f ? round_clamp(M[j] / b.Dm, 0, s.mmax) : 0;
    }
    total += settle_sub_block(x + j * s.len, s, j, sc, mq, b);
  }
  b.err = total;
}

// The least-squares super-block scales for b's integers and codes: x ~= D * (sc q) - Dm * m
// (b's own where that has no solution with D > 0 and Dm >= 0).
void refit_super_scales(const float* x, const KSpec& s, const KBlock& b, float& D, float& Dm) {
  double saa = 0, sab = 0, sbb = 0, sxa = 0, sxb = 0;
  for (int i = 0; i < QK_K; ++i) {
    const int j = i / s.len;
    const double a = double(b.sc[j]) * b.q[i], c = s.mmax > 0 ? -double(b.mq[j]) : 0.0;
    saa += a * a;
    sab += a * c;
    sbb += c * c;
    sxa += double(x[i]) * a;
    sxb += double(x[i]) * c;
  }
  D = b.D;
  Dm = b.Dm;
  if (saa <= 0) return;
  const double det = saa * sbb - sab * sab;
  if (s.mmax > 0 && det > 0) {
    const double dd = (sxa * sbb - sab * sxb) / det, dm = (saa * sxb - sab * sxa) / det;
    if (dm >= 0 && dd > 0) {
      D = float(dd);
      Dm = float(dm);
      return;
    }
  }
  if (s.mmax == 0) D = float(sxa / saa);
}

KBlock quantize_k_block(const float* x, const KSpec& s) {
  float d[16] = {}, M[16] = {};
  for (int j = 0; j < s.nsub; ++j) {
    if (s.mmax > 0) {
      uint8_t c[kMaxSub];
      const Affine a = fit_affine(x + j * s.len, s.len, s.qmax, true, c);
      d[j] = a.d;
      M[j] = -a.m;
    } else {
      int8_t c[kMaxSub];
      d[j] = fit_scale(x + j * s.len, s.len, LinearGrid{s.qmin, s.qmax}, c);
    }
  }
  // Super-block scales from the largest fitted ones: the largest scale (signed types:
  // the largest magnitude, tried at either end of the signed range) at the top integer.
  float dmax = 0.0f, Mmax = 0.0f;
  for (int j = 0; j < s.nsub; ++j) {
    if (std::fabs(d[j]) > std::fabs(dmax)) dmax = d[j];
    Mmax = std::fmax(Mmax, M[j]);
  }
  KBlock best;
  auto consider = [&](float D, float Dm, bool from_b, const KBlock* start) {
    KBlock b = start ? *start : KBlock{};
    b.D = as_half(D);
    b.Dm = as_half(Dm);
    settle_block(x, s, d, M, from_b, b);
    if (b.err < best.err) best = b;
  };
  const float Dm0 = s.mmax > 0 ? Mmax / float(s.mmax) : 0.0f;
  consider(dmax / float(s.smax), Dm0, false, nullptr);
  if (s.smin < 0) consider(dmax / float(s.smin), Dm0, false, nullptr);
  // Joint refinement: least-squares super-block scales for the chosen integers and codes,
  // then each integer moved to its best neighbour, while it helps. (Re-deriving the
  // integers from the sub-block fits here measured no better, at a third more time.)
  for (int round = 0; round < 4; ++round) {
    const double before = best.err;
    float D, Dm;
    refit_super_scales(x, s, best, D, Dm);
    const KBlock current = best;
    consider(D, Dm, true, &current);
    if (!(best.err < before)) break;
  }
  // An all-zero block where the super-block scales underflow fp16 and rounding makes
  // things worse than nothing (weights near 1e-7).
  double sxx = 0;
  for (int i = 0; i < QK_K; ++i) sxx += double(x[i]) * x[i];
  if (!(best.err <= sxx)) {
    best = KBlock{};
    best.err = sxx;
  }
  return best;
}

constexpr KSpec kQ2K{16, 16, 0, 3, 0, 15, 15};
constexpr KSpec kQ3K{16, 16, -4, 3, -32, 31, 0};
constexpr KSpec kQ4K{8, 32, 0, 15, 0, 63, 63};
constexpr KSpec kQ5K{8, 32, 0, 31, 0, 63, 63};
constexpr KSpec kQ6K{16, 16, -32, 31, -128, 127, 0};

// Q2_K / Q3_K qs: weight 128h + 32j + l in bits 2j..2j+1 of qs[32h + l] (ggml_type.h).
void pack_2bit(const uint8_t* c, uint8_t* qs) {
  std::memset(qs, 0, QK_K / 4);
  for (int e = 0; e < QK_K; ++e) qs[32 * (e / 128) + e % 32] |= uint8_t((c[e] & 3) << (2 * ((e % 128) / 32)));
}

void quantize_q2_k(const float* x, BlockQ2_K* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += QK_K) {
    const KBlock k = quantize_k_block(x, kQ2K);
    uint8_t c[QK_K];
    for (int e = 0; e < QK_K; ++e) c[e] = uint8_t(k.q[e]);
    pack_2bit(c, y[b].qs);
    for (int j = 0; j < 16; ++j) y[b].scales[j] = uint8_t(k.sc[j] | (k.mq[j] << 4));
    y[b].d = half_of(k.D);
    y[b].dmin = half_of(k.Dm);
  }
}

void quantize_q3_k(const float* x, BlockQ3_K* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += QK_K) {
    const KBlock k = quantize_k_block(x, kQ3K);
    uint8_t c[QK_K], sc[16];
    std::memset(y[b].hmask, 0, sizeof y[b].hmask);
    for (int e = 0; e < QK_K; ++e) {
      c[e] = uint8_t(k.q[e] + 4);  // stored 0..7: bits 0..1 in qs, bit 2 in hmask
      y[b].hmask[e % 32] |= uint8_t(((c[e] >> 2) & 1) << (e / 32));
    }
    pack_2bit(c, y[b].qs);
    for (int j = 0; j < 16; ++j) sc[j] = uint8_t(k.sc[j] + 32);
    pack_q3_k_scales(sc, y[b].scales);
    y[b].d = half_of(k.D);
  }
}

// Q4_K / Q5_K qs: 32 bytes per 64 weights, sub-block 2j in the low nibbles, 2j+1 high.
template <class Block>
void quantize_q4_5_k(const float* x, Block* y, int64_t nb, const KSpec& spec) {
  for (int64_t b = 0; b < nb; ++b, x += QK_K) {
    const KBlock k = quantize_k_block(x, spec);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; ++j) {
      sc[j] = uint8_t(k.sc[j]);
      m[j] = uint8_t(k.mq[j]);
    }
    pack_q4_k_scales(sc, m, y[b].scales);
    y[b].d = half_of(k.D);
    y[b].dmin = half_of(k.Dm);
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l)
        y[b].qs[32 * j + l] = uint8_t((k.q[64 * j + l] & 0x0f) | ((k.q[64 * j + 32 + l] & 0x0f) << 4));
    if constexpr (std::is_same_v<Block, BlockQ5_K>) {
      std::memset(y[b].qh, 0, sizeof y[b].qh);
      for (int e = 0; e < QK_K; ++e) y[b].qh[e % 32] |= uint8_t(((k.q[e] >> 4) & 1) << (e / 32));
    }
  }
}

void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += QK_K) {
    const KBlock k = quantize_k_block(x, kQ6K);
    // Stored q + 32 in 0..63: per half of 128, ql[l] holds runs 0 (low) and 2 (high),
    // ql[l + 32] runs 1 and 3, qh[l] the top two bits of runs 0..3 at bits 2i.
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < 32; ++l) {
        int c[4];
        for (int i = 0; i < 4; ++i) c[i] = k.q[128 * h + 32 * i + l] + 32;
        y[b].ql[64 * h + l] = uint8_t((c[0] & 15) | ((c[2] & 15) << 4));
        y[b].ql[64 * h + 32 + l] = uint8_t((c[1] & 15) | ((c[3] & 15) << 4));
        y[b].qh[32 * h + l] =
            uint8_t((c[0] >> 4) | ((c[1] >> 4) << 2) | ((c[2] >> 4) << 4) | ((c[3] >> 4) << 6));
      }
    for (int j = 0; j < 16; ++j) y[b].scales[j] = int8_t(k.sc[j]);
    y[b].d = half_of(k.D);
  }
}

}  // namespace

// Every type flashspec reads (ggml_type.h) can be written.
bool can_quantize(GgmlType type) { return type_traits(uint32_t(type)).has_value(); }

void quantize_row(GgmlType type, const float* src, void* dst, int64_t n) {
  if (!can_quantize(type)) throw Error("internal: cannot quantize to type " + std::to_string(uint32_t(type)));
  const int64_t nb = whole_blocks(type, n, "quantize_row");
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, src, size_t(n) * sizeof(float));
      return;
    case GgmlType::F16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = float_to_fp16(src[i]);
      return;
    }
    case GgmlType::BF16: {  // nearest even on the bit pattern, NaN kept quiet (llama.cpp's rule)
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t u = float_to_bits(src[i]);
        h[i] = (u & 0x7fffffffu) > 0x7f800000u ? uint16_t((u >> 16) | 0x40)
                                               : uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
      }
      return;
    }
    case GgmlType::Q4_0: return quantize_zero_point<BlockQ4_0, 8>(src, static_cast<BlockQ4_0*>(dst), nb);
    case GgmlType::Q5_0: return quantize_zero_point<BlockQ5_0, 16>(src, static_cast<BlockQ5_0*>(dst), nb);
    case GgmlType::Q5_1: return quantize_q5_1(src, static_cast<BlockQ5_1*>(dst), nb);
    case GgmlType::Q8_0: return quantize_q8_0(src, static_cast<BlockQ8_0*>(dst), nb);
    case GgmlType::IQ4_NL: return quantize_iq4_nl(src, static_cast<BlockIQ4_NL*>(dst), nb);
    case GgmlType::MXFP4: return quantize_mxfp4(src, static_cast<BlockMXFP4*>(dst), nb);
    case GgmlType::Q2_K: return quantize_q2_k(src, static_cast<BlockQ2_K*>(dst), nb);
    case GgmlType::Q3_K: return quantize_q3_k(src, static_cast<BlockQ3_K*>(dst), nb);
    case GgmlType::Q4_K: return quantize_q4_5_k(src, static_cast<BlockQ4_K*>(dst), nb, kQ4K);
    case GgmlType::Q5_K: return quantize_q4_5_k(src, static_cast<BlockQ5_K*>(dst), nb, kQ5K);
    case GgmlType::Q6_K: return quantize_q6_k(src, static_cast<BlockQ6_K*>(dst), nb);
  }
}

}  // namespace flashspec
