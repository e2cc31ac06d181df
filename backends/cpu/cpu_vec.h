/* cpu_vec.h — float vectors for the native kernels (GCC's vector
 * extensions), sums across lanes in a fixed order, and exp and tanh on
 * vectors (internal; see cpu_native.h).
 *
 * Included by each instruction set's file after its target pragma: a vf is
 * one register of the target, VL floats (16 AVX-512, 8 AVX2, 4 SSE2).
 * Elementwise work gives the same bits whatever VL is. Sums along a row
 * keep RL = 16 partial sums, lane l taking the columns l mod 16 (VN
 * registers of VL lanes each), added at the end in one fixed tree
 * (rl_sum): so they too give the same bits for every VL.
 *
 * Accuracy, measured against double over every third float of the range:
 * vf_exp within 1.01 ulp on [-87, 88] (subnormal results below, 0 under
 * -103.97, inf over 88.72, NaN kept), vf_tanh within 1.33 ulp on [-30, 30]
 * (+-1 beyond; -0 and NaN kept). */
#ifndef DLRT_BACKENDS_CPU_VEC_H
#define DLRT_BACKENDS_CPU_VEC_H

#include <stdint.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#if defined(__AVX512F__)
#define VL 16
#elif defined(__AVX__)
#define VL 8
#else
#define VL 4
#endif
#define RL 16        /* partial sums of a row, on every target */
#define VN (RL / VL) /* registers holding them */
typedef float vf __attribute__((vector_size(VL * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(VL * sizeof(int32_t))));

/* a * b + c rounded once where the target has FMA (avx2, avx512), else
 * rounded twice (generic). The kernels' files contract nothing else. */
#if defined(__AVX512F__)
#define vf_fma(a, b, c) ((vf)_mm512_fmadd_ps((__m512)(a), (__m512)(b), (__m512)(c)))
#elif defined(__FMA__) && VL == 8
#define vf_fma(a, b, c) ((vf)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c)))
#else
#define vf_fma(a, b, c) ((a) * (b) + (c))
#endif

/* Unrolls the loop after it (over the VN registers of RL lanes) fully, so
 * that its vectors live in registers. */
#define UNROLL _Pragma("GCC unroll 4")

/* 0, 1, ..., VL - 1. */
#if VL == 16
#define VI_IOTA ((vi){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
#elif VL == 8
#define VI_IOTA ((vi){0, 1, 2, 3, 4, 5, 6, 7})
#else
#define VI_IOTA ((vi){0, 1, 2, 3})
#endif

/* Lane l + w of v in lane l (w < VL, a power of two; the upper lanes wrap
 * around and are not used). */
#define VF_DOWN(v, w) __builtin_shuffle((v), (VI_IOTA + (w)) & (VL - 1))

/* Transposes the VL x VL block r[0 .. VL - 1] (lane l of r[i] becomes lane
 * i of r[l]): log2(VL) stages, each swapping the off-diagonal w x w blocks
 * of every 2w x 2w block with two-source shuffles. */
static inline void vf_transpose(vf *r) {
  UNROLL for (int w = VL / 2; w > 0; w /= 2) {
    vi upper = (VI_IOTA & w) != 0;
    vi lo = (upper & (VI_IOTA + (VL - w))) | (~upper & VI_IOTA);
    vi hi = (upper & (VI_IOTA + VL)) | (~upper & (VI_IOTA + w));
    _Pragma("GCC unroll 16") for (int i = 0; i < VL; i++) {
      if (i & w) continue;
      vf a = r[i], b = r[i + w];
      r[i] = __builtin_shuffle(a, b, lo);
      r[i + w] = __builtin_shuffle(a, b, hi);
    }
  }
}

/* The RL partial sums acc[0 .. VN - 1] added in one tree: lane l and l + 8,
 * then l + 4, ... (registers first while a step spans them, then within
 * one): the same additions, so the same bits, for every VL. */
static inline float rl_sum(const vf *acc) {
  vf t[VN];
  memcpy(t, acc, sizeof t);
  for (int n = VN; n > 1; n /= 2)
    for (int s = 0; s < n / 2; s++) t[s] = t[s] + t[s + n / 2];
  vf v = t[0];
  for (int w = VL / 2; w > 0; w /= 2) v = v + VF_DOWN(v, w);
  return v[0];
}

/* The largest lane of *in (exact in any order; where lanes are NaN, which
 * one comes out is not specified). */
static inline float vf_hmax_lanes(const vf *in) {
  vf v = *in;
  for (int w = VL / 2; w > 0; w /= 2) {
    vf d = VF_DOWN(v, w);
    v = (vf)(((vi)d & (d > v)) | ((vi)v & ~(d > v)));
  }
  return v[0];
}

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
/* x in every lane: x + -0 is x for every x (-0 too), so the addition folds
 * away, where + 0 would stay (it turns -0 into 0). */
#define vf_splat(x) ((float)(x) + -(vf){0})

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

/* The first n of VL values from p (n <= VL), the other lanes `fill`. */
#define vf_load_n(p, n, fill) ((n) == VL ? vf_load(p) : vf_load_part((p), (n), (fill)))
#define vf_store_n(p, v, n)                                                    \
  ({                                                                           \
    if ((n) == VL) vf_store((p), (v));                                         \
    else vf_store_part((p), (v), (n));                                         \
  })
#define vi_iota() VI_IOTA

/* The sum of EXPR over the columns [0, n) of a row in RL partial sums,
 * added by rl_sum: the same bits for every VL. EXPR is a vector of the VL
 * columns from at_; RL_AT(q, fill) loads them from the row q (lanes past n
 * `fill`, which must make EXPR 0 there). */
#define RL_ROW_SUM(n, EXPR)                                                    \
  ({                                                                           \
    vf acc_[VN];                                                               \
    UNROLL for (int s_ = 0; s_ < VN; s_++) acc_[s_] = vf_splat(0.0f);          \
    int64_t c_ = 0;                                                            \
    for (; c_ + RL <= (n); c_ += RL)                                           \
      UNROLL for (int s_ = 0; s_ < VN; s_++) {                                 \
        const int64_t at_ = c_ + s_ * VL, m_ = VL;                             \
        acc_[s_] += (EXPR);                                                    \
      }                                                                        \
    if (c_ < (n))                                                              \
      UNROLL for (int s_ = 0; s_ < VN; s_++) {                                 \
        const int64_t at_ = c_ + s_ * VL;                                      \
        const int64_t m_ = (n) - at_ < 0 ? 0 : (n) - at_ > VL ? VL : (n) - at_; \
        acc_[s_] += (EXPR);                                                    \
      }                                                                        \
    rl_sum(acc_);                                                              \
  })
#define RL_AT(q, fill) vf_load_n((q) + at_, m_, (fill))

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
    vf t_ = vf_fma(xc_, vf_splat(1.44269504088896341f), magic_);                \
    vi n_ = (vi)t_ - (vi)magic_;                                               \
    vf fn_ = t_ - magic_;                                                      \
    vf r_ = vf_fma(fn_, vf_splat(-0.693359375f), xc_);                         \
    r_ = vf_fma(fn_, vf_splat(2.12194440e-4f), r_);                            \
    vf p_ = vf_splat(1.9875691500e-4f);                                        \
    p_ = vf_fma(p_, r_, vf_splat(1.3981999507e-3f));                           \
    p_ = vf_fma(p_, r_, vf_splat(8.3334519073e-3f));                           \
    p_ = vf_fma(p_, r_, vf_splat(4.1665795894e-2f));                           \
    p_ = vf_fma(p_, r_, vf_splat(1.6666665459e-1f));                           \
    p_ = vf_fma(p_, r_, vf_splat(5.0000001201e-1f));                           \
    vf y_ = vf_fma(p_, r_ * r_, r_) + 1.0f;                                    \
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
    q_ = vf_fma(q_, z_, vf_splat(2.06390887954e-2f));                          \
    q_ = vf_fma(q_, z_, vf_splat(-5.37397155531e-2f));                         \
    q_ = vf_fma(q_, z_, vf_splat(1.33314422036e-1f));                          \
    q_ = vf_fma(q_, z_, vf_splat(-3.33332819422e-1f));                         \
    vf small_ = vf_fma(q_ * z_, ax_, ax_);                                     \
    vf large_ = 1.0f - 2.0f / (vf_exp(ax_ + ax_) + 1.0f);                      \
    vf th_ = vf_select(ax_ < 0.625f, small_, large_);                          \
    vf_select(tx_ != tx_, tx_, (vf)((vi)th_ | vf_sign(tx_)));                  \
  })

#endif
