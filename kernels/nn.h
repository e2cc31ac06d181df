/* nn.h — neural-network kernels in the portable dialect: fused softmax +
 * cross-entropy, activations and dropout (in every storage type), softmax,
 * sub / div (fp32). Bias,
 * the ReLU gradient, column sums, convolutions and max pooling are in
 * typed.h (every storage type), average pooling in conv.h,
 * optimizers in optim.h, normalisation in norm.h, axis ops in shape.h.
 * Every kernel writes each output element from one work-item (gathers, no
 * atomics), so results are deterministic on every device. */
#include "dialect.h"

/* Fused log-softmax + cross-entropy with label smoothing, one work-group per
 * row of logits z (rows x classes), labels int32. Writes the row's loss and
 * the gradient of the mean loss with respect to z:
 *   p = softmax(z); q = (1 - eps) * onehot(label) + eps / classes
 *   loss[r] = -sum q * log p;  dz[r] = (p - q) * grad_scale
 * (grad_scale = 1 / rows for a mean over the batch). z and dz have storage
 * type T, the losses are fp32 and so is the arithmetic (torch.autocast's
 * rule: cross-entropy computes in fp32); NAME is dlrt_k_softmax_xent for
 * f32, dlrt_k_softmax_xent_f16 and _bf16 for 16-bit logits. dz may be z
 * itself (the executor writes the gradient over logits it no longer needs):
 * each element is read, after the row's statistics, by the work-item that
 * then writes it; a native version must keep that order. */
#define DLRT__XENT_KERNEL(NAME, T, LD, ST)                                                    \
DLRT_KERNEL(NAME)(DLRT_RANGE DLRT_CPTR(T, z), DLRT_CPTR(int, labels), DLRT_PTR(float, loss),  \
                  DLRT_PTR(T, dz), DLRT_INDEX rows, DLRT_INDEX classes, float smoothing,      \
                  float grad_scale) {                                                         \
  DLRT_CBIND(T, z);                                                                           \
  DLRT_CBIND(int, labels);                                                                    \
  DLRT_BIND(float, loss);                                                                     \
  DLRT_BIND(T, dz);                                                                           \
  DLRT_LOCAL(float, red, DLRT_WG);                                                            \
  DLRT_LOCAL(float, row_max, 1);                                                              \
  DLRT_LOCAL(float, row_lse, 1);                                                              \
  DLRT_FOR_EACH_GROUP(r, rows) {                                                              \
    DLRT_GROUP_FOLD(red, DLRT_MINUS_INF, DLRT_FMAX, c, classes, LD(z, r * classes + c));      \
    DLRT_PHASE(lid) {                                                                         \
      if (lid == 0) row_max[0] = red[0];                                                      \
    }                                                                                         \
    DLRT_BARRIER();                                                                           \
    DLRT_GROUP_FOLD(red, 0.0f, DLRT_ADD, c, classes,                                          \
                    DLRT_EXP(LD(z, r * classes + c) - row_max[0]));                           \
    DLRT_PHASE(lid) {                                                                         \
      if (lid == 0) row_lse[0] = row_max[0] + DLRT_LOG(red[0]);                               \
    }                                                                                         \
    DLRT_BARRIER();                                                                           \
    /* -sum q log p = lse - sum q z, with sum q = 1. */                                       \
    DLRT_PHASE(lid) {                                                                         \
      float off = smoothing / (float)classes, a = 0.0f;                                       \
      int label = labels[r];                                                                  \
      for (DLRT_INDEX c = lid; c < classes; c += DLRT_WG) {                                   \
        float q = off + (c == label ? 1.0f - smoothing : 0.0f);                               \
        float zc = LD(z, r * classes + c);                                                    \
        a += q * zc;                                                                          \
        ST(dz, r * classes + c, (DLRT_EXP(zc - row_lse[0]) - q) * grad_scale);                \
      }                                                                                       \
      red[lid] = a;                                                                           \
    }                                                                                         \
    DLRT_BARRIER();                                                                           \
    DLRT_GROUP_REDUCE(red, DLRT_ADD);                                                         \
    DLRT_PHASE(lid) {                                                                         \
      if (lid == 0) loss[r] = row_lse[0] - red[0];                                            \
    }                                                                                         \
    DLRT_BARRIER();                                                                           \
  }                                                                                           \
}
DLRT__XENT_KERNEL(dlrt_k_softmax_xent, float, DLRT_LD_F32, DLRT_ST_F32)
DLRT__XENT_KERNEL(dlrt_k_softmax_xent_f16, DLRT_U16, DLRT_LD_F16, DLRT_ST_F16)
DLRT__XENT_KERNEL(dlrt_k_softmax_xent_bf16, DLRT_U16, DLRT_LD_BF16, DLRT_ST_BF16)

/* The cross-entropy over a vocabulary shard (tensor parallelism; lib/exec's
 * fused head over a shard): z holds this shard's logits, rows x classes,
 * which are ids [first, first + classes) of the vocabulary. Per row r (a
 * work-group each), stats[4r .. 4r + 3] = the row's maximum m, the sum of
 * exp(z - m), the target's logit (0 when another shard holds the label)
 * and the sum of the logits: what the peers combine instead of the logits. */
DLRT_KERNEL(dlrt_k_xent_shard_stats)(DLRT_RANGE DLRT_CPTR(float, z), DLRT_CPTR(int, labels),
                                     DLRT_PTR(float, stats), DLRT_INDEX rows,
                                     DLRT_INDEX classes, DLRT_INDEX first) {
  DLRT_CBIND(float, z);
  DLRT_CBIND(int, labels);
  DLRT_BIND(float, stats);
  DLRT_LOCAL(float, red, DLRT_WG);
  DLRT_LOCAL(float, row_max, 1);
  DLRT_FOR_EACH_GROUP(r, rows) {
    DLRT_GROUP_FOLD(red, DLRT_MINUS_INF, DLRT_FMAX, c, classes, z[r * classes + c]);
    DLRT_PHASE(lid) {
      if (lid == 0) row_max[0] = red[0];
    }
    DLRT_BARRIER();
    DLRT_GROUP_FOLD(red, 0.0f, DLRT_ADD, c, classes, DLRT_EXP(z[r * classes + c] - row_max[0]));
    DLRT_PHASE(lid) {
      if (lid == 0) stats[4 * r + 1] = red[0];
    }
    DLRT_BARRIER();
    DLRT_GROUP_FOLD(red, 0.0f, DLRT_ADD, c, classes, z[r * classes + c]);
    DLRT_PHASE(lid) {
      if (lid == 0) {
        DLRT_INDEX t = (DLRT_INDEX)labels[r] - first;
        stats[4 * r] = row_max[0];
        stats[4 * r + 2] = t >= 0 && t < classes ? z[r * classes + t] : 0.0f;
        stats[4 * r + 3] = red[0];
      }
    }
    DLRT_BARRIER();
  }
}

/* Its gradient, given each row's logsumexp over the whole vocabulary of
 * `vocab` (lse, rows): dz = (exp(z - lse) - q) grad_scale, q the smoothed
 * target (smoothing / vocab, plus 1 - smoothing at the label). dz may be z
 * itself: each element is read by the work-item that then writes it. */
DLRT_KERNEL(dlrt_k_xent_shard_grad)(DLRT_RANGE DLRT_PTR(float, dz), DLRT_CPTR(float, z),
                                    DLRT_CPTR(int, labels), DLRT_CPTR(float, lse),
                                    DLRT_INDEX rows, DLRT_INDEX classes, DLRT_INDEX first,
                                    DLRT_INDEX vocab, float smoothing, float grad_scale) {
  DLRT_BIND(float, dz);
  DLRT_CBIND(float, z);
  DLRT_CBIND(int, labels);
  DLRT_CBIND(float, lse);
  DLRT_FOR_EACH(i, rows * classes) {
    DLRT_INDEX r = i / classes, c = i % classes;
    float q = smoothing / (float)vocab +
              (c + first == (DLRT_INDEX)labels[r] ? 1.0f - smoothing : 0.0f);
    dz[i] = (DLRT_EXP(z[i] - lse[r]) - q) * grad_scale;
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

/* GELU's tanh form (GPT-2's, PyTorch's approximate="tanh"):
 * u = sqrt(2 / pi) (x + 0.044715 x^3), gelu(x) = 0.5 x (1 + tanh(u)). */
#define DLRT__GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define DLRT__GELU_A 0.044715f
#define DLRT__GELU_U(v) (DLRT__GELU_K * ((v) + DLRT__GELU_A * (v) * (v) * (v)))

/* Activations in every storage type (dlrt_k_activation_<type>, and
 * activation_grad; arithmetic fp32, each value rounded once when stored):
 * kind 0 tanh, 1 sigmoid, 2 GELU (exact, with erf, as PyTorch's default),
 * 3 GELU's tanh form. */
#define DLRT__ACT_KERNELS(SUF, T, LD, ST)                                                     \
DLRT_KERNEL(dlrt_k_activation_##SUF)(DLRT_RANGE DLRT_PTR(T, y), DLRT_CPTR(T, x),              \
                                     DLRT_INDEX count, DLRT_INDEX kind) {                     \
  DLRT_BIND(T, y);                                                                            \
  DLRT_CBIND(T, x);                                                                           \
  DLRT_FOR_EACH(i, count) {                                                                   \
    float v = LD(x, i);                                                                       \
    ST(y, i, kind == 0   ? DLRT_TANH(v)                                                       \
             : kind == 1 ? 1.0f / (1.0f + DLRT_EXP(-v))                                       \
             : kind == 2 ? 0.5f * v * (1.0f + DLRT_ERF(v * 0.70710678118654752f))             \
                         : 0.5f * v * (1.0f + DLRT_TANH(DLRT__GELU_U(v))));                   \
  }                                                                                           \
}                                                                                             \
/* Their gradients: tanh and sigmoid from the output y, the GELUs from the                    \
 * input x (pass it as `t`): dx = dy * f'(.). The tanh form's, with t =                       \
 * tanh(u): 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2 / pi) (1 + 3 0.044715 x^2). */               \
DLRT_KERNEL(dlrt_k_activation_grad_##SUF)(DLRT_RANGE DLRT_PTR(T, dx), DLRT_CPTR(T, dy),       \
                                          DLRT_CPTR(T, t), DLRT_INDEX count, DLRT_INDEX kind) { \
  DLRT_BIND(T, dx);                                                                           \
  DLRT_CBIND(T, dy);                                                                          \
  DLRT_CBIND(T, t);                                                                           \
  DLRT_FOR_EACH(i, count) {                                                                   \
    float v = LD(t, i), d;                                                                    \
    if (kind == 0) d = 1.0f - v * v;                                                          \
    else if (kind == 1) d = v * (1.0f - v);                                                   \
    else if (kind == 2) d = 0.5f * (1.0f + DLRT_ERF(v * 0.70710678118654752f)) +              \
                            v * 0.3989422804014327f * DLRT_EXP(-0.5f * v * v);                \
    else {                                                                                    \
      float th = DLRT_TANH(DLRT__GELU_U(v));                                                  \
      d = 0.5f * (1.0f + th) +                                                                \
          0.5f * v * (1.0f - th * th) * DLRT__GELU_K * (1.0f + 3.0f * DLRT__GELU_A * v * v);  \
    }                                                                                         \
    ST(dx, i, LD(dy, i) * d);                                                                 \
  }                                                                                           \
}
DLRT__ACT_KERNELS(f32, float, DLRT_LD_F32, DLRT_ST_F32)
DLRT__ACT_KERNELS(f16, DLRT_U16, DLRT_LD_F16, DLRT_ST_F16)
DLRT__ACT_KERNELS(bf16, DLRT_U16, DLRT_LD_BF16, DLRT_ST_BF16)

/* Softmax over each row of x (rows x cols), one work-group per row. */
DLRT_KERNEL(dlrt_k_softmax)(DLRT_RANGE DLRT_PTR(float, y), DLRT_CPTR(float, x),
                            DLRT_INDEX rows, DLRT_INDEX cols) {
  DLRT_BIND(float, y);
  DLRT_CBIND(float, x);
  DLRT_LOCAL(float, red, DLRT_WG);
  DLRT_LOCAL(float, row_max, 1);
  DLRT_LOCAL(float, row_sum, 1);
  DLRT_FOR_EACH_GROUP(r, rows) {
    DLRT_GROUP_FOLD(red, DLRT_MINUS_INF, DLRT_FMAX, c, cols, x[r * cols + c]);
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
    DLRT_GROUP_FOLD(red, 0.0f, DLRT_ADD, c, cols, dy[r * cols + c] * y[r * cols + c]);
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

/* Inverted dropout with a counter-based generator: element i is kept when
 * hash(seed, i) >= threshold (= p * 2^32), and kept values are scaled by
 * 1 / (1 - p). The same call on dy gives the gradient; the mask depends only
 * on (seed, i), so every device and thread count draws the same one. In
 * every storage type (dlrt_k_dropout_<type>; the scaling in fp32). */
#define DLRT__DROPOUT_KERNEL(SUF, T, LD, ST)                                                  \
DLRT_KERNEL(dlrt_k_dropout_##SUF)(DLRT_RANGE DLRT_PTR(T, y), DLRT_CPTR(T, x),                 \
                                  DLRT_INDEX count, DLRT_INDEX seed, DLRT_INDEX threshold,    \
                                  float scale) {                                              \
  DLRT_BIND(T, y);                                                                            \
  DLRT_CBIND(T, x);                                                                           \
  DLRT_FOR_EACH(i, count) {                                                                   \
    unsigned int h = (unsigned int)seed ^ (unsigned int)((seed >> 32) * 0x9e3779b9u);         \
    h ^= (unsigned int)i * 0x85ebca6bu + (unsigned int)(i >> 32) * 0xc2b2ae35u;               \
    h ^= h >> 16;                                                                             \
    h *= 0x7feb352du;                                                                         \
    h ^= h >> 15;                                                                             \
    h *= 0x846ca68bu;                                                                         \
    h ^= h >> 16;                                                                             \
    ST(y, i, (DLRT_INDEX)h >= threshold ? LD(x, i) * scale : 0.0f);                           \
  }                                                                                           \
}
DLRT__DROPOUT_KERNEL(f32, float, DLRT_LD_F32, DLRT_ST_F32)
DLRT__DROPOUT_KERNEL(f16, DLRT_U16, DLRT_LD_F16, DLRT_ST_F16)
DLRT__DROPOUT_KERNEL(bf16, DLRT_U16, DLRT_LD_BF16, DLRT_ST_BF16)
