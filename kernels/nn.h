/* nn.h — neural-network kernels in the portable dialect (fp32): bias, ReLU
 * gradient, fused softmax + cross-entropy, column sums, im2col / col2im for
 * convolutions, max pooling, and the fused optimizer updates.
 * Every kernel writes each output element from one work-item (gathers, no
 * atomics), so results are deterministic on every device. */
#include "dialect.h"

/* y[r, c] = x[r, c] + b[c]; x, y: rows x cols; y may alias x. */
DLRT_KERNEL(dlrt_k_bias_rows)(DLRT_RANGE DLRT_PTR(float, y), DLRT_CPTR(float, x),
                              DLRT_CPTR(float, b), DLRT_INDEX rows, DLRT_INDEX cols) {
  DLRT_BIND(float, y);
  DLRT_CBIND(float, x);
  DLRT_CBIND(float, b);
  DLRT_FOR_EACH(i, rows * cols) y[i] = x[i] + b[i % cols];
}

/* y[n, c, s] = x[n, c, s] + b[c]; x, y: n x channels x spatial. One
 * work-item per (n, c) run of `spatial` values: no division per element. */
DLRT_KERNEL(dlrt_k_bias_channels)(DLRT_RANGE DLRT_PTR(float, y), DLRT_CPTR(float, x),
                                  DLRT_CPTR(float, b), DLRT_INDEX n, DLRT_INDEX channels,
                                  DLRT_INDEX spatial) {
  DLRT_BIND(float, y);
  DLRT_CBIND(float, x);
  DLRT_CBIND(float, b);
  DLRT_FOR_EACH(r, n * channels) {
    float bias = b[r % channels];
    for (DLRT_INDEX i = r * spatial; i < (r + 1) * spatial; i++) y[i] = x[i] + bias;
  }
}

/* dx = dy where x > 0, else 0 (the ReLU gradient; x is the ReLU's input or
 * output: both are positive at the same places). */
DLRT_KERNEL(dlrt_k_relu_grad)(DLRT_RANGE DLRT_PTR(float, dx), DLRT_CPTR(float, dy),
                              DLRT_CPTR(float, x), DLRT_INDEX count) {
  DLRT_BIND(float, dx);
  DLRT_CBIND(float, dy);
  DLRT_CBIND(float, x);
  DLRT_FOR_EACH(i, count) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

/* s[c] = sum over r of x[r, c]: x is rows x cols. One work-item per column,
 * rows in order: reads are coalesced across the columns. */
DLRT_KERNEL(dlrt_k_sum_cols)(DLRT_RANGE DLRT_PTR(float, s), DLRT_CPTR(float, x),
                             DLRT_INDEX rows, DLRT_INDEX cols, float beta) {
  DLRT_BIND(float, s);
  DLRT_CBIND(float, x);
  DLRT_FOR_EACH(c, cols) {
    float a = 0.0f;
    for (DLRT_INDEX r = 0; r < rows; r++) a += x[r * cols + c];
    s[c] = beta != 0.0f ? beta * s[c] + a : a; /* beta 0: s is not read (may be NaN) */
  }
}

/* s[c] = sum over n and p of x[n, c, p]: x is n x channels x spatial. */
DLRT_KERNEL(dlrt_k_sum_channels)(DLRT_RANGE DLRT_PTR(float, s), DLRT_CPTR(float, x),
                                 DLRT_INDEX n, DLRT_INDEX channels, DLRT_INDEX spatial) {
  DLRT_BIND(float, s);
  DLRT_CBIND(float, x);
  DLRT_FOR_EACH(c, channels) {
    float a = 0.0f;
    for (DLRT_INDEX b = 0; b < n; b++)
      for (DLRT_INDEX p = 0; p < spatial; p++) a += x[(b * channels + c) * spatial + p];
    s[c] = a;
  }
}

/* Fused log-softmax + cross-entropy with label smoothing, one work-group per
 * row of logits z (rows x classes), labels int32. Writes the row's loss and
 * the gradient of the mean loss with respect to z:
 *   p = softmax(z); q = (1 - eps) * onehot(label) + eps / classes
 *   loss[r] = -sum q * log p;  dz[r] = (p - q) * grad_scale
 * (grad_scale = 1 / rows for a mean over the batch). */
DLRT_KERNEL(dlrt_k_softmax_xent)(DLRT_RANGE DLRT_CPTR(float, z), DLRT_CPTR(int, labels),
                                 DLRT_PTR(float, loss), DLRT_PTR(float, dz), DLRT_INDEX rows,
                                 DLRT_INDEX classes, float smoothing, float grad_scale) {
  DLRT_CBIND(float, z);
  DLRT_CBIND(int, labels);
  DLRT_BIND(float, loss);
  DLRT_BIND(float, dz);
  DLRT_LOCAL(float, red, DLRT_WG);
  DLRT_LOCAL(float, row_max, 1);
  DLRT_LOCAL(float, row_lse, 1);
  DLRT_FOR_EACH_GROUP(r, rows) {
    DLRT_PHASE(lid) {
      float m = DLRT_AS_FLOAT(0xff800000u);
      for (DLRT_INDEX c = lid; c < classes; c += DLRT_WG) m = DLRT_FMAX(m, z[r * classes + c]);
      red[lid] = m;
    }
    DLRT_BARRIER();
    DLRT_GROUP_REDUCE(red, DLRT_FMAX);
    DLRT_PHASE(lid) {
      if (lid == 0) row_max[0] = red[0];
    }
    DLRT_BARRIER();
    DLRT_PHASE(lid) {
      float a = 0.0f;
      for (DLRT_INDEX c = lid; c < classes; c += DLRT_WG)
        a += DLRT_EXP(z[r * classes + c] - row_max[0]);
      red[lid] = a;
    }
    DLRT_BARRIER();
    DLRT_GROUP_REDUCE(red, DLRT_ADD);
    DLRT_PHASE(lid) {
      if (lid == 0) row_lse[0] = row_max[0] + DLRT_LOG(red[0]);
    }
    DLRT_BARRIER();
    /* -sum q log p = lse - sum q z, with sum q = 1. */
    DLRT_PHASE(lid) {
      float off = smoothing / (float)classes, a = 0.0f;
      int label = labels[r];
      for (DLRT_INDEX c = lid; c < classes; c += DLRT_WG) {
        float q = off + (c == label ? 1.0f - smoothing : 0.0f);
        float zc = z[r * classes + c];
        a += q * zc;
        dz[r * classes + c] = (DLRT_EXP(zc - row_lse[0]) - q) * grad_scale;
      }
      red[lid] = a;
    }
    DLRT_BARRIER();
    DLRT_GROUP_REDUCE(red, DLRT_ADD);
    DLRT_PHASE(lid) {
      if (lid == 0) loss[r] = row_lse[0] - red[0];
    }
    DLRT_BARRIER();
  }
}

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

/* SGD with momentum, Nesterov and L2 weight decay, as torch.optim.SGD:
 *   g = grad + wd * p; v = momentum * v + g (v = g on the first step);
 *   p -= lr * (nesterov ? g + momentum * v : v). */
DLRT_KERNEL(dlrt_k_sgd_update)(DLRT_RANGE DLRT_PTR(float, p), DLRT_PTR(float, v),
                               DLRT_CPTR(float, grad), DLRT_INDEX count, float lr,
                               float momentum, float weight_decay, float grad_scale,
                               DLRT_INDEX nesterov, DLRT_INDEX first) {
  DLRT_BIND(float, p);
  DLRT_BIND(float, v);
  DLRT_CBIND(float, grad);
  DLRT_FOR_EACH(i, count) {
    float g = grad[i] * grad_scale + weight_decay * p[i];
    float vi = first ? g : momentum * v[i] + g;
    v[i] = vi;
    p[i] -= lr * (nesterov ? g + momentum * vi : vi);
  }
}

/* Adam (decoupled = 0, L2 decay added to the gradient) and AdamW
 * (decoupled = 1), as torch.optim: step_size = lr / (1 - beta1^t) and
 * bias2 = sqrt(1 - beta2^t) are computed on the host for step t. */
DLRT_KERNEL(dlrt_k_adam_update)(DLRT_RANGE DLRT_PTR(float, p), DLRT_PTR(float, m),
                                DLRT_PTR(float, v), DLRT_CPTR(float, grad), DLRT_INDEX count,
                                float lr, float beta1, float beta2, float eps,
                                float weight_decay, float step_size, float bias2,
                                float grad_scale, DLRT_INDEX decoupled) {
  DLRT_BIND(float, p);
  DLRT_BIND(float, m);
  DLRT_BIND(float, v);
  DLRT_CBIND(float, grad);
  DLRT_FOR_EACH(i, count) {
    float g = grad[i] * grad_scale, w = p[i];
    if (decoupled) w -= lr * weight_decay * w;
    else g += weight_decay * w;
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    p[i] = w - step_size * mi / (DLRT_SQRT(vi) / bias2 + eps);
  }
}

/* y[i] = alpha * x[0]: spreads a scalar (the gradient of a sum) over y. */
DLRT_KERNEL(dlrt_k_broadcast_scalar)(DLRT_RANGE DLRT_PTR(float, y), DLRT_CPTR(float, x),
                                     float alpha, DLRT_INDEX count) {
  DLRT_BIND(float, y);
  DLRT_CBIND(float, x);
  DLRT_FOR_EACH(i, count) y[i] = alpha * x[0];
}

/* ---- More elementwise ops for graphs (fp32), each with its gradient. ---- */

/* y = x - z */
DLRT_KERNEL(dlrt_k_sub)(DLRT_RANGE DLRT_PTR(float, y), DLRT_CPTR(float, x), DLRT_CPTR(float, z),
                        DLRT_INDEX count) {
  DLRT_BIND(float, y);
  DLRT_CBIND(float, x);
  DLRT_CBIND(float, z);
  DLRT_FOR_EACH(i, count) y[i] = x[i] - z[i];
}

/* y = x / z */
DLRT_KERNEL(dlrt_k_div)(DLRT_RANGE DLRT_PTR(float, y), DLRT_CPTR(float, x), DLRT_CPTR(float, z),
                        DLRT_INDEX count) {
  DLRT_BIND(float, y);
  DLRT_CBIND(float, x);
  DLRT_CBIND(float, z);
  DLRT_FOR_EACH(i, count) y[i] = x[i] / z[i];
}

/* d(x / z)/dz: dz = -dy * x / z^2 */
DLRT_KERNEL(dlrt_k_div_grad_z)(DLRT_RANGE DLRT_PTR(float, dz), DLRT_CPTR(float, dy),
                               DLRT_CPTR(float, x), DLRT_CPTR(float, z), DLRT_INDEX count) {
  DLRT_BIND(float, dz);
  DLRT_CBIND(float, dy);
  DLRT_CBIND(float, x);
  DLRT_CBIND(float, z);
  DLRT_FOR_EACH(i, count) dz[i] = -dy[i] * x[i] / (z[i] * z[i]);
}

/* Activations: kind 0 tanh, 1 sigmoid, 2 GELU (exact, with erf, as PyTorch's
 * default). */
DLRT_KERNEL(dlrt_k_activation)(DLRT_RANGE DLRT_PTR(float, y), DLRT_CPTR(float, x),
                               DLRT_INDEX count, DLRT_INDEX kind) {
  DLRT_BIND(float, y);
  DLRT_CBIND(float, x);
  DLRT_FOR_EACH(i, count) {
    float v = x[i];
    y[i] = kind == 0   ? DLRT_TANH(v)
           : kind == 1 ? 1.0f / (1.0f + DLRT_EXP(-v))
                       : 0.5f * v * (1.0f + DLRT_ERF(v * 0.70710678118654752f));
  }
}

/* Their gradients: tanh and sigmoid from the output y, GELU from the input x
 * (pass it as `t`): dx = dy * f'(.) */
DLRT_KERNEL(dlrt_k_activation_grad)(DLRT_RANGE DLRT_PTR(float, dx), DLRT_CPTR(float, dy),
                                    DLRT_CPTR(float, t), DLRT_INDEX count, DLRT_INDEX kind) {
  DLRT_BIND(float, dx);
  DLRT_CBIND(float, dy);
  DLRT_CBIND(float, t);
  DLRT_FOR_EACH(i, count) {
    float v = t[i], d;
    if (kind == 0) d = 1.0f - v * v;
    else if (kind == 1) d = v * (1.0f - v);
    else d = 0.5f * (1.0f + DLRT_ERF(v * 0.70710678118654752f)) +
             v * 0.3989422804014327f * DLRT_EXP(-0.5f * v * v);
    dx[i] = dy[i] * d;
  }
}

/* Softmax over each row of x (rows x cols), one work-group per row. */
DLRT_KERNEL(dlrt_k_softmax)(DLRT_RANGE DLRT_PTR(float, y), DLRT_CPTR(float, x),
                            DLRT_INDEX rows, DLRT_INDEX cols) {
  DLRT_BIND(float, y);
  DLRT_CBIND(float, x);
  DLRT_LOCAL(float, red, DLRT_WG);
  DLRT_LOCAL(float, row_max, 1);
  DLRT_LOCAL(float, row_sum, 1);
  DLRT_FOR_EACH_GROUP(r, rows) {
    DLRT_PHASE(lid) {
      float m = DLRT_AS_FLOAT(0xff800000u);
      for (DLRT_INDEX c = lid; c < cols; c += DLRT_WG) m = DLRT_FMAX(m, x[r * cols + c]);
      red[lid] = m;
    }
    DLRT_BARRIER();
    DLRT_GROUP_REDUCE(red, DLRT_FMAX);
    DLRT_PHASE(lid) {
      if (lid == 0) row_max[0] = red[0];
    }
    DLRT_BARRIER();
    DLRT_PHASE(lid) {
      float a = 0.0f;
      for (DLRT_INDEX c = lid; c < cols; c += DLRT_WG) {
        float e = DLRT_EXP(x[r * cols + c] - row_max[0]);
        y[r * cols + c] = e;
        a += e;
      }
      red[lid] = a;
    }
    DLRT_BARRIER();
    DLRT_GROUP_REDUCE(red, DLRT_ADD);
    DLRT_PHASE(lid) {
      if (lid == 0) row_sum[0] = red[0];
    }
    DLRT_BARRIER();
    DLRT_PHASE(lid) {
      for (DLRT_INDEX c = lid; c < cols; c += DLRT_WG) y[r * cols + c] /= row_sum[0];
    }
    DLRT_BARRIER();
  }
}

/* dx = y * (dy - sum(dy * y)) per row, one work-group per row. */
DLRT_KERNEL(dlrt_k_softmax_grad)(DLRT_RANGE DLRT_PTR(float, dx), DLRT_CPTR(float, dy),
                                 DLRT_CPTR(float, y), DLRT_INDEX rows, DLRT_INDEX cols) {
  DLRT_BIND(float, dx);
  DLRT_CBIND(float, dy);
  DLRT_CBIND(float, y);
  DLRT_LOCAL(float, red, DLRT_WG);
  DLRT_LOCAL(float, dot, 1);
  DLRT_FOR_EACH_GROUP(r, rows) {
    DLRT_PHASE(lid) {
      float a = 0.0f;
      for (DLRT_INDEX c = lid; c < cols; c += DLRT_WG) a += dy[r * cols + c] * y[r * cols + c];
      red[lid] = a;
    }
    DLRT_BARRIER();
    DLRT_GROUP_REDUCE(red, DLRT_ADD);
    DLRT_PHASE(lid) {
      if (lid == 0) dot[0] = red[0];
    }
    DLRT_BARRIER();
    DLRT_PHASE(lid) {
      for (DLRT_INDEX c = lid; c < cols; c += DLRT_WG)
        dx[r * cols + c] = y[r * cols + c] * (dy[r * cols + c] - dot[0]);
    }
    DLRT_BARRIER();
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

/* Inverted dropout with a counter-based generator: element i is kept when
 * hash(seed, i) >= threshold (= p * 2^32), and kept values are scaled by
 * 1 / (1 - p). The same call on dy gives the gradient; the mask depends only
 * on (seed, i), so every device and thread count draws the same one. */
DLRT_KERNEL(dlrt_k_dropout)(DLRT_RANGE DLRT_PTR(float, y), DLRT_CPTR(float, x),
                            DLRT_INDEX count, DLRT_INDEX seed, DLRT_INDEX threshold,
                            float scale) {
  DLRT_BIND(float, y);
  DLRT_CBIND(float, x);
  DLRT_FOR_EACH(i, count) {
    unsigned int h = (unsigned int)seed ^ (unsigned int)((seed >> 32) * 0x9e3779b9u);
    h ^= (unsigned int)i * 0x85ebca6bu + (unsigned int)(i >> 32) * 0xc2b2ae35u;
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    h *= 0x846ca68bu;
    h ^= h >> 16;
    y[i] = (DLRT_INDEX)h >= threshold ? x[i] * scale : 0.0f;
  }
}

/* ---- Normalisation over rows (layer norm; batch norm on channel rows). ----
 * x is rows x cols. Layer norm normalises each row of features with a
 * per-column scale and shift (per_row = 0); batch norm sees each channel as
 * one row of all its N*H*W values and has a per-row scale and shift
 * (per_row = 1). Statistics are biased (divided by cols), as in PyTorch. */

/* y = (x - mean) * rstd * gamma + beta, saving mean and rstd per row. */
DLRT_KERNEL(dlrt_k_norm_rows)(DLRT_RANGE DLRT_PTR(float, y), DLRT_PTR(float, mean),
                              DLRT_PTR(float, rstd), DLRT_CPTR(float, x),
                              DLRT_CPTR(float, gamma), DLRT_CPTR(float, beta), DLRT_INDEX rows,
                              DLRT_INDEX cols, float eps, DLRT_INDEX per_row) {
  DLRT_BIND(float, y);
  DLRT_BIND(float, mean);
  DLRT_BIND(float, rstd);
  DLRT_CBIND(float, x);
  DLRT_CBIND(float, gamma);
  DLRT_CBIND(float, beta);
  DLRT_LOCAL(float, red, DLRT_WG);
  DLRT_LOCAL(float, stat, 2);
  DLRT_FOR_EACH_GROUP(r, rows) {
    DLRT_PHASE(lid) {
      float a = 0.0f;
      for (DLRT_INDEX c = lid; c < cols; c += DLRT_WG) a += x[r * cols + c];
      red[lid] = a;
    }
    DLRT_BARRIER();
    DLRT_GROUP_REDUCE(red, DLRT_ADD);
    DLRT_PHASE(lid) {
      if (lid == 0) stat[0] = red[0] / (float)cols;
    }
    DLRT_BARRIER();
    DLRT_PHASE(lid) {
      float a = 0.0f;
      for (DLRT_INDEX c = lid; c < cols; c += DLRT_WG) {
        float d = x[r * cols + c] - stat[0];
        a += d * d;
      }
      red[lid] = a;
    }
    DLRT_BARRIER();
    DLRT_GROUP_REDUCE(red, DLRT_ADD);
    DLRT_PHASE(lid) {
      if (lid == 0) {
        stat[1] = 1.0f / DLRT_SQRT(red[0] / (float)cols + eps);
        mean[r] = stat[0];
        rstd[r] = stat[1];
      }
    }
    DLRT_BARRIER();
    DLRT_PHASE(lid) {
      for (DLRT_INDEX c = lid; c < cols; c += DLRT_WG) {
        DLRT_INDEX k = per_row ? r : c;
        y[r * cols + c] = (x[r * cols + c] - stat[0]) * stat[1] * gamma[k] + beta[k];
      }
    }
    DLRT_BARRIER();
  }
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma. */
DLRT_KERNEL(dlrt_k_norm_rows_grad)(DLRT_RANGE DLRT_PTR(float, dx), DLRT_CPTR(float, dy),
                                   DLRT_CPTR(float, x), DLRT_CPTR(float, mean),
                                   DLRT_CPTR(float, rstd), DLRT_CPTR(float, gamma),
                                   DLRT_INDEX rows, DLRT_INDEX cols, DLRT_INDEX per_row) {
  DLRT_BIND(float, dx);
  DLRT_CBIND(float, dy);
  DLRT_CBIND(float, x);
  DLRT_CBIND(float, mean);
  DLRT_CBIND(float, rstd);
  DLRT_CBIND(float, gamma);
  DLRT_LOCAL(float, red_g, DLRT_WG);
  DLRT_LOCAL(float, red_gx, DLRT_WG);
  DLRT_FOR_EACH_GROUP(r, rows) {
    DLRT_PHASE(lid) {
      float a = 0.0f, b = 0.0f;
      for (DLRT_INDEX c = lid; c < cols; c += DLRT_WG) {
        float g = dy[r * cols + c] * gamma[per_row ? r : c];
        a += g;
        b += g * (x[r * cols + c] - mean[r]) * rstd[r];
      }
      red_g[lid] = a;
      red_gx[lid] = b;
    }
    DLRT_BARRIER();
    for (int s = DLRT_WG / 2; s > 0; s >>= 1) {
      DLRT_PHASE(lid) {
        if (lid < s) {
          red_g[lid] += red_g[lid + s];
          red_gx[lid] += red_gx[lid + s];
        }
      }
      DLRT_BARRIER();
    }
    DLRT_PHASE(lid) {
      float mg = red_g[0] / (float)cols, mgx = red_gx[0] / (float)cols;
      for (DLRT_INDEX c = lid; c < cols; c += DLRT_WG) {
        float xhat = (x[r * cols + c] - mean[r]) * rstd[r];
        float g = dy[r * cols + c] * gamma[per_row ? r : c];
        dx[r * cols + c] = rstd[r] * (g - mg - xhat * mgx);
      }
    }
    DLRT_BARRIER();
  }
}

/* dgamma[k] = sum dy * xhat, dbeta[k] = sum dy over what scale k touches:
 * row k (per_row) or column k. One work-item per k. */
DLRT_KERNEL(dlrt_k_norm_affine_grad)(DLRT_RANGE DLRT_PTR(float, dgamma), DLRT_PTR(float, dbeta),
                                     DLRT_CPTR(float, dy), DLRT_CPTR(float, x),
                                     DLRT_CPTR(float, mean), DLRT_CPTR(float, rstd),
                                     DLRT_INDEX rows, DLRT_INDEX cols, DLRT_INDEX per_row) {
  DLRT_BIND(float, dgamma);
  DLRT_BIND(float, dbeta);
  DLRT_CBIND(float, dy);
  DLRT_CBIND(float, x);
  DLRT_CBIND(float, mean);
  DLRT_CBIND(float, rstd);
  DLRT_FOR_EACH(k, per_row ? rows : cols) {
    float g = 0.0f, b = 0.0f;
    DLRT_INDEX n = per_row ? cols : rows;
    for (DLRT_INDEX j = 0; j < n; j++) {
      DLRT_INDEX r = per_row ? k : j, c = per_row ? j : k;
      float d = dy[r * cols + c];
      g += d * (x[r * cols + c] - mean[r]) * rstd[r];
      b += d;
    }
    dgamma[k] = g;
    dbeta[k] = b;
  }
}

/* Batch norm in evaluation: y = (x - running_mean) / sqrt(running_var + eps)
 * * gamma + beta, per row; one work-item per row. */
DLRT_KERNEL(dlrt_k_norm_rows_eval)(DLRT_RANGE DLRT_PTR(float, y), DLRT_CPTR(float, x),
                                   DLRT_CPTR(float, running_mean), DLRT_CPTR(float, running_var),
                                   DLRT_CPTR(float, gamma), DLRT_CPTR(float, beta),
                                   DLRT_INDEX rows, DLRT_INDEX cols, float eps) {
  DLRT_BIND(float, y);
  DLRT_CBIND(float, x);
  DLRT_CBIND(float, running_mean);
  DLRT_CBIND(float, running_var);
  DLRT_CBIND(float, gamma);
  DLRT_CBIND(float, beta);
  DLRT_FOR_EACH(r, rows) {
    float scale = gamma[r] / DLRT_SQRT(running_var[r] + eps);
    float shift = beta[r] - running_mean[r] * scale;
    for (DLRT_INDEX c = 0; c < cols; c++) y[r * cols + c] = x[r * cols + c] * scale + shift;
  }
}

/* running = (1 - momentum) * running + momentum * batch statistic, the
 * variance unbiased (times cols / (cols - 1)), as torch.nn.BatchNorm. */
DLRT_KERNEL(dlrt_k_bn_running)(DLRT_RANGE DLRT_PTR(float, running_mean),
                               DLRT_PTR(float, running_var), DLRT_CPTR(float, mean),
                               DLRT_CPTR(float, rstd), DLRT_INDEX rows, DLRT_INDEX cols,
                               float momentum, float eps) {
  DLRT_BIND(float, running_mean);
  DLRT_BIND(float, running_var);
  DLRT_CBIND(float, mean);
  DLRT_CBIND(float, rstd);
  DLRT_FOR_EACH(r, rows) {
    float var = 1.0f / (rstd[r] * rstd[r]) - eps;
    float unbiased = cols > 1 ? var * (float)cols / (float)(cols - 1) : var;
    running_mean[r] = (1.0f - momentum) * running_mean[r] + momentum * mean[r];
    running_var[r] = (1.0f - momentum) * running_var[r] + momentum * unbiased;
  }
}

/* ---- Axes: slices, concatenation, sums; broadcasting; embeddings. ----
 * A tensor seen as outer x axis x inner (row-major). */

/* y[o, y_start + j, i] = x[o, x_start + j, i] for j < count; one work-item
 * per (o, j) run of `inner` values. Slices and concatenation. */
DLRT_KERNEL(dlrt_k_axis_copy)(DLRT_RANGE DLRT_PTR(float, y), DLRT_CPTR(float, x),
                              DLRT_INDEX outer, DLRT_INDEX inner, DLRT_INDEX y_axis,
                              DLRT_INDEX x_axis, DLRT_INDEX y_start, DLRT_INDEX x_start,
                              DLRT_INDEX count) {
  DLRT_BIND(float, y);
  DLRT_CBIND(float, x);
  DLRT_FOR_EACH(r, outer * count) {
    DLRT_INDEX o = r / count, j = r - o * count;
    DLRT_GLOBAL_PTR(float) out = y + (o * y_axis + y_start + j) * inner;
    DLRT_GLOBAL_CPTR(float) in = x + (o * x_axis + x_start + j) * inner;
    for (DLRT_INDEX i = 0; i < inner; i++) out[i] = in[i];
  }
}

/* y[o, i] = scale * sum over j of x[o, j, i] (sum or mean over an axis). */
DLRT_KERNEL(dlrt_k_axis_sum)(DLRT_RANGE DLRT_PTR(float, y), DLRT_CPTR(float, x),
                             DLRT_INDEX outer, DLRT_INDEX axis, DLRT_INDEX inner, float scale) {
  DLRT_BIND(float, y);
  DLRT_CBIND(float, x);
  DLRT_FOR_EACH(k, outer * inner) {
    DLRT_INDEX o = k / inner, i = k - o * inner;
    float a = 0.0f;
    for (DLRT_INDEX j = 0; j < axis; j++) a += x[(o * axis + j) * inner + i];
    y[k] = a * scale;
  }
}

/* y[o, j, i] = scale * x[o, i]: the gradient of axis_sum. */
DLRT_KERNEL(dlrt_k_axis_expand)(DLRT_RANGE DLRT_PTR(float, y), DLRT_CPTR(float, x),
                                DLRT_INDEX outer, DLRT_INDEX axis, DLRT_INDEX inner,
                                float scale) {
  DLRT_BIND(float, y);
  DLRT_CBIND(float, x);
  DLRT_FOR_EACH(r, outer * axis) {
    DLRT_INDEX o = r / axis;
    for (DLRT_INDEX i = 0; i < inner; i++) y[r * inner + i] = scale * x[o * inner + i];
  }
}

/* y[i] = a[i] (op) b[i % m]: b broadcast over a's leading dimensions;
 * op 0 add, 1 sub, 2 mul, 3 div. */
DLRT_KERNEL(dlrt_k_bcast)(DLRT_RANGE DLRT_PTR(float, y), DLRT_CPTR(float, a),
                          DLRT_CPTR(float, b), DLRT_INDEX count, DLRT_INDEX m, DLRT_INDEX op) {
  DLRT_BIND(float, y);
  DLRT_CBIND(float, a);
  DLRT_CBIND(float, b);
  DLRT_FOR_EACH(i, count) {
    float u = a[i], v = b[i % m];
    y[i] = op == 0 ? u + v : op == 1 ? u - v : op == 2 ? u * v : u / v;
  }
}

/* The per-element part of the gradient for the broadcast operand of mul
 * (dy * a) and div (-dy * a / b^2); the caller sums it over the rows. */
DLRT_KERNEL(dlrt_k_bcast_grad_b)(DLRT_RANGE DLRT_PTR(float, t), DLRT_CPTR(float, dy),
                                 DLRT_CPTR(float, a), DLRT_CPTR(float, b), DLRT_INDEX count,
                                 DLRT_INDEX m, DLRT_INDEX op) {
  DLRT_BIND(float, t);
  DLRT_CBIND(float, dy);
  DLRT_CBIND(float, a);
  DLRT_CBIND(float, b);
  DLRT_FOR_EACH(i, count) {
    float v = b[i % m];
    t[i] = op == 2 ? dy[i] * a[i] : -dy[i] * a[i] / (v * v);
  }
}

/* y[k, :] = table[ids[k], :] (zeros for an id outside [0, vocab)). */
DLRT_KERNEL(dlrt_k_embedding)(DLRT_RANGE DLRT_PTR(float, y), DLRT_CPTR(int, ids),
                              DLRT_CPTR(float, table), DLRT_INDEX count, DLRT_INDEX vocab,
                              DLRT_INDEX dim) {
  DLRT_BIND(float, y);
  DLRT_CBIND(int, ids);
  DLRT_CBIND(float, table);
  DLRT_FOR_EACH(k, count) {
    DLRT_INDEX id = ids[k];
    for (DLRT_INDEX d = 0; d < dim; d++)
      y[k * dim + d] = id >= 0 && id < vocab ? table[id * dim + d] : 0.0f;
  }
}

/* dtable[v, :] = the sum of dy[k, :] over k with ids[k] == v: a gather per
 * vocabulary row (no atomics, deterministic; O(vocab x count)). */
DLRT_KERNEL(dlrt_k_embedding_grad)(DLRT_RANGE DLRT_PTR(float, dtable), DLRT_CPTR(float, dy),
                                   DLRT_CPTR(int, ids), DLRT_INDEX count, DLRT_INDEX vocab,
                                   DLRT_INDEX dim) {
  DLRT_BIND(float, dtable);
  DLRT_CBIND(float, dy);
  DLRT_CBIND(int, ids);
  DLRT_FOR_EACH(v, vocab) {
    for (DLRT_INDEX d = 0; d < dim; d++) dtable[v * dim + d] = 0.0f;
    for (DLRT_INDEX k = 0; k < count; k++)
      if (ids[k] == v)
        for (DLRT_INDEX d = 0; d < dim; d++) dtable[v * dim + d] += dy[k * dim + d];
  }
}
