#pragma once
// One RoPE pair's rotation, as llama.cpp's rope computes it (ggml's rope_yarn and its
// correction dims), shared by the CPU backend and the CUDA kernel so that both turn every
// pair by the very same float arithmetic.
#include <algorithm>
#include <cmath>

#include "kernels/host_device.h"

namespace flashspec {

// The pair range over which YaRN ramps from interpolation to extrapolation: the pairs
// whose wavelength spans beta_fast (start) to beta_slow (end) turns of the original
// context, floored / ceiled and clamped as ggml_rope_yarn_corr_dims does.
inline void yarn_corr_dims(int n_rot, int orig_context, float freq_base, float beta_fast, float beta_slow,
                           float dims[2]) {
  auto dim = [&](float turns) {
    return float(n_rot) * std::log(float(orig_context) / (turns * 2.0f * 3.14159265358979323846f)) /
           (2.0f * std::log(freq_base));
  };
  dims[0] = std::max(0.0f, std::floor(dim(beta_fast)));
  dims[1] = std::min(float(n_rot - 1), std::ceil(dim(beta_slow)));
}

// a * b + c * d and 1 + a * b, rounded after every operation on the device too: nvcc
// would fuse them into FMAs, which turns a YaRN angle at position 5000 a few ulps away
// from the CPU's (and llama.cpp's).
FS_HD float sum_of_products(float a, float b, float c, float d) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(__fmul_rn(a, b), __fmul_rn(c, d));
#else
  return a * b + c * d;
#endif
}
FS_HD float one_plus_product(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(1.0f, __fmul_rn(a, b));
#else
  return 1.0f + a * b;
#endif
}

// The cos and sin of pair i (theta_extrap = pos x base^(-2i/n_rot) / factor), scaled by
// the rotation's magnitude. ext_factor 0: plain (linearly scaled) RoPE, magnitude
// attn_factor.
FS_HD void rope_angle(float theta_extrap, float freq_scale, float ext_factor, float attn_factor, const float* corr,
                      int i, float* c, float* s) {
  const float theta_interp = freq_scale * theta_extrap;
  float theta = theta_interp, mscale = attn_factor;
  if (ext_factor != 0.0f) {
    const float y = (float(i) - corr[0]) / fmaxf(0.001f, corr[1] - corr[0]);
    const float ramp_mix = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * ext_factor;
    theta = sum_of_products(theta_interp, 1.0f - ramp_mix, theta_extrap, ramp_mix);
    mscale *= one_plus_product(0.1f, logf(1.0f / freq_scale));
  }
  *c = cosf(theta) * mscale;
  *s = sinf(theta) * mscale;
}

}  // namespace flashspec
