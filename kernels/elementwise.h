/* elementwise.h — elementwise and cast kernels in the portable dialect, for
 * each storage type (f32, f16, bf16; arithmetic in fp32). Every operand is a
 * flat array of n elements; y may alias x or z exactly (in place). */
#include "dialect.h"

/* DLRT__EW_KERNELS(SUFFIX, T, LD, ST): the elementwise kernels for storage
 * type T, named dlrt_k_<op>_<SUFFIX>. */
#define DLRT__EW_KERNELS(SUF, T, LD, ST)                                              \
  /* y = alpha */                                                                    \
  DLRT_KERNEL(dlrt_k_fill_##SUF)(DLRT_RANGE DLRT_PTR(T, y), float alpha, DLRT_INDEX n) { \
    DLRT_BIND(T, y);                                                                 \
    DLRT_FOR_EACH(i, n) ST(y, i, alpha);                                             \
  }                                                                                  \
  /* y = alpha * x */                                                                \
  DLRT_KERNEL(dlrt_k_scale_##SUF)(DLRT_RANGE DLRT_PTR(T, y), DLRT_CPTR(T, x),        \
                                  float alpha, DLRT_INDEX n) {                       \
    DLRT_BIND(T, y);                                                                 \
    DLRT_CBIND(T, x);                                                                \
    DLRT_FOR_EACH(i, n) ST(y, i, alpha * LD(x, i));                                  \
  }                                                                                  \
  /* y = alpha * x + y */                                                            \
  DLRT_KERNEL(dlrt_k_axpy_##SUF)(DLRT_RANGE DLRT_PTR(T, y), DLRT_CPTR(T, x),         \
                                 float alpha, DLRT_INDEX n) {                        \
    DLRT_BIND(T, y);                                                                 \
    DLRT_CBIND(T, x);                                                                \
    DLRT_FOR_EACH(i, n) ST(y, i, alpha * LD(x, i) + LD(y, i));                       \
  }                                                                                  \
  /* y = x + z */                                                                    \
  DLRT_KERNEL(dlrt_k_add_##SUF)(DLRT_RANGE DLRT_PTR(T, y), DLRT_CPTR(T, x),          \
                                DLRT_CPTR(T, z), DLRT_INDEX n) {                     \
    DLRT_BIND(T, y);                                                                 \
    DLRT_CBIND(T, x);                                                                \
    DLRT_CBIND(T, z);                                                                \
    DLRT_FOR_EACH(i, n) ST(y, i, LD(x, i) + LD(z, i));                               \
  }                                                                                  \
  /* y = x * z */                                                                    \
  DLRT_KERNEL(dlrt_k_mul_##SUF)(DLRT_RANGE DLRT_PTR(T, y), DLRT_CPTR(T, x),          \
                                DLRT_CPTR(T, z), DLRT_INDEX n) {                     \
    DLRT_BIND(T, y);                                                                 \
    DLRT_CBIND(T, x);                                                                \
    DLRT_CBIND(T, z);                                                                \
    DLRT_FOR_EACH(i, n) ST(y, i, LD(x, i) * LD(z, i));                               \
  }                                                                                  \
  /* y = max(x, 0); NaN passes through (NaN <= 0 is false). */                      \
  DLRT_KERNEL(dlrt_k_relu_##SUF)(DLRT_RANGE DLRT_PTR(T, y), DLRT_CPTR(T, x),         \
                                 DLRT_INDEX n) {                                     \
    DLRT_BIND(T, y);                                                                 \
    DLRT_CBIND(T, x);                                                                \
    DLRT_FOR_EACH(i, n) {                                                            \
      float v = LD(x, i);                                                            \
      ST(y, i, v <= 0.0f ? 0.0f : v);                                                \
    }                                                                                \
  }

DLRT__EW_KERNELS(f32, float, DLRT_LD_F32, DLRT_ST_F32)
DLRT__EW_KERNELS(f16, DLRT_U16, DLRT_LD_F16, DLRT_ST_F16)
DLRT__EW_KERNELS(bf16, DLRT_U16, DLRT_LD_BF16, DLRT_ST_BF16)

/* y (type D) = x (type S), through fp32: dlrt_k_cast_<D>_<S>. */
#define DLRT__CAST_KERNEL(DS, DT, DST, SS, ST_, SLD)                                  \
  DLRT_KERNEL(dlrt_k_cast_##DS##_##SS)(DLRT_RANGE DLRT_PTR(DT, y), DLRT_CPTR(ST_, x), \
                                       DLRT_INDEX n) {                               \
    DLRT_BIND(DT, y);                                                                \
    DLRT_CBIND(ST_, x);                                                              \
    DLRT_FOR_EACH(i, n) DST(y, i, SLD(x, i));                                        \
  }
#define DLRT__CAST_FROM(SS, ST_, SLD)                                                 \
  DLRT__CAST_KERNEL(f32, float, DLRT_ST_F32, SS, ST_, SLD)                           \
  DLRT__CAST_KERNEL(f16, DLRT_U16, DLRT_ST_F16, SS, ST_, SLD)                        \
  DLRT__CAST_KERNEL(bf16, DLRT_U16, DLRT_ST_BF16, SS, ST_, SLD)

DLRT__CAST_FROM(f32, float, DLRT_LD_F32)
DLRT__CAST_FROM(f16, DLRT_U16, DLRT_LD_F16)
DLRT__CAST_FROM(bf16, DLRT_U16, DLRT_LD_BF16)
