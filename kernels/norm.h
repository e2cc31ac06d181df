/* norm.h — normalisation kernels: layer norm and batch norm (training, evaluation,
 * running statistics)
 * (portable dialect; the rows kernels in every storage type, evaluation and
 * running statistics fp32; every output element written by one work-item,
 * so results are deterministic on every device). */
#include "dialect.h"

/* ---- Normalisation over rows (layer norm; batch norm on channel rows). ----
 * x is rows x cols. Layer norm normalises each row of features with a
 * per-column scale and shift (per_row = 0); batch norm sees each channel as
 * one row of all its N*H*W values and has a per-row scale and shift
 * (per_row = 1). Statistics are biased (divided by cols), as in PyTorch.
 *
 * Storage types: x (and its gradient dx) has type TX, y (and dy) type TY;
 * mean, rstd, gamma, beta and their gradients are fp32, and so is all the
 * arithmetic. Mixed precision reads the fp32 residual stream and writes the
 * compute type in one pass (TX f32, TY f16 or bf16), or 16 bits in and out;
 * DLRT__NORM_KERNELS(SUF, ...) makes dlrt_k_<name>_<SUF> for each pair: f32,
 * f16, bf16 (TX = TY), f16_f32 and bf16_f32 (TY from TX = f32), in that
 * order (kernel_table.h: DLRT__NORM_TYPED). Given the same values, every
 * pair computes the same floats; only the loads and the final store differ. */
#define DLRT__NORM_KERNELS(SUF, TX, LDX, STX, TY, LDY, STY)                                     \
/* y = (x - mean) * rstd * gamma + beta, saving mean and rstd per row. */                       \
DLRT_KERNEL(dlrt_k_norm_rows_##SUF)(DLRT_RANGE DLRT_PTR(TY, y), DLRT_PTR(float, mean),          \
                                    DLRT_PTR(float, rstd), DLRT_CPTR(TX, x),                    \
                                    DLRT_CPTR(float, gamma), DLRT_CPTR(float, beta),            \
                                    DLRT_INDEX rows, DLRT_INDEX cols, float eps,                \
                                    DLRT_INDEX per_row) {                                       \
  DLRT_BIND(TY, y);                                                                             \
  DLRT_BIND(float, mean);                                                                       \
  DLRT_BIND(float, rstd);                                                                       \
  DLRT_CBIND(TX, x);                                                                            \
  DLRT_CBIND(float, gamma);                                                                     \
  DLRT_CBIND(float, beta);                                                                      \
  DLRT_LOCAL(float, red, DLRT_WG);                                                              \
  DLRT_LOCAL(float, stat, 2);                                                                   \
  DLRT_FOR_EACH_GROUP(r, rows) {                                                                \
    DLRT_GROUP_FOLD(red, 0.0f, DLRT_ADD, c, cols, LDX(x, r * cols + c));                        \
    DLRT_PHASE(lid) {                                                                           \
      if (lid == 0) stat[0] = red[0] / (float)cols;                                             \
    }                                                                                           \
    DLRT_BARRIER();                                                                             \
    DLRT_GROUP_FOLD(red, 0.0f, DLRT_ADD, c, cols,                                               \
                    (LDX(x, r * cols + c) - stat[0]) * (LDX(x, r * cols + c) - stat[0]));       \
    DLRT_PHASE(lid) {                                                                           \
      if (lid == 0) {                                                                           \
        stat[1] = 1.0f / DLRT_SQRT(red[0] / (float)cols + eps);                                 \
        mean[r] = stat[0];                                                                      \
        rstd[r] = stat[1];                                                                      \
      }                                                                                         \
    }                                                                                           \
    DLRT_BARRIER();                                                                             \
    DLRT_PHASE(lid) {                                                                           \
      for (DLRT_INDEX c = lid; c < cols; c += DLRT_WG) {                                        \
        DLRT_INDEX k = per_row ? r : c;                                                         \
        STY(y, r * cols + c, (LDX(x, r * cols + c) - stat[0]) * stat[1] * gamma[k] + beta[k]);  \
      }                                                                                         \
    }                                                                                           \
    DLRT_BARRIER();                                                                             \
  }                                                                                             \
}                                                                                               \
                                                                                                \
/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma. */                        \
DLRT_KERNEL(dlrt_k_norm_rows_grad_##SUF)(DLRT_RANGE DLRT_PTR(TX, dx), DLRT_CPTR(TY, dy),        \
                                         DLRT_CPTR(TX, x), DLRT_CPTR(float, mean),              \
                                         DLRT_CPTR(float, rstd), DLRT_CPTR(float, gamma),       \
                                         DLRT_INDEX rows, DLRT_INDEX cols,                      \
                                         DLRT_INDEX per_row) {                                  \
  DLRT_BIND(TX, dx);                                                                            \
  DLRT_CBIND(TY, dy);                                                                           \
  DLRT_CBIND(TX, x);                                                                            \
  DLRT_CBIND(float, mean);                                                                      \
  DLRT_CBIND(float, rstd);                                                                      \
  DLRT_CBIND(float, gamma);                                                                     \
  DLRT_LOCAL(float, red_g, DLRT_WG);                                                            \
  DLRT_LOCAL(float, red_gx, DLRT_WG);                                                           \
  DLRT_FOR_EACH_GROUP(r, rows) {                                                                \
    DLRT_PHASE(lid) {                                                                           \
      float a = 0.0f, b = 0.0f;                                                                 \
      for (DLRT_INDEX c = lid; c < cols; c += DLRT_WG) {                                        \
        float g = LDY(dy, r * cols + c) * gamma[per_row ? r : c];                               \
        a += g;                                                                                 \
        b += g * (LDX(x, r * cols + c) - mean[r]) * rstd[r];                                    \
      }                                                                                         \
      red_g[lid] = a;                                                                           \
      red_gx[lid] = b;                                                                          \
    }                                                                                           \
    DLRT_BARRIER();                                                                             \
    for (int s = DLRT_WG / 2; s > 0; s >>= 1) {                                                 \
      DLRT_PHASE(lid) {                                                                         \
        if (lid < s) {                                                                          \
          red_g[lid] += red_g[lid + s];                                                         \
          red_gx[lid] += red_gx[lid + s];                                                       \
        }                                                                                       \
      }                                                                                         \
      DLRT_BARRIER();                                                                           \
    }                                                                                           \
    DLRT_PHASE(lid) {                                                                           \
      float mg = red_g[0] / (float)cols, mgx = red_gx[0] / (float)cols;                         \
      for (DLRT_INDEX c = lid; c < cols; c += DLRT_WG) {                                        \
        float xhat = (LDX(x, r * cols + c) - mean[r]) * rstd[r];                                \
        float g = LDY(dy, r * cols + c) * gamma[per_row ? r : c];                               \
        STX(dx, r * cols + c, rstd[r] * (g - mg - xhat * mgx));                                 \
      }                                                                                         \
    }                                                                                           \
    DLRT_BARRIER();                                                                             \
  }                                                                                             \
}                                                                                               \
                                                                                                \
/* dgamma[k] = sum dy * xhat, dbeta[k] = sum dy over what scale k touches:                      \
 * row k (per_row) or column k. One work-item per k. */                                         \
DLRT_KERNEL(dlrt_k_norm_affine_grad_##SUF)(DLRT_RANGE DLRT_PTR(float, dgamma),                  \
                                           DLRT_PTR(float, dbeta), DLRT_CPTR(TY, dy),           \
                                           DLRT_CPTR(TX, x), DLRT_CPTR(float, mean),            \
                                           DLRT_CPTR(float, rstd), DLRT_INDEX rows,             \
                                           DLRT_INDEX cols, DLRT_INDEX per_row) {               \
  DLRT_BIND(float, dgamma);                                                                     \
  DLRT_BIND(float, dbeta);                                                                      \
  DLRT_CBIND(TY, dy);                                                                           \
  DLRT_CBIND(TX, x);                                                                            \
  DLRT_CBIND(float, mean);                                                                      \
  DLRT_CBIND(float, rstd);                                                                      \
  DLRT_FOR_EACH(k, per_row ? rows : cols) {                                                     \
    float g = 0.0f, b = 0.0f;                                                                   \
    DLRT_INDEX n = per_row ? cols : rows;                                                       \
    for (DLRT_INDEX j = 0; j < n; j++) {                                                        \
      DLRT_INDEX r = per_row ? k : j, c = per_row ? j : k;                                      \
      float d = LDY(dy, r * cols + c);                                                          \
      g += d * (LDX(x, r * cols + c) - mean[r]) * rstd[r];                                      \
      b += d;                                                                                   \
    }                                                                                           \
    dgamma[k] = g;                                                                              \
    dbeta[k] = b;                                                                               \
  }                                                                                             \
}

DLRT__NORM_KERNELS(f32, float, DLRT_LD_F32, DLRT_ST_F32, float, DLRT_LD_F32, DLRT_ST_F32)
DLRT__NORM_KERNELS(f16, DLRT_U16, DLRT_LD_F16, DLRT_ST_F16, DLRT_U16, DLRT_LD_F16, DLRT_ST_F16)
DLRT__NORM_KERNELS(bf16, DLRT_U16, DLRT_LD_BF16, DLRT_ST_BF16, DLRT_U16, DLRT_LD_BF16,
                   DLRT_ST_BF16)
DLRT__NORM_KERNELS(f16_f32, float, DLRT_LD_F32, DLRT_ST_F32, DLRT_U16, DLRT_LD_F16, DLRT_ST_F16)
DLRT__NORM_KERNELS(bf16_f32, float, DLRT_LD_F32, DLRT_ST_F32, DLRT_U16, DLRT_LD_BF16,
                   DLRT_ST_BF16)

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
