/* typed.h — the kernels a graph runs in any storage type: bias, ReLU
 * gradient, column and channel sums, im2col / col2im, the CNHW <-> NCHW
 * permute, max pooling and its gradients (portable dialect). Each is
 * instantiated for f32, f16 and bf16 as dlrt_k_<name>_<type>: arithmetic
 * and sums are fp32, a value is rounded once when stored, and moves carry
 * the bits unchanged, so the f32 kernels compute exactly what the fp32-only
 * ones did. Every output element is written by one work-item (gathers, no
 * atomics): results are deterministic on every device. */
#include "dialect.h"

/* Image tensors inside convolution stacks are stored channel-major, C x N x
 * H x W ("CNHW"), so that one GEMM covers the whole batch; `cn` says
 * whether x is CNHW (1) or N x C x H x W (0). cols is (c, ky, kx) x
 * (n, oy, ox): cols[row, n*oh*ow + oy*ow + ox] = x[n, c, oy*stride - pad +
 * ky*dil, ox*stride - pad + kx*dil], 0 outside the image. */
#define DLRT__PIXEL(cn, b, ch, n, c, h, w, iy, ix) \
  ((((cn) ? (ch) * (n) + (b) : (b) * (c) + (ch)) * (h) + (iy)) * (w) + (ix))
/* Pixels col2im sums at once in private fp32 registers. */
#define DLRT__COL2IM_RUN 32
/* Max pooling's argmax byte: the maximum's place in its window (ky * k +
 * kx), and for windows of up to 128 places (k <= 11) bit 7 set when the
 * maximum is positive: the mask of a ReLU before the pool, so the fused
 * gradient does not need the pooled output. */
#define DLRT__ARGMAX_SIGNED(k) ((k) * (k) <= 128)
#define DLRT__ARGMAX_POSITIVE 0x80
/* Moves one element without converting it. */
#define DLRT__COPY(y, i, x, j) ((y)[i] = (x)[j])

/* DLRT__TYPED_KERNELS(SUFFIX, T, LD, ST): the kernels for storage type T. */
#define DLRT__TYPED_KERNELS(SUF, T, LD, ST)                                                     \
/* y[r, c] = x[r, c] + b[c]; x, y: rows x cols; y may alias x. */                               \
DLRT_KERNEL(dlrt_k_bias_rows_##SUF)(DLRT_RANGE DLRT_PTR(T, y), DLRT_CPTR(T, x),                 \
                                    DLRT_CPTR(T, b), DLRT_INDEX rows, DLRT_INDEX cols) {        \
  DLRT_BIND(T, y);                                                                              \
  DLRT_CBIND(T, x);                                                                             \
  DLRT_CBIND(T, b);                                                                             \
  DLRT_FOR_EACH(i, rows * cols) ST(y, i, LD(x, i) + LD(b, i % cols));                           \
}                                                                                               \
/* y[n, c, s] = x[n, c, s] + b[c]; x, y: n x channels x spatial. One                            \
 * work-item per (n, c) run of `spatial` values: no division per element. */                    \
DLRT_KERNEL(dlrt_k_bias_channels_##SUF)(DLRT_RANGE DLRT_PTR(T, y), DLRT_CPTR(T, x),             \
                                        DLRT_CPTR(T, b), DLRT_INDEX n, DLRT_INDEX channels,     \
                                        DLRT_INDEX spatial) {                                   \
  DLRT_BIND(T, y);                                                                              \
  DLRT_CBIND(T, x);                                                                             \
  DLRT_CBIND(T, b);                                                                             \
  DLRT_FOR_EACH(r, n * channels) {                                                              \
    float bias = LD(b, r % channels);                                                           \
    for (DLRT_INDEX i = r * spatial; i < (r + 1) * spatial; i++) ST(y, i, LD(x, i) + bias);     \
  }                                                                                             \
}                                                                                               \
/* dx = dy where x > 0, else 0 (the ReLU gradient; x is the ReLU's input or                     \
 * output: both are positive at the same places). */                                            \
DLRT_KERNEL(dlrt_k_relu_grad_##SUF)(DLRT_RANGE DLRT_PTR(T, dx), DLRT_CPTR(T, dy),               \
                                    DLRT_CPTR(T, x), DLRT_INDEX count) {                        \
  DLRT_BIND(T, dx);                                                                             \
  DLRT_CBIND(T, dy);                                                                            \
  DLRT_CBIND(T, x);                                                                             \
  DLRT_FOR_EACH(i, count) {                                                                     \
    float d = LD(dy, i); /* read unconditionally: the select vectorizes */                      \
    ST(dx, i, LD(x, i) > 0.0f ? d : 0.0f);                                                      \
  }                                                                                             \
}                                                                                               \
/* s[c] = sum over r of x[r, c] (+ beta s[c]): x is rows x cols. One                            \
 * work-item per column, rows in order, in fp32: reads are coalesced across                     \
 * the columns. beta 0: s is not read (it may hold NaN). */                                     \
DLRT_KERNEL(dlrt_k_sum_cols_##SUF)(DLRT_RANGE DLRT_PTR(T, s), DLRT_CPTR(T, x),                  \
                                   DLRT_INDEX rows, DLRT_INDEX cols, float beta) {              \
  DLRT_BIND(T, s);                                                                              \
  DLRT_CBIND(T, x);                                                                             \
  DLRT_FOR_EACH(c, cols) {                                                                      \
    float a = 0.0f;                                                                             \
    for (DLRT_INDEX r = 0; r < rows; r++) a += LD(x, r * cols + c);                             \
    ST(s, c, beta != 0.0f ? beta * LD(s, c) + a : a);                                           \
  }                                                                                             \
}                                                                                               \
/* s[c] = sum over n and p of x[n, c, p]: x is n x channels x spatial. */                       \
DLRT_KERNEL(dlrt_k_sum_channels_##SUF)(DLRT_RANGE DLRT_PTR(T, s), DLRT_CPTR(T, x),              \
                                       DLRT_INDEX n, DLRT_INDEX channels, DLRT_INDEX spatial) { \
  DLRT_BIND(T, s);                                                                              \
  DLRT_CBIND(T, x);                                                                             \
  DLRT_FOR_EACH(c, channels) {                                                                  \
    float a = 0.0f;                                                                             \
    for (DLRT_INDEX b = 0; b < n; b++)                                                          \
      for (DLRT_INDEX p = 0; p < spatial; p++) a += LD(x, (b * channels + c) * spatial + p);    \
    ST(s, c, a);                                                                                \
  }                                                                                             \
}                                                                                               \
/* parts[r] = sum of plane r of x (rows x spatial), in order, in fp32: one                      \
 * work-item per (channel, image) plane of a CNHW tensor. The first half of                     \
 * a convolution bias's gradient, summed image by image so that a chunk of                      \
 * images at a time adds up to the same bits as the whole batch. */                             \
DLRT_KERNEL(dlrt_k_sum_planes_##SUF)(DLRT_RANGE DLRT_PTR(float, parts), DLRT_CPTR(T, x),         \
                                     DLRT_INDEX rows, DLRT_INDEX spatial) {                     \
  DLRT_BIND(float, parts);                                                                      \
  DLRT_CBIND(T, x);                                                                             \
  DLRT_FOR_EACH(r, rows) {                                                                      \
    float a = 0.0f;                                                                             \
    for (DLRT_INDEX p = 0; p < spatial; p++) a += LD(x, r * spatial + p);                       \
    parts[r] = a;                                                                               \
  }                                                                                             \
}                                                                                               \
/* s[c] = (accumulate ? s[c] : 0) + parts[c, 0] + ... + parts[c, n - 1], in                     \
 * that order (parts: channels x n, fp32): the second half, so chunks of                        \
 * images that accumulate in order sum exactly as one pass over them all. */                    \
DLRT_KERNEL(dlrt_k_sum_parts_##SUF)(DLRT_RANGE DLRT_PTR(T, s), DLRT_CPTR(float, parts),          \
                                    DLRT_INDEX channels, DLRT_INDEX n, DLRT_INDEX accumulate) { \
  DLRT_BIND(T, s);                                                                              \
  DLRT_CBIND(float, parts);                                                                     \
  DLRT_FOR_EACH(c, channels) {                                                                  \
    float a = accumulate ? LD(s, c) : 0.0f;                                                     \
    for (DLRT_INDEX b = 0; b < n; b++) a += parts[c * n + b];                                   \
    ST(s, c, a);                                                                                \
  }                                                                                             \
}                                                                                               \
/* cols = im2col(x) of images [b0, b0 + nb): CKK x (nb x OHW), see                              \
 * DLRT__PIXEL. One work-item per (row, image): oh x ow values, so the index                    \
 * arithmetic is paid once per image plane. */                                                  \
DLRT_KERNEL(dlrt_k_im2col_##SUF)(DLRT_RANGE DLRT_PTR(T, cols), DLRT_CPTR(T, x),                 \
                                 DLRT_INDEX n, DLRT_INDEX c, DLRT_INDEX h, DLRT_INDEX w,        \
                                 DLRT_INDEX kh, DLRT_INDEX kw, DLRT_INDEX stride, DLRT_INDEX pad, \
                                 DLRT_INDEX dil, DLRT_INDEX oh, DLRT_INDEX ow, DLRT_INDEX cn,   \
                                 DLRT_INDEX b0, DLRT_INDEX nb) {                                \
  DLRT_BIND(T, cols);                                                                           \
  DLRT_CBIND(T, x);                                                                             \
  DLRT_FOR_EACH(item, c * kh * kw * nb) {                                                       \
    DLRT_INDEX b = b0 + item % nb, row = item / nb;                                             \
    DLRT_INDEX ch = row / (kh * kw), k = row - ch * (kh * kw);                                  \
    DLRT_INDEX ky = (k / kw) * dil, kx = (k % kw) * dil;                                        \
    DLRT_INDEX plane = DLRT__PIXEL(cn, b, ch, n, c, h, w, 0, 0), out = item * (oh * ow);        \
    /* Output columns whose input column lies inside the image (stride 1:                       \
     * ox in [lo, hi)). */                                                                      \
    DLRT_INDEX lo = pad - kx > 0 ? pad - kx : 0, hi = w + pad - kx < ow ? w + pad - kx : ow;    \
    for (DLRT_INDEX oy = 0; oy < oh; oy++, out += ow) {                                         \
      DLRT_INDEX iy = oy * stride - pad + ky;                                                   \
      if (iy < 0 || iy >= h) {                                                                  \
        for (DLRT_INDEX ox = 0; ox < ow; ox++) ST(cols, out + ox, 0.0f);                        \
      } else if (stride == 1) {                                                                 \
        DLRT_INDEX src = plane + iy * w - pad + kx;                                             \
        for (DLRT_INDEX ox = 0; ox < lo; ox++) ST(cols, out + ox, 0.0f);                        \
        for (DLRT_INDEX ox = lo; ox < hi; ox++) DLRT__COPY(cols, out + ox, x, src + ox);        \
        for (DLRT_INDEX ox = hi > lo ? hi : lo; ox < ow; ox++) ST(cols, out + ox, 0.0f);        \
      } else {                                                                                  \
        for (DLRT_INDEX ox = 0; ox < ow; ox++) {                                                \
          DLRT_INDEX ix = ox * stride - pad + kx;                                               \
          if (ix >= 0 && ix < w) DLRT__COPY(cols, out + ox, x, plane + iy * w + ix);            \
          else ST(cols, out + ox, 0.0f);                                                        \
        }                                                                                       \
      }                                                                                         \
    }                                                                                           \
  }                                                                                             \
}                                                                                               \
/* The adjoint of im2col, as a gather: dx (layout `cn`) of images [b0, b0 +                     \
 * nb) at a pixel = the sum of every cols entry im2col took from it (cols:                      \
 * CKK x (nb x OHW)), in fp32 over a private run of up to DLRT__COL2IM_RUN                      \
 * pixels, stored once. One work-item per image row. */                                         \
DLRT_KERNEL(dlrt_k_col2im_##SUF)(DLRT_RANGE DLRT_PTR(T, dx), DLRT_CPTR(T, cols),                \
                                 DLRT_INDEX n, DLRT_INDEX c, DLRT_INDEX h, DLRT_INDEX w,        \
                                 DLRT_INDEX kh, DLRT_INDEX kw, DLRT_INDEX stride, DLRT_INDEX pad, \
                                 DLRT_INDEX dil, DLRT_INDEX oh, DLRT_INDEX ow, DLRT_INDEX cn,   \
                                 DLRT_INDEX b0, DLRT_INDEX nb) {                                \
  DLRT_BIND(T, dx);                                                                             \
  DLRT_CBIND(T, cols);                                                                          \
  DLRT_INDEX width = nb * oh * ow;                                                              \
  DLRT_FOR_EACH(r, c * nb * h) {                                                                \
    DLRT_INDEX iy = r % h, plane = r / h;                                                       \
    DLRT_INDEX ch = cn ? plane / nb : plane % c, bb = cn ? plane % nb : plane / c;              \
    DLRT_INDEX out = DLRT__PIXEL(cn, b0 + bb, ch, n, c, h, w, iy, 0);                           \
    for (DLRT_INDEX x0 = 0; x0 < w; x0 += DLRT__COL2IM_RUN) {                                   \
      DLRT_INDEX run = w - x0 < DLRT__COL2IM_RUN ? w - x0 : DLRT__COL2IM_RUN;                   \
      float acc[DLRT__COL2IM_RUN];                                                              \
      for (DLRT_INDEX ix = 0; ix < run; ix++) acc[ix] = 0.0f;                                   \
      for (DLRT_INDEX ky = 0; ky < kh; ky++) {                                                  \
        DLRT_INDEX ty = iy + pad - ky * dil;                                                    \
        if (ty < 0 || ty % stride != 0 || ty / stride >= oh) continue;                          \
        for (DLRT_INDEX kx = 0; kx < kw; kx++) {                                                \
          DLRT_INDEX src = ((ch * kh + ky) * kw + kx) * width + bb * (oh * ow) + (ty / stride) * ow; \
          DLRT_INDEX shift = x0 + pad - kx * dil; /* tx = ix + shift */                         \
          if (stride == 1) {                                                                    \
            DLRT_INDEX lo = -shift > 0 ? -shift : 0, hi = ow - shift < run ? ow - shift : run;  \
            for (DLRT_INDEX ix = lo; ix < hi; ix++) acc[ix] += LD(cols, src + ix + shift);      \
          } else {                                                                              \
            for (DLRT_INDEX ix = 0; ix < run; ix++) {                                           \
              DLRT_INDEX tx = ix + shift;                                                       \
              if (tx >= 0 && tx % stride == 0 && tx / stride < ow)                              \
                acc[ix] += LD(cols, src + tx / stride);                                         \
            }                                                                                   \
          }                                                                                     \
        }                                                                                       \
      }                                                                                         \
      for (DLRT_INDEX ix = 0; ix < run; ix++) ST(dx, out + x0 + ix, acc[ix]);                   \
    }                                                                                           \
  }                                                                                             \
}                                                                                               \
/* y[b, a, p] = x[a, b, p]: swaps the two leading axes (CNHW <-> NCHW); one                     \
 * work-item per (b, a) run of `inner` values. */                                               \
DLRT_KERNEL(dlrt_k_swap01_##SUF)(DLRT_RANGE DLRT_PTR(T, y), DLRT_CPTR(T, x), DLRT_INDEX na,     \
                                 DLRT_INDEX nb, DLRT_INDEX inner) {                             \
  DLRT_BIND(T, y);                                                                              \
  DLRT_CBIND(T, x);                                                                             \
  DLRT_FOR_EACH(r, na * nb) {                                                                   \
    DLRT_INDEX b = r / na, a = r - b * na;                                                      \
    DLRT_INDEX out = r * inner, in = (a * nb + b) * inner;                                      \
    for (DLRT_INDEX p = 0; p < inner; p++) DLRT__COPY(y, out + p, x, in + p);                   \
  }                                                                                             \
}                                                                                               \
/* Max pooling over k x k windows with a stride, no padding: y and where in                     \
 * its window each maximum is (ky * k + kx, one byte: k <= 16; first one on                     \
 * ties; NaN wins). x is planes x h x w; one work-item per plane. Plane p of                     \
 * x pools into plane (p / pn) * pN + pb0 + p % pn of y and argmax: the same                    \
 * plane with pn = pN = planes, pb0 = 0; a chunk of pn images of a CNHW                         \
 * tensor whose y holds all pN, from image pb0 on, otherwise (the pooling                       \
 * gradients take the same three). */                                                           \
DLRT_KERNEL(dlrt_k_maxpool_##SUF)(DLRT_RANGE DLRT_PTR(T, y), DLRT_PTR(unsigned char, argmax),   \
                                  DLRT_CPTR(T, x), DLRT_INDEX planes, DLRT_INDEX h,             \
                                  DLRT_INDEX w, DLRT_INDEX k, DLRT_INDEX stride, DLRT_INDEX oh, \
                                  DLRT_INDEX ow, DLRT_INDEX pn, DLRT_INDEX pN,                  \
                                  DLRT_INDEX pb0) {                                             \
  DLRT_BIND(T, y);                                                                              \
  DLRT_BIND(unsigned char, argmax);                                                             \
  DLRT_CBIND(T, x);                                                                             \
  DLRT_FOR_EACH(p, planes) {                                                                    \
    DLRT_INDEX q = (p / pn) * pN + pb0 + p % pn;                                                \
    if (k == 2 && stride == 2) {                                                                \
      /* The common 2 x 2 window, unrolled: the same scan order (row by                         \
       * row), so the same maximum and index on ties and NaN, with selects                      \
       * the compiler can keep out of branches. */                                              \
      for (DLRT_INDEX oy = 0; oy < oh; oy++) {                                                  \
        DLRT_INDEX top = p * h * w + 2 * oy * w, o = (q * oh + oy) * ow;                        \
        for (DLRT_INDEX ox = 0; ox < ow; ox++) {                                                \
          DLRT_INDEX i0 = top + 2 * ox;                                                         \
          float m = LD(x, i0), v1 = LD(x, i0 + 1), v2 = LD(x, i0 + w), v3 = LD(x, i0 + w + 1);  \
          int best = 0;                                                                         \
          int take = v1 > m || (v1 != v1 && m == m);                                            \
          m = take ? v1 : m, best = take ? 1 : best;                                            \
          take = v2 > m || (v2 != v2 && m == m);                                                \
          m = take ? v2 : m, best = take ? 2 : best;                                            \
          take = v3 > m || (v3 != v3 && m == m);                                                \
          m = take ? v3 : m, best = take ? 3 : best;                                            \
          DLRT__COPY(y, o + ox, x, i0 + (best >> 1) * w + (best & 1));                          \
          argmax[o + ox] = (unsigned char)(best | (m > 0.0f ? DLRT__ARGMAX_POSITIVE : 0));      \
        }                                                                                       \
      }                                                                                         \
      continue;                                                                                 \
    }                                                                                           \
    for (DLRT_INDEX oy = 0; oy < oh; oy++) {                                                    \
      DLRT_INDEX top = p * h * w + oy * stride * w, o = (q * oh + oy) * ow;                     \
      for (DLRT_INDEX ox = 0; ox < ow; ox++) {                                                  \
        DLRT_INDEX corner = top + ox * stride, best = 0;                                        \
        float m = LD(x, corner);                                                                \
        for (DLRT_INDEX ky = 0; ky < k; ky++)                                                   \
          for (DLRT_INDEX kx = 0; kx < k; kx++) {                                               \
            float v = LD(x, corner + ky * w + kx);                                              \
            if (v > m || (v != v && m == m)) {                                                  \
              m = v;                                                                            \
              best = ky * k + kx;                                                               \
            }                                                                                   \
          }                                                                                     \
        DLRT__COPY(y, o + ox, x, corner + (best / k) * w + best % k);                           \
        argmax[o + ox] = (unsigned char)(best | (DLRT__ARGMAX_SIGNED(k) && m > 0.0f             \
                                                     ? DLRT__ARGMAX_POSITIVE : 0));             \
      }                                                                                         \
    }                                                                                           \
  }                                                                                             \
}                                                                                               \
/* dx[j] = the sum of dy over the windows whose maximum was input j (a gather                   \
 * over the windows that cover j); one work-item per input row. With                            \
 * `masked`, a window whose maximum is not positive hands on 0: the                             \
 * gradient of relu then max-pool in one pass, the maximum standing in for                      \
 * the ReLU's output, which equals it wherever dy arrives. Its sign is the                      \
 * argmax byte's bit 7 (DLRT__ARGMAX_SIGNED windows; y is not read) or y, the                   \
 * pooled output, for larger ones. */                                                           \
DLRT_KERNEL(dlrt_k_maxpool_grad_##SUF)(DLRT_RANGE DLRT_PTR(T, dx), DLRT_CPTR(T, dy),            \
                                       DLRT_CPTR(unsigned char, argmax), DLRT_CPTR(T, y),       \
                                       DLRT_INDEX planes, DLRT_INDEX h, DLRT_INDEX w,           \
                                       DLRT_INDEX k, DLRT_INDEX stride, DLRT_INDEX oh,          \
                                       DLRT_INDEX ow, DLRT_INDEX masked, DLRT_INDEX pn,         \
                                       DLRT_INDEX pN, DLRT_INDEX pb0) {                         \
  DLRT_BIND(T, dx);                                                                             \
  DLRT_CBIND(T, dy);                                                                            \
  DLRT_CBIND(unsigned char, argmax);                                                            \
  DLRT_CBIND(T, y);                                                                             \
  int signed_ = DLRT__ARGMAX_SIGNED(k);                                                        \
  DLRT_FOR_EACH(r, planes * h) {                                                                \
    DLRT_INDEX p = r / h, iy = r - p * h, q = (p / pn) * pN + pb0 + p % pn;                     \
    /* Windows oy with oy*stride <= iy < oy*stride + k. */                                      \
    DLRT_INDEX oy0 = iy >= k ? (iy - k) / stride + 1 : 0, oy1 = iy / stride;                    \
    if (oy1 >= oh) oy1 = oh - 1;                                                                \
    for (DLRT_INDEX ix = 0; ix < w; ix++) {                                                     \
      DLRT_INDEX ox0 = ix >= k ? (ix - k) / stride + 1 : 0, ox1 = ix / stride;                  \
      if (ox1 >= ow) ox1 = ow - 1;                                                              \
      float a = 0.0f;                                                                           \
      int keep = 1;                                                                             \
      for (DLRT_INDEX oy = oy0; oy <= oy1; oy++)                                                \
        for (DLRT_INDEX ox = ox0; ox <= ox1; ox++) {                                            \
          DLRT_INDEX o = (q * oh + oy) * ow + ox;                                               \
          /* This input's place in window (oy, ox); every window that picked                    \
           * it has its value as maximum, so one mask for all of them. */                       \
          DLRT_INDEX code = argmax[o], at = signed_ ? code & 0x7f : code;                       \
          if (at == (iy - oy * stride) * k + ix - ox * stride) {                                \
            a += LD(dy, o);                                                                     \
            keep = !masked || (signed_ ? code >= DLRT__ARGMAX_POSITIVE : LD(y, o) > 0.0f);      \
          }                                                                                     \
        }                                                                                       \
      ST(dx, r * w + ix, keep ? a : 0.0f);                                                      \
    }                                                                                           \
  }                                                                                             \
}                                                                                               \
/* The max-pool gradient when windows do not overlap (stride >= k): each                        \
 * window hands dy to its maximum, after dx was zeroed; one work-item per                       \
 * output row, whose windows own disjoint input pixels. `masked` and y as                       \
 * in maxpool_grad. */                                                                          \
DLRT_KERNEL(dlrt_k_maxpool_scatter_##SUF)(DLRT_RANGE DLRT_PTR(T, dx), DLRT_CPTR(T, dy),         \
                                          DLRT_CPTR(unsigned char, argmax), DLRT_CPTR(T, y),    \
                                          DLRT_INDEX planes, DLRT_INDEX h, DLRT_INDEX w,        \
                                          DLRT_INDEX k, DLRT_INDEX stride, DLRT_INDEX oh,       \
                                          DLRT_INDEX ow, DLRT_INDEX masked, DLRT_INDEX pn,      \
                                          DLRT_INDEX pN, DLRT_INDEX pb0) {                      \
  DLRT_BIND(T, dx);                                                                             \
  DLRT_CBIND(T, dy);                                                                            \
  DLRT_CBIND(unsigned char, argmax);                                                            \
  DLRT_CBIND(T, y);                                                                             \
  int signed_ = DLRT__ARGMAX_SIGNED(k);                                                        \
  DLRT_FOR_EACH(r, planes * oh) {                                                               \
    DLRT_INDEX p = r / oh, oy = r - p * oh, q = (p / pn) * pN + pb0 + p % pn;                   \
    DLRT_INDEX top = p * h * w + oy * stride * w;                                               \
    for (DLRT_INDEX ox = 0; ox < ow; ox++) {                                                    \
      DLRT_INDEX o = (q * oh + oy) * ow + ox, code = argmax[o];                                 \
      DLRT_INDEX at = signed_ ? code & 0x7f : code;                                             \
      DLRT_INDEX to = top + (at / k) * w + ox * stride + at % k;                                \
      if (masked) /* as relu_grad computes it: a select of dy or 0 */                           \
        ST(dx, to, (signed_ ? code >= DLRT__ARGMAX_POSITIVE : LD(y, o) > 0.0f) ? LD(dy, o)     \
                                                                               : 0.0f);         \
      else                                                                                      \
        DLRT__COPY(dx, to, dy, o);                                                              \
    }                                                                                           \
  }                                                                                             \
}
DLRT__TYPED_KERNELS(f32, float, DLRT_LD_F32, DLRT_ST_F32)
DLRT__TYPED_KERNELS(f16, DLRT_U16, DLRT_LD_F16, DLRT_ST_F16)
DLRT__TYPED_KERNELS(bf16, DLRT_U16, DLRT_LD_BF16, DLRT_ST_BF16)
