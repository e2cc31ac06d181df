/* cpu_vec.h — 16-lane float vectors for the native kernels (GCC's vector
 * extensions), and exp and tanh on them (internal; see cpu_native.h).
 *
 * Included by each instruction set's file after its target pragma: a vf is
 * then four SSE registers, two AVX2 ones or one AVX-512 one, and each lane
 * computes the same operations in the same order on all of them. Sums
 * across lanes (vf_sum) add in one fixed tree.
 *
 * Accuracy, measured against double over every third float of the range:
 * vf_exp within 1.01 ulp on [-87, 88] (subnormal results below, 0 under
 * -103.97, inf over 88.72, NaN kept), vf_tanh within 1.33 ulp on [-30, 30]
 * (+-1 beyond; -0 and NaN kept). */
#ifndef DLRT_BACKENDS_CPU_VEC_H
#define DLRT_BACKENDS_CPU_VEC_H

#include <stdint.h>
#include <string.h>

#define VL 16
typedef float vf __attribute__((vector_size(VL * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(VL * sizeof(int32_t))));

/* The helpers are statement-expression macros, not functions: a function
 * taking or returning a 64-byte vector makes GCC note an ABI change in
 * every build without AVX-512. Each evaluates its arguments once. */

#define vf_load(p)                                                             \
  ({                                                                           \
    vf vl_;                                                                    \
    memcpy(&vl_, (p), sizeof vl_);                                             \
    vl_;                                                                       \
  })
#define vf_store(p, v)                                                         \
  ({                                                                           \
    vf vs_ = (v);                                                              \
    (void)memcpy((p), &vs_, sizeof vs_);                                       \
  })
#define vf_splat(x) ((vf){0} + (float)(x))

/* n < VL values from p, the other lanes `fill`; and the first n lanes of v
 * stored (the tails of rows). */
#define vf_load_part(p, n, fill)                                               \
  ({                                                                           \
    float lp_[VL];                                                             \
    for (int l_ = 0; l_ < VL; l_++) lp_[l_] = (fill);                          \
    memcpy(lp_, (p), (size_t)(n) * sizeof(float));                             \
    vf_load(lp_);                                                              \
  })
#define vf_store_part(p, v, n)                                                 \
  ({                                                                           \
    float sp_[VL];                                                             \
    vf_store(sp_, (v));                                                        \
    (void)memcpy((p), sp_, (size_t)(n) * sizeof(float));                       \
  })

/* mask ? a : b, lane by lane (mask lanes all ones or zero: a comparison,
 * evaluated twice). */
#define vf_select(mask, a, b) ((vf)(((vi)(a) & (mask)) | ((vi)(b) & ~(mask))))
#define vf_max(a, b) vf_select((a) > (b), (a), (b))
#define vf_abs(x) ((vf)((vi)(x) & 0x7fffffff))
#define vf_sign(x) ((vi)(x) & INT32_MIN)

/* The sum and the maximum of the lanes, in one fixed order (a tree: lane l
 * and l + 8, then l + 4, ...). */
#define vf_sum(v)                                                              \
  ({                                                                           \
    float t_[VL];                                                              \
    vf_store(t_, (v));                                                         \
    for (int w_ = VL / 2; w_ > 0; w_ /= 2)                                     \
      for (int l_ = 0; l_ < w_; l_++) t_[l_] += t_[l_ + w_];                   \
    t_[0];                                                                     \
  })
#define vf_hmax(v)                                                             \
  ({                                                                           \
    float t_[VL];                                                              \
    vf_store(t_, (v));                                                         \
    for (int w_ = VL / 2; w_ > 0; w_ /= 2)                                     \
      for (int l_ = 0; l_ < w_; l_++) t_[l_] = t_[l_] > t_[l_ + w_] ? t_[l_] : t_[l_ + w_]; \
    t_[0];                                                                     \
  })

/* e^x: x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts, Cody and
 * Waite), e^r by Cephes' expf polynomial, times 2^n as two powers of two
 * (so that results down to the subnormals come out rounded once). */
#define vf_exp(x)                                                              \
  ({                                                                           \
    vf x_ = (x);                                                               \
    const vf magic_ = vf_splat(12582912.0f); /* 1.5 2^23: + rounds to integer */ \
    vi nan_ = x_ != x_, over_ = x_ > 88.72283935546875f;                       \
    vi under_ = x_ < -103.97208404541015625f;                                  \
    vf xc_ = vf_select(over_, vf_splat(88.72283935546875f),                    \
                       vf_select(under_, vf_splat(-103.97208404541015625f), x_)); \
    vf t_ = xc_ * 1.44269504088896341f + magic_;                               \
    vi n_ = (vi)t_ - (vi)magic_;                                               \
    vf fn_ = t_ - magic_;                                                      \
    vf r_ = xc_ - fn_ * 0.693359375f;                                          \
    r_ = r_ - fn_ * -2.12194440e-4f;                                           \
    vf p_ = vf_splat(1.9875691500e-4f);                                        \
    p_ = p_ * r_ + 1.3981999507e-3f;                                           \
    p_ = p_ * r_ + 8.3334519073e-3f;                                           \
    p_ = p_ * r_ + 4.1665795894e-2f;                                           \
    p_ = p_ * r_ + 1.6666665459e-1f;                                           \
    p_ = p_ * r_ + 5.0000001201e-1f;                                           \
    vf y_ = p_ * (r_ * r_) + r_ + 1.0f;                                        \
    vi n1_ = n_ >> 1, n2_ = n_ - n1_;                                          \
    y_ = y_ * (vf)((n1_ + 127) << 23) * (vf)((n2_ + 127) << 23);               \
    y_ = vf_select(over_, vf_splat(__builtin_inff()), y_);                     \
    y_ = vf_select(under_, vf_splat(0.0f), y_);                                \
    vf_select(nan_, x_, y_);                                                   \
  })

/* tanh x, with x's sign: below |x| = 0.625 Cephes' tanhf polynomial, above
 * it 1 - 2 / (e^(2|x|) + 1) (1 once e^(2|x|) overflows). */
#define vf_tanh(x)                                                             \
  ({                                                                           \
    vf tx_ = (x), ax_ = vf_abs(tx_), z_ = tx_ * tx_;                           \
    vf q_ = vf_splat(-5.70498872745e-3f);                                      \
    q_ = q_ * z_ + 2.06390887954e-2f;                                          \
    q_ = q_ * z_ - 5.37397155531e-2f;                                          \
    q_ = q_ * z_ + 1.33314422036e-1f;                                          \
    q_ = q_ * z_ - 3.33332819422e-1f;                                          \
    vf small_ = q_ * z_ * ax_ + ax_;                                           \
    vf large_ = 1.0f - 2.0f / (vf_exp(ax_ + ax_) + 1.0f);                      \
    vf th_ = vf_select(ax_ < 0.625f, small_, large_);                          \
    vf_select(tx_ != tx_, tx_, (vf)((vi)th_ | vf_sign(tx_)));                  \
  })

#endif
