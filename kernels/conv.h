/* conv.h — convolution and pooling kernels: im2col / col2im, the CNHW <-> NCHW
 * permute, max and average pooling with their gradients
 * (portable dialect, fp32; every output element written by one work-item,
 * so results are deterministic on every device). */
#include "dialect.h"

/* Image tensors inside convolution stacks are stored channel-major, C x N x
 * H x W ("CNHW"), so that one GEMM covers the whole batch; `cn` says
 * whether x is CNHW (1) or N x C x H x W (0). cols is (c, ky, kx) x
 * (n, oy, ox): cols[row, n*oh*ow + oy*ow + ox] = x[n, c, oy*stride - pad +
 * ky*dil, ox*stride - pad + kx*dil], 0 outside the image. */
#define DLRT__PIXEL(cn, b, ch, n, c, h, w, iy, ix) \
  ((((cn) ? (ch) * (n) + (b) : (b) * (c) + (ch)) * (h) + (iy)) * (w) + (ix))

/* One work-item per (row, image): oh x ow values, so the index arithmetic
 * is paid once per image plane rather than per value. */
DLRT_KERNEL(dlrt_k_im2col)(DLRT_RANGE DLRT_PTR(float, cols), DLRT_CPTR(float, x),
                           DLRT_INDEX n, DLRT_INDEX c, DLRT_INDEX h, DLRT_INDEX w,
                           DLRT_INDEX kh, DLRT_INDEX kw, DLRT_INDEX stride, DLRT_INDEX pad,
                           DLRT_INDEX dil, DLRT_INDEX oh, DLRT_INDEX ow, DLRT_INDEX cn) {
  DLRT_BIND(float, cols);
  DLRT_CBIND(float, x);
  DLRT_FOR_EACH(item, c * kh * kw * n) {
    DLRT_INDEX b = item % n, row = item / n;
    DLRT_INDEX ch = row / (kh * kw), k = row - ch * (kh * kw);
    DLRT_INDEX ky = (k / kw) * dil, kx = (k % kw) * dil;
    DLRT_GLOBAL_CPTR(float) plane = x + DLRT__PIXEL(cn, b, ch, n, c, h, w, 0, 0);
    DLRT_GLOBAL_PTR(float) out = cols + item * (oh * ow);
    /* Output columns whose input column lies inside the image (stride 1:
     * ox in [lo, hi)). */
    DLRT_INDEX lo = pad - kx > 0 ? pad - kx : 0, hi = w + pad - kx < ow ? w + pad - kx : ow;
    for (DLRT_INDEX oy = 0; oy < oh; oy++, out += ow) {
      DLRT_INDEX iy = oy * stride - pad + ky;
      if (iy < 0 || iy >= h) {
        for (DLRT_INDEX ox = 0; ox < ow; ox++) out[ox] = 0.0f;
      } else if (stride == 1) {
        DLRT_GLOBAL_CPTR(float) src = plane + iy * w - pad + kx;
        for (DLRT_INDEX ox = 0; ox < lo; ox++) out[ox] = 0.0f;
        for (DLRT_INDEX ox = lo; ox < hi; ox++) out[ox] = src[ox];
        for (DLRT_INDEX ox = hi > lo ? hi : lo; ox < ow; ox++) out[ox] = 0.0f;
      } else {
        for (DLRT_INDEX ox = 0; ox < ow; ox++) {
          DLRT_INDEX ix = ox * stride - pad + kx;
          out[ox] = ix >= 0 && ix < w ? plane[iy * w + ix] : 0.0f;
        }
      }
    }
  }
}

/* The adjoint of im2col, as a gather: dx (layout `cn`) at a pixel = the sum
 * of every cols entry im2col took from it. One work-item per image row. */
DLRT_KERNEL(dlrt_k_col2im)(DLRT_RANGE DLRT_PTR(float, dx), DLRT_CPTR(float, cols),
                           DLRT_INDEX n, DLRT_INDEX c, DLRT_INDEX h, DLRT_INDEX w,
                           DLRT_INDEX kh, DLRT_INDEX kw, DLRT_INDEX stride, DLRT_INDEX pad,
                           DLRT_INDEX dil, DLRT_INDEX oh, DLRT_INDEX ow, DLRT_INDEX cn) {
  DLRT_BIND(float, dx);
  DLRT_CBIND(float, cols);
  DLRT_INDEX width = n * oh * ow;
  DLRT_FOR_EACH(r, n * c * h) {
    DLRT_INDEX iy = r % h, plane = r / h;
    DLRT_INDEX ch = cn ? plane / n : plane % c, b = cn ? plane % n : plane / c;
    DLRT_GLOBAL_PTR(float) out = dx + r * w;
    for (DLRT_INDEX ix = 0; ix < w; ix++) out[ix] = 0.0f;
    for (DLRT_INDEX ky = 0; ky < kh; ky++) {
      DLRT_INDEX ty = iy + pad - ky * dil;
      if (ty < 0 || ty % stride != 0 || ty / stride >= oh) continue;
      for (DLRT_INDEX kx = 0; kx < kw; kx++) {
        DLRT_GLOBAL_CPTR(float) src =
            cols + ((ch * kh + ky) * kw + kx) * width + b * (oh * ow) + (ty / stride) * ow;
        DLRT_INDEX shift = pad - kx * dil; /* tx = ix + shift */
        if (stride == 1) {
          DLRT_INDEX lo = -shift > 0 ? -shift : 0, hi = ow - shift < w ? ow - shift : w;
          for (DLRT_INDEX ix = lo; ix < hi; ix++) out[ix] += src[ix + shift];
        } else {
          for (DLRT_INDEX ix = 0; ix < w; ix++) {
            DLRT_INDEX tx = ix + shift;
            if (tx >= 0 && tx % stride == 0 && tx / stride < ow) out[ix] += src[tx / stride];
          }
        }
      }
    }
  }
}

/* y[b, a, p] = x[a, b, p]: swaps the two leading axes (CNHW <-> NCHW). */
DLRT_KERNEL(dlrt_k_swap01)(DLRT_RANGE DLRT_PTR(float, y), DLRT_CPTR(float, x), DLRT_INDEX na,
                           DLRT_INDEX nb, DLRT_INDEX inner) {
  DLRT_BIND(float, y);
  DLRT_CBIND(float, x);
  /* One work-item per (b, a) run of `inner` values. */
  DLRT_FOR_EACH(r, na * nb) {
    DLRT_INDEX b = r / na, a = r - b * na;
    DLRT_GLOBAL_PTR(float) out = y + r * inner;
    DLRT_GLOBAL_CPTR(float) in = x + (a * nb + b) * inner;
    for (DLRT_INDEX p = 0; p < inner; p++) out[p] = in[p];
  }
}

/* Max pooling over k x k windows with a stride, no padding: y and the flat
 * input index of each window's maximum (first one on ties; NaN wins). x is
 * planes x h x w. */
DLRT_KERNEL(dlrt_k_maxpool)(DLRT_RANGE DLRT_PTR(float, y), DLRT_PTR(int, argmax),
                            DLRT_CPTR(float, x), DLRT_INDEX planes, DLRT_INDEX h,
                            DLRT_INDEX w, DLRT_INDEX k, DLRT_INDEX stride, DLRT_INDEX oh,
                            DLRT_INDEX ow) {
  DLRT_BIND(float, y);
  DLRT_BIND(int, argmax);
  DLRT_CBIND(float, x);
  /* One work-item per plane. */
  DLRT_FOR_EACH(p, planes) {
    if (k == 2 && stride == 2) {
      /* The common 2 x 2 window, unrolled: the same scan order (row by
       * row), so the same maximum and index on ties and NaN, with selects
       * the compiler can keep out of branches. */
      for (DLRT_INDEX oy = 0; oy < oh; oy++) {
        DLRT_INDEX top = p * h * w + 2 * oy * w, o = (p * oh + oy) * ow;
        for (DLRT_INDEX ox = 0; ox < ow; ox++) {
          DLRT_INDEX i0 = top + 2 * ox, i1 = i0 + 1, i2 = i0 + w, i3 = i2 + 1;
          float m = x[i0], v1 = x[i1], v2 = x[i2], v3 = x[i3];
          DLRT_INDEX best = i0;
          int take = v1 > m || (v1 != v1 && m == m);
          m = take ? v1 : m, best = take ? i1 : best;
          take = v2 > m || (v2 != v2 && m == m);
          m = take ? v2 : m, best = take ? i2 : best;
          take = v3 > m || (v3 != v3 && m == m);
          m = take ? v3 : m, best = take ? i3 : best;
          y[o + ox] = m;
          argmax[o + ox] = (int)best;
        }
      }
      continue;
    }
    for (DLRT_INDEX oy = 0; oy < oh; oy++) {
      DLRT_INDEX top = p * h * w + oy * stride * w, o = (p * oh + oy) * ow;
      for (DLRT_INDEX ox = 0; ox < ow; ox++) {
        DLRT_INDEX best = top + ox * stride;
        float m = x[best];
        for (DLRT_INDEX ky = 0; ky < k; ky++)
          for (DLRT_INDEX kx = 0; kx < k; kx++) {
            DLRT_INDEX at = top + ky * w + ox * stride + kx;
            float v = x[at];
            if (v > m || (v != v && m == m)) {
              m = v;
              best = at;
            }
          }
        y[o + ox] = m;
        argmax[o + ox] = (int)best;
      }
    }
  }
}

/* dx[j] = the sum of dy over the windows whose maximum was input j (a gather
 * over the windows that cover j); one work-item per input row. */
DLRT_KERNEL(dlrt_k_maxpool_grad)(DLRT_RANGE DLRT_PTR(float, dx), DLRT_CPTR(float, dy),
                                 DLRT_CPTR(int, argmax), DLRT_INDEX planes, DLRT_INDEX h,
                                 DLRT_INDEX w, DLRT_INDEX k, DLRT_INDEX stride, DLRT_INDEX oh,
                                 DLRT_INDEX ow) {
  DLRT_BIND(float, dx);
  DLRT_CBIND(float, dy);
  DLRT_CBIND(int, argmax);
  DLRT_FOR_EACH(r, planes * h) {
    DLRT_INDEX p = r / h, iy = r - p * h;
    /* Windows oy with oy*stride <= iy < oy*stride + k. */
    DLRT_INDEX oy0 = iy >= k ? (iy - k) / stride + 1 : 0, oy1 = iy / stride;
    if (oy1 >= oh) oy1 = oh - 1;
    for (DLRT_INDEX ix = 0; ix < w; ix++) {
      DLRT_INDEX j = r * w + ix;
      DLRT_INDEX ox0 = ix >= k ? (ix - k) / stride + 1 : 0, ox1 = ix / stride;
      if (ox1 >= ow) ox1 = ow - 1;
      float a = 0.0f;
      for (DLRT_INDEX oy = oy0; oy <= oy1; oy++)
        for (DLRT_INDEX ox = ox0; ox <= ox1; ox++) {
          DLRT_INDEX o = (p * oh + oy) * ow + ox;
          if (argmax[o] == (int)j) a += dy[o];
        }
      dx[j] = a;
    }
  }
}

/* The max-pool gradient when windows do not overlap (stride >= k): each
 * window hands dy to its maximum, after dx was zeroed; one work-item per
 * output row, whose windows own disjoint input pixels. */
DLRT_KERNEL(dlrt_k_maxpool_scatter)(DLRT_RANGE DLRT_PTR(float, dx), DLRT_CPTR(float, dy),
                                    DLRT_CPTR(int, argmax), DLRT_INDEX rows, DLRT_INDEX ow) {
  DLRT_BIND(float, dx);
  DLRT_CBIND(float, dy);
  DLRT_CBIND(int, argmax);
  DLRT_FOR_EACH(r, rows) {
    for (DLRT_INDEX o = r * ow; o < (r + 1) * ow; o++) dx[argmax[o]] = dy[o];
  }
}

/* Average pooling over k x k windows with a stride, no padding; x is planes x
 * h x w, one work-item per plane. */
DLRT_KERNEL(dlrt_k_avgpool)(DLRT_RANGE DLRT_PTR(float, y), DLRT_CPTR(float, x),
                            DLRT_INDEX planes, DLRT_INDEX h, DLRT_INDEX w, DLRT_INDEX k,
                            DLRT_INDEX stride, DLRT_INDEX oh, DLRT_INDEX ow) {
  DLRT_BIND(float, y);
  DLRT_CBIND(float, x);
  float scale = 1.0f / (float)(k * k);
  DLRT_FOR_EACH(p, planes) {
    for (DLRT_INDEX oy = 0; oy < oh; oy++)
      for (DLRT_INDEX ox = 0; ox < ow; ox++) {
        float a = 0.0f;
        for (DLRT_INDEX ky = 0; ky < k; ky++)
          for (DLRT_INDEX kx = 0; kx < k; kx++)
            a += x[p * h * w + (oy * stride + ky) * w + ox * stride + kx];
        y[(p * oh + oy) * ow + ox] = a * scale;
      }
  }
}

/* dx[j] = the sum over the windows covering j of dy / k^2 (a gather); one
 * work-item per plane. */
DLRT_KERNEL(dlrt_k_avgpool_grad)(DLRT_RANGE DLRT_PTR(float, dx), DLRT_CPTR(float, dy),
                                 DLRT_INDEX planes, DLRT_INDEX h, DLRT_INDEX w, DLRT_INDEX k,
                                 DLRT_INDEX stride, DLRT_INDEX oh, DLRT_INDEX ow) {
  DLRT_BIND(float, dx);
  DLRT_CBIND(float, dy);
  float scale = 1.0f / (float)(k * k);
  DLRT_FOR_EACH(p, planes) {
    for (DLRT_INDEX iy = 0; iy < h; iy++) {
      DLRT_INDEX oy0 = iy >= k ? (iy - k) / stride + 1 : 0, oy1 = iy / stride;
      if (oy1 >= oh) oy1 = oh - 1;
      for (DLRT_INDEX ix = 0; ix < w; ix++) {
        DLRT_INDEX ox0 = ix >= k ? (ix - k) / stride + 1 : 0, ox1 = ix / stride;
        if (ox1 >= ow) ox1 = ow - 1;
        float a = 0.0f;
        for (DLRT_INDEX oy = oy0; oy <= oy1; oy++)
          for (DLRT_INDEX ox = ox0; ox <= ox1; ox++) a += dy[(p * oh + oy) * ow + ox];
        dx[(p * h + iy) * w + ix] = a * scale;
      }
    }
  }
}
