/* reduce.h — row reductions (sum, max) in the portable dialect.
 *
 * x is rows x cols, row-major, of storage type T. A reduction runs in two
 * launches so that one long row still spreads over the whole device:
 *   1. dlrt_k_reduce_<op>_<T>: rows * segs work-groups; group g reduces
 *      segment g % segs of row g / segs (a contiguous stretch of the row) into
 *      partial[g] (fp32);
 *   2. dlrt_k_reduce_final_<op>_<T>: one item per row combines its segs
 *      partials in order and stores y[row] as T.
 * The order of every addition is fixed by (rows, cols, segs), so results are
 * bitwise reproducible on a device from run to run. */
#include "dialect.h"

#define DLRT__SUM_IDENTITY 0.0f
#define DLRT__SUM_COMBINE(a, b) ((a) + (b))
/* -inf as bits, the same on every dialect. */
#define DLRT__MAX_IDENTITY DLRT_AS_FLOAT(0xff800000u)
/* NaN-propagating max: fmax would drop NaN. */
#define DLRT__MAX_COMBINE(a, b) ((a) != (a) || (a) > (b) ? (a) : (b))

#define DLRT__REDUCE_KERNELS(OP, IDENTITY, COMBINE, SUF, T, LD)                       \
  DLRT_KERNEL(dlrt_k_reduce_##OP##_##SUF)(DLRT_RANGE DLRT_CPTR(T, x),                 \
                                          DLRT_INDEX rows, DLRT_INDEX cols,           \
                                          DLRT_INDEX segs,                            \
                                          DLRT_PTR(float, partial)) {                 \
    DLRT_CBIND(T, x);                                                                 \
    DLRT_BIND(float, partial);                                                        \
    DLRT_LOCAL(float, acc, DLRT_WG);                                                  \
    DLRT_INDEX seg_len = (cols + segs - 1) / segs;                                    \
    DLRT_FOR_EACH_GROUP(g, rows * segs) {                                             \
      DLRT_INDEX row = g / segs, seg = g - row * segs;                                \
      DLRT_INDEX begin = seg * seg_len;                                               \
      DLRT_INDEX end = begin + seg_len < cols ? begin + seg_len : cols;               \
      DLRT_PHASE(lid) {                                                               \
        float a = IDENTITY;                                                           \
        for (DLRT_INDEX c = begin + lid; c < end; c += DLRT_WG)                       \
          a = COMBINE(a, LD(x, row * cols + c));                                      \
        acc[lid] = a;                                                                 \
      }                                                                               \
      DLRT_BARRIER();                                                                 \
      DLRT_GROUP_REDUCE(acc, COMBINE);                                            \
      DLRT_PHASE(lid) {                                                               \
        if (lid == 0) partial[g] = acc[0];                                            \
      }                                                                               \
      DLRT_BARRIER();                                                                 \
    }                                                                                 \
  }                                                                                   \
  DLRT_KERNEL(dlrt_k_reduce_final_##OP##_##SUF)(DLRT_RANGE DLRT_CPTR(float, partial), \
                                                DLRT_INDEX rows, DLRT_INDEX segs,     \
                                                DLRT_PTR(T, y)) {                     \
    DLRT_CBIND(float, partial);                                                       \
    DLRT_BIND(T, y);                                                                  \
    DLRT_FOR_EACH(r, rows) {                                                          \
      float a = IDENTITY;                                                             \
      for (DLRT_INDEX s = 0; s < segs; s++) a = COMBINE(a, partial[r * segs + s]);    \
      DLRT__ST_##SUF(y, r, a);                                                              \
    }                                                                                 \
  }

#define DLRT__ST_f32 DLRT_ST_F32
#define DLRT__ST_f16 DLRT_ST_F16
#define DLRT__ST_bf16 DLRT_ST_BF16

DLRT__REDUCE_KERNELS(sum, DLRT__SUM_IDENTITY, DLRT__SUM_COMBINE, f32, float, DLRT_LD_F32)
DLRT__REDUCE_KERNELS(sum, DLRT__SUM_IDENTITY, DLRT__SUM_COMBINE, f16, DLRT_U16, DLRT_LD_F16)
DLRT__REDUCE_KERNELS(sum, DLRT__SUM_IDENTITY, DLRT__SUM_COMBINE, bf16, DLRT_U16, DLRT_LD_BF16)
DLRT__REDUCE_KERNELS(max, DLRT__MAX_IDENTITY, DLRT__MAX_COMBINE, f32, float, DLRT_LD_F32)
DLRT__REDUCE_KERNELS(max, DLRT__MAX_IDENTITY, DLRT__MAX_COMBINE, f16, DLRT_U16, DLRT_LD_F16)
DLRT__REDUCE_KERNELS(max, DLRT__MAX_IDENTITY, DLRT__MAX_COMBINE, bf16, DLRT_U16, DLRT_LD_BF16)
