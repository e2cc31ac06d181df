/* shape.h — axis kernels (slices, concatenation, sums over an axis), trailing-shape
 * broadcasting, and embeddings
 * (portable dialect, fp32 but broadcasting, which is in every storage type;
 * every output element written by one work-item,
 * so results are deterministic on every device). */
#include "dialect.h"

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

/* Broadcasting in every storage type (dlrt_k_bcast_<type>, bcast_grad_b;
 * arithmetic fp32, one rounding when stored). */
#define DLRT__BCAST_KERNELS(SUF, T, LD, ST)                                                   \
/* y[i] = a[i] (op) b[i % m]: b broadcast over a's leading dimensions;                        \
 * op 0 add, 1 sub, 2 mul, 3 div. */                                                          \
DLRT_KERNEL(dlrt_k_bcast_##SUF)(DLRT_RANGE DLRT_PTR(T, y), DLRT_CPTR(T, a), DLRT_CPTR(T, b),  \
                                DLRT_INDEX count, DLRT_INDEX m, DLRT_INDEX op) {              \
  DLRT_BIND(T, y);                                                                            \
  DLRT_CBIND(T, a);                                                                           \
  DLRT_CBIND(T, b);                                                                           \
  DLRT_FOR_EACH(i, count) {                                                                   \
    float u = LD(a, i), v = LD(b, i % m);                                                     \
    ST(y, i, op == 0 ? u + v : op == 1 ? u - v : op == 2 ? u * v : u / v);                    \
  }                                                                                           \
}                                                                                             \
/* The per-element part of the gradient for the broadcast operand of mul                      \
 * (dy * a) and div (-dy * a / b^2); the caller sums it over the rows. */                     \
DLRT_KERNEL(dlrt_k_bcast_grad_b_##SUF)(DLRT_RANGE DLRT_PTR(T, t), DLRT_CPTR(T, dy),           \
                                       DLRT_CPTR(T, a), DLRT_CPTR(T, b), DLRT_INDEX count,    \
                                       DLRT_INDEX m, DLRT_INDEX op) {                         \
  DLRT_BIND(T, t);                                                                            \
  DLRT_CBIND(T, dy);                                                                          \
  DLRT_CBIND(T, a);                                                                           \
  DLRT_CBIND(T, b);                                                                           \
  DLRT_FOR_EACH(i, count) {                                                                   \
    float v = LD(b, i % m);                                                                   \
    ST(t, i, op == 2 ? LD(dy, i) * LD(a, i) : -LD(dy, i) * LD(a, i) / (v * v));               \
  }                                                                                           \
}
DLRT__BCAST_KERNELS(f32, float, DLRT_LD_F32, DLRT_ST_F32)
DLRT__BCAST_KERNELS(f16, DLRT_U16, DLRT_LD_F16, DLRT_ST_F16)
DLRT__BCAST_KERNELS(bf16, DLRT_U16, DLRT_LD_BF16, DLRT_ST_BF16)

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

/* The same added to the gradient so far: dtable[v, :] = base[v, :] + the sum
 * of dy[k, :] over k with ids[k] == v (a tied embedding's second use).
 * Each element of base is read before the same element of dtable is
 * written, so dtable may be base itself (in place). */
DLRT_KERNEL(dlrt_k_embedding_grad_acc)(DLRT_RANGE DLRT_PTR(float, dtable),
                                       DLRT_CPTR(float, base), DLRT_CPTR(float, dy),
                                       DLRT_CPTR(int, ids), DLRT_INDEX count, DLRT_INDEX vocab,
                                       DLRT_INDEX dim) {
  DLRT_BIND(float, dtable);
  DLRT_CBIND(float, base);
  DLRT_CBIND(float, dy);
  DLRT_CBIND(int, ids);
  DLRT_FOR_EACH(v, vocab) {
    for (DLRT_INDEX d = 0; d < dim; d++) dtable[v * dim + d] = base[v * dim + d];
    for (DLRT_INDEX k = 0; k < count; k++)
      if (ids[k] == v)
        for (DLRT_INDEX d = 0; d < dim; d++) dtable[v * dim + d] += dy[k * dim + d];
  }
}
