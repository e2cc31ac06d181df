/* elementwise.h — fp32 elementwise kernels in the portable dialect.
 * Shapes: every operand is a flat array of n floats; y may alias x or z.
 * The OpenCL backend embeds this file (with dialect.h) as program source. */
#include "dialect.h"

/* y = alpha */
DLRT_KERNEL(dlrt_k_fill)(DLRT_RANGE DLRT_PTR(float, y), float alpha, DLRT_INDEX n) {
  DLRT_BIND(float, y);
  DLRT_FOR_EACH(i, n) y[i] = alpha;
}

/* y = alpha * x */
DLRT_KERNEL(dlrt_k_scale)(DLRT_RANGE DLRT_PTR(float, y), DLRT_CPTR(float, x), float alpha,
                          DLRT_INDEX n) {
  DLRT_BIND(float, y);
  DLRT_CBIND(float, x);
  DLRT_FOR_EACH(i, n) y[i] = alpha * x[i];
}

/* y = alpha * x + y */
DLRT_KERNEL(dlrt_k_axpy)(DLRT_RANGE DLRT_PTR(float, y), DLRT_CPTR(float, x), float alpha,
                         DLRT_INDEX n) {
  DLRT_BIND(float, y);
  DLRT_CBIND(float, x);
  DLRT_FOR_EACH(i, n) y[i] = alpha * x[i] + y[i];
}

/* y = x + z */
DLRT_KERNEL(dlrt_k_add)(DLRT_RANGE DLRT_PTR(float, y), DLRT_CPTR(float, x),
                        DLRT_CPTR(float, z), DLRT_INDEX n) {
  DLRT_BIND(float, y);
  DLRT_CBIND(float, x);
  DLRT_CBIND(float, z);
  DLRT_FOR_EACH(i, n) y[i] = x[i] + z[i];
}

/* y = x * z */
DLRT_KERNEL(dlrt_k_mul)(DLRT_RANGE DLRT_PTR(float, y), DLRT_CPTR(float, x),
                        DLRT_CPTR(float, z), DLRT_INDEX n) {
  DLRT_BIND(float, y);
  DLRT_CBIND(float, x);
  DLRT_CBIND(float, z);
  DLRT_FOR_EACH(i, n) y[i] = x[i] * z[i];
}

/* y = max(x, 0); NaN propagates (NaN <= 0 is false, so NaN passes through). */
DLRT_KERNEL(dlrt_k_relu)(DLRT_RANGE DLRT_PTR(float, y), DLRT_CPTR(float, x), DLRT_INDEX n) {
  DLRT_BIND(float, y);
  DLRT_CBIND(float, x);
  DLRT_FOR_EACH(i, n) y[i] = x[i] <= 0.0f ? 0.0f : x[i];
}
