/* kernel_table.h — the kernel table: every kernel of kernels/, its name and
 * the kinds of its arguments, declared once. Everything that names a kernel
 * or passes it arguments is generated from it:
 *
 *   dlrt__kernel_id      DLRT__K_<name>, in table order, and DLRT__K_COUNT;
 *   dlrt__kernel_table   {name, n_args, kinds} per id (kernel_table.c), the
 *                        OpenCL backend's kernel names, and what lib/device
 *                        checks every launch against (launch.c);
 *   the CPU wrappers     that unpack a launch's arguments and call the
 *                        plain-C kernel (backends/cpu/cpu_kernels.c), and
 *   the CUDA entry table (kernels/cuda_kernels.cu); both compilers check each
 *                        entry against the kernel's signature exactly.
 *
 * X(name, ARGS...) declares the kernel dlrt_k_<name> of the kernel headers;
 * ARGS are its parameters after DLRT_RANGE, in signature order, each one of
 *
 *   BUF(T)   an array parameter, DLRT_PTR(T, p) as BUF(T) and DLRT_CPTR(T, p)
 *            as BUF(const T): launched as a buffer (DLRT__ARG_BUFFER);
 *   F32      a float parameter (DLRT__ARG_F32);
 *   I64      a DLRT_INDEX parameter (DLRT__ARG_I64).
 *
 * At most DLRT__MAX_ARGS of them. BUF, F32 and I64 are pasted onto a prefix
 * (DLRT__KARG_##a), never defined here: a file that expands the table must
 * not define them as object-like macros.
 *
 * Ids are arithmetic in two places, so the families below keep their order:
 * a DLRT__KERNELS_OF_TYPE family is repeated for f32, f16, bf16
 * (lib/device/compute.c: kernel_for), and a DLRT__TYPED kernel's variants
 * follow its f32 one in dlrt_dtype order (lib/exec/exec_ops.c: typed).
 *
 * Adding a kernel: write it in a header of kernels/ and add its line here;
 * the CPU and CUDA builds fail until the line and the signature agree. */
#ifndef DLRT_KERNELS_KERNEL_TABLE_H
#define DLRT_KERNELS_KERNEL_TABLE_H

/* The elementwise, reduction and cast kernels of storage type T (suffix)
 * whose element type is C. */
#define DLRT__KERNELS_OF_TYPE(X, T, C)                                                    \
  X(fill_##T, BUF(C), F32, I64)                                                           \
  X(scale_##T, BUF(C), BUF(const C), F32, I64)                                            \
  X(axpy_##T, BUF(C), BUF(const C), F32, I64)                                             \
  X(add_##T, BUF(C), BUF(const C), BUF(const C), I64)                                     \
  X(mul_##T, BUF(C), BUF(const C), BUF(const C), I64)                                     \
  X(relu_##T, BUF(C), BUF(const C), I64)                                                  \
  /* x, rows, cols, segs, partial */                                                      \
  X(reduce_sum_##T, BUF(const C), I64, I64, I64, BUF(float))                              \
  X(reduce_max_##T, BUF(const C), I64, I64, I64, BUF(float))                              \
  /* partial, rows, segs, y */                                                            \
  X(reduce_final_sum_##T, BUF(const float), I64, I64, BUF(C))                             \
  X(reduce_final_max_##T, BUF(const float), I64, I64, BUF(C))                             \
  /* cast_<dst>_<src>: y, x, n */                                                         \
  X(cast_f32_##T, BUF(float), BUF(const C), I64)                                          \
  X(cast_f16_##T, BUF(DLRT_U16), BUF(const C), I64)                                       \
  X(cast_bf16_##T, BUF(DLRT_U16), BUF(const C), I64)

/* A kernel in the three storage types (typed.h, attention.h, nn.h's activations and
 * dropout, shape.h's broadcasts), dlrt_k_<name>_f32 with
 * T = float, then _f16 and _bf16 with T = DLRT_U16, its arguments
 * DLRT__ARGS_<name>(T). The id of name's kernel for dtype d is
 * DLRT__K_<name>_f32 + d. */
#define DLRT__TYPED(X, name)                                                              \
  DLRT__TYPED_1(X, name##_f32, DLRT__ARGS_##name(float))                                  \
  DLRT__TYPED_1(X, name##_f16, DLRT__ARGS_##name(DLRT_U16))                               \
  DLRT__TYPED_1(X, name##_bf16, DLRT__ARGS_##name(DLRT_U16))
#define DLRT__TYPED_1(X, name, ...) X(name, __VA_ARGS__)

#define DLRT_KERNEL_TABLE(X)                                                              \
  DLRT__KERNELS_OF_TYPE(X, f32, float)                                                    \
  DLRT__KERNELS_OF_TYPE(X, f16, DLRT_U16)                                                 \
  DLRT__KERNELS_OF_TYPE(X, bf16, DLRT_U16)                                                \
  /* y, x, batch, rows, cols */                                                           \
  X(transpose_b32, BUF(unsigned int), BUF(const unsigned int), I64, I64, I64)             \
  X(transpose_b16, BUF(DLRT_U16), BUF(const DLRT_U16), I64, I64, I64)                     \
  /* y, x, rows, n1, n2, n3, t0, t1, t2, t3 */                                            \
  X(gather_b32, BUF(unsigned int), BUF(const unsigned int), I64, I64, I64, I64, I64, I64, \
    I64, I64)                                                                             \
  X(gather_b16, BUF(DLRT_U16), BUF(const DLRT_U16), I64, I64, I64, I64, I64, I64, I64,    \
    I64)                                                                                  \
  DLRT__TYPED_TABLE(X)                                                                    \
  /* nn.h: z, labels, loss, dz, rows, classes, smoothing, grad_scale */                   \
  X(softmax_xent, BUF(const float), BUF(const int), BUF(float), BUF(float), I64, I64,     \
    F32, F32)                                                                             \
  /* the same for 16-bit logits (their dz too): softmax_xent_f16, softmax_xent_bf16 */     \
  X(softmax_xent_f16, BUF(const DLRT_U16), BUF(const int), BUF(float), BUF(DLRT_U16), I64, \
    I64, F32, F32)                                                                        \
  X(softmax_xent_bf16, BUF(const DLRT_U16), BUF(const int), BUF(float), BUF(DLRT_U16),    \
    I64, I64, F32, F32)                                                                   \
  /* optim.h: p, v, grad, count, lr, momentum, weight_decay, grad_scale, nesterov,        \
   * first */                                                                             \
  X(sgd_update, BUF(float), BUF(float), BUF(const float), I64, F32, F32, F32, F32, I64,   \
    I64)                                                                                  \
  /* p, m, v, grad, count, lr, beta1, beta2, eps, weight_decay, step_size, bias2,         \
   * grad_scale, decoupled */                                                             \
  X(adam_update, BUF(float), BUF(float), BUF(float), BUF(const float), I64, F32, F32,     \
    F32, F32, F32, F32, F32, F32, I64)                                                    \
  /* nn.h */                                                                              \
  X(broadcast_scalar, BUF(float), BUF(const float), F32, I64)                             \
  X(sub, BUF(float), BUF(const float), BUF(const float), I64)                             \
  X(div, BUF(float), BUF(const float), BUF(const float), I64)                             \
  X(div_grad_z, BUF(float), BUF(const float), BUF(const float), BUF(const float), I64)    \
  DLRT__TYPED(X, activation) DLRT__TYPED(X, activation_grad)                              \
  X(softmax, BUF(float), BUF(const float), I64, I64)                                      \
  X(softmax_grad, BUF(float), BUF(const float), BUF(const float), I64, I64)               \
  /* conv.h: y, x, planes, h, w, k, stride, oh, ow */                                     \
  X(avgpool, BUF(float), BUF(const float), I64, I64, I64, I64, I64, I64, I64)             \
  X(avgpool_grad, BUF(float), BUF(const float), I64, I64, I64, I64, I64, I64, I64)        \
  /* nn.h: y, x, count, seed, threshold, scale */                                         \
  DLRT__TYPED(X, dropout)                                                                 \
  /* norm.h */                                                                            \
  DLRT__NORM_TYPED(X, norm_rows) DLRT__NORM_TYPED(X, norm_rows_grad)                      \
  DLRT__NORM_TYPED(X, norm_affine_grad)                                                   \
  X(norm_rows_eval, BUF(float), BUF(const float), BUF(const float), BUF(const float),     \
    BUF(const float), BUF(const float), I64, I64, F32)                                    \
  X(bn_running, BUF(float), BUF(float), BUF(const float), BUF(const float), I64, I64,     \
    F32, F32)                                                                             \
  /* shape.h: y, x, outer, inner, y_axis, x_axis, y_start, x_start, count */              \
  X(axis_copy, BUF(float), BUF(const float), I64, I64, I64, I64, I64, I64, I64)           \
  X(axis_sum, BUF(float), BUF(const float), I64, I64, I64, F32)                           \
  X(axis_expand, BUF(float), BUF(const float), I64, I64, I64, F32)                        \
  DLRT__TYPED(X, bcast) DLRT__TYPED(X, bcast_grad_b)                                      \
  X(embedding, BUF(float), BUF(const int), BUF(const float), I64, I64, I64)               \
  X(embedding_grad, BUF(float), BUF(const float), BUF(const int), I64, I64, I64)        \
  X(embedding_grad_acc, BUF(float), BUF(const float), BUF(const float), BUF(const int),  \
    I64, I64, I64)                                                                        \
  /* attention.h */                                                                       \
  DLRT__TYPED(X, attention) DLRT__TYPED(X, attention_grad_q) DLRT__TYPED(X, attention_grad_kv) \
  /* o, kc, vc, qkv, pos, batch, capacity, heads, head_dim, rows, scale */                \
  X(attention_decode, BUF(float), BUF(float), BUF(float), BUF(const float),              \
    BUF(const int), I64, I64, I64, I64, I64, F32)                                         \
  /* nn.h, the vocabulary-parallel cross-entropy: z, labels, stats, rows, classes, first; \
   * dz, z, labels, lse, rows, classes, first, vocab, smoothing, grad_scale */            \
  X(xent_shard_stats, BUF(const float), BUF(const int), BUF(float), I64, I64, I64)        \
  X(xent_shard_grad, BUF(float), BUF(const float), BUF(const int), BUF(const float), I64, \
    I64, I64, I64, F32, F32)

/* typed.h: the kernels, then each one's arguments for element type T. */
#define DLRT__TYPED_TABLE(X)                                                              \
  DLRT__TYPED(X, bias_rows) DLRT__TYPED(X, bias_channels) DLRT__TYPED(X, relu_grad)       \
  DLRT__TYPED(X, sum_cols) DLRT__TYPED(X, sum_channels) DLRT__TYPED(X, im2col)            \
  DLRT__TYPED(X, col2im) DLRT__TYPED(X, swap01) DLRT__TYPED(X, maxpool)                   \
  DLRT__TYPED(X, maxpool_grad) DLRT__TYPED(X, maxpool_scatter) DLRT__TYPED(X, sum_planes) \
  DLRT__TYPED(X, sum_parts)

#define DLRT__ARGS_bias_rows(T) BUF(T), BUF(const T), BUF(const T), I64, I64
#define DLRT__ARGS_bias_channels(T) BUF(T), BUF(const T), BUF(const T), I64, I64, I64
#define DLRT__ARGS_relu_grad(T) BUF(T), BUF(const T), BUF(const T), I64
/* s, x, rows, cols, beta */
#define DLRT__ARGS_sum_cols(T) BUF(T), BUF(const T), I64, I64, F32
#define DLRT__ARGS_sum_channels(T) BUF(T), BUF(const T), I64, I64, I64
/* cols, x (dx, cols), n, c, h, w, kh, kw, stride, pad, dil, oh, ow, cn, b0, nb */
#define DLRT__ARGS_im2col(T)                                                              \
  BUF(T), BUF(const T), I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64, I64
#define DLRT__ARGS_col2im(T) DLRT__ARGS_im2col(T)
#define DLRT__ARGS_swap01(T) BUF(T), BUF(const T), I64, I64, I64
/* y, argmax, x, planes, h, w, k, stride, oh, ow, pn, pN, pb0 */
#define DLRT__ARGS_maxpool(T)                                                             \
  BUF(T), BUF(unsigned char), BUF(const T), I64, I64, I64, I64, I64, I64, I64, I64, I64, I64
/* dx, dy, argmax, y, planes, h, w, k, stride, oh, ow, masked, pn, pN, pb0 */
#define DLRT__ARGS_maxpool_grad(T)                                                        \
  BUF(T), BUF(const T), BUF(const unsigned char), BUF(const T), I64, I64, I64, I64, I64,  \
      I64, I64, I64, I64, I64, I64
#define DLRT__ARGS_maxpool_scatter(T) DLRT__ARGS_maxpool_grad(T)
/* parts, x, rows, spatial */
#define DLRT__ARGS_sum_planes(T) BUF(float), BUF(const T), I64, I64
/* s, parts, channels, n, accumulate */
#define DLRT__ARGS_sum_parts(T) BUF(T), BUF(const float), I64, I64, I64

/* nn.h: y, x, count, kind; dx, dy, t (x or y), count, kind */
#define DLRT__ARGS_activation(T) BUF(T), BUF(const T), I64, I64
#define DLRT__ARGS_activation_grad(T) BUF(T), BUF(const T), BUF(const T), I64, I64
/* nn.h: y, x, count, seed, threshold, scale */
#define DLRT__ARGS_dropout(T) BUF(T), BUF(const T), I64, I64, I64, F32
/* shape.h: y, a, b, count, m, op; t, dy, a, b, count, m, op */
#define DLRT__ARGS_bcast(T) BUF(T), BUF(const T), BUF(const T), I64, I64, I64
#define DLRT__ARGS_bcast_grad_b(T) BUF(T), BUF(const T), BUF(const T), BUF(const T), I64, I64, I64

/* A norm.h rows kernel for x (and dx) of type TX and y (and dy) of type TY:
 * name_f32, name_f16, name_bf16 (TX = TY), then name_f16_f32 and name_bf16_f32
 * (TX = float). The id for storage types (x, y) is DLRT__K_<name>_f32 + y when
 * x = y, + 2 + y when x is f32 (lib/exec/exec_ops.c: norm_kernel). */
#define DLRT__NORM_TYPED(X, name)                                                         \
  DLRT__TYPED_1(X, name##_f32, DLRT__ARGS_##name(float, float))                           \
  DLRT__TYPED_1(X, name##_f16, DLRT__ARGS_##name(DLRT_U16, DLRT_U16))                     \
  DLRT__TYPED_1(X, name##_bf16, DLRT__ARGS_##name(DLRT_U16, DLRT_U16))                    \
  DLRT__TYPED_1(X, name##_f16_f32, DLRT__ARGS_##name(float, DLRT_U16))                    \
  DLRT__TYPED_1(X, name##_bf16_f32, DLRT__ARGS_##name(float, DLRT_U16))
/* y, mean, rstd, x, gamma, beta, rows, cols, eps, per_row */
#define DLRT__ARGS_norm_rows(TX, TY)                                                      \
  BUF(TY), BUF(float), BUF(float), BUF(const TX), BUF(const float), BUF(const float), I64, \
      I64, F32, I64
/* dx, dy, x, mean, rstd, gamma, rows, cols, per_row */
#define DLRT__ARGS_norm_rows_grad(TX, TY)                                                 \
  BUF(TX), BUF(const TY), BUF(const TX), BUF(const float), BUF(const float),              \
      BUF(const float), I64, I64, I64
/* dgamma, dbeta, dy, x, mean, rstd, rows, cols, per_row */
#define DLRT__ARGS_norm_affine_grad(TX, TY)                                               \
  BUF(float), BUF(float), BUF(const TY), BUF(const TX), BUF(const float),                 \
      BUF(const float), I64, I64, I64

/* attention.h: o, lse, qkv; dqkv, dsum, dout, qkv, o, lse; dqkv, dout, qkv, lse, dsum;
 * then batch, seq, heads, head_dim, rows, causal, scale, and dropout's seed,
 * threshold (0: none) and keep_scale. */
#define DLRT__ATTN_SIZES I64, I64, I64, I64, I64, I64, F32, I64, I64, F32
#define DLRT__ARGS_attention(T) BUF(T), BUF(float), BUF(const T), DLRT__ATTN_SIZES
#define DLRT__ARGS_attention_grad_q(T)                                                    \
  BUF(T), BUF(float), BUF(const T), BUF(const T), BUF(const T), BUF(const float),         \
      DLRT__ATTN_SIZES
#define DLRT__ARGS_attention_grad_kv(T)                                                   \
  BUF(T), BUF(const T), BUF(const T), BUF(const float), BUF(const float), DLRT__ATTN_SIZES
/* attention.h's tiles in local memory hold DLRT__ATTN_TILE floats each: rows x
 * head_dim (queries, keys, values, their gradients) or rows x rows (scores), with
 * rows = DLRT__ATTN_ROWS(head_dim) (32 up to head_dim 32, then DLRT__ATTN_TILE /
 * head_dim), which a launch passes; head_dim is at most DLRT__ATTN_TILE. */
#define DLRT__ATTN_TILE 1024
#define DLRT__ATTN_ROWS(d) ((d) <= DLRT__ATTN_TILE / 32 ? 32 : DLRT__ATTN_TILE / (d))

/* ---------------------------------------------------------------- ids */

typedef enum {
#define DLRT__KERNEL_ID(name, ...) DLRT__K_##name,
  DLRT_KERNEL_TABLE(DLRT__KERNEL_ID)
#undef DLRT__KERNEL_ID
  DLRT__K_COUNT
} dlrt__kernel_id;

/* ---------------------------------------------------------------- arguments */

/* How a launch passes one argument, in the order of the kernel's signature. */
typedef enum { DLRT__ARG_BUFFER, DLRT__ARG_F32, DLRT__ARG_I64 } dlrt__arg_kind;

/* The most arguments a kernel takes (DLRT__KMAP below goes this far). */
#define DLRT__MAX_ARGS 16

/* Each argument token as (kind, C type of the parameter): the type is
 * DLRT_INDEX's and DLRT_U16's of the dialect where it is used. */
#define DLRT__KARG_BUF(T) BUFFER, T *
#define DLRT__KARG_F32 F32, float
#define DLRT__KARG_I64 I64, DLRT_INDEX

/* M(i, kind, type) for argument a at index i: kind is BUFFER, F32 or I64. */
#define DLRT__KARG(M, i, a) DLRT__KARG_1(M, i, DLRT__KARG_##a)
#define DLRT__KARG_1(M, i, kind_type) DLRT__KARG_2(M, i, kind_type)
#define DLRT__KARG_2(M, i, kind, type) M(i, kind, type)

/* The number of arguments (1 to 16). */
#define DLRT__KNARGS(...)                                                                 \
  DLRT__KNARGS_1(__VA_ARGS__, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define DLRT__KNARGS_1(a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15,  \
                       a16, n, ...)                                                       \
  n

/* M(i, a) for each argument a at index i, separated by commas. */
#define DLRT__KMAP(M, ...) DLRT__KMAP_N(DLRT__KNARGS(__VA_ARGS__), M, __VA_ARGS__)
#define DLRT__KMAP_N(n, M, ...) DLRT__KMAP_N1(n, M, __VA_ARGS__)
#define DLRT__KMAP_N1(n, M, ...) DLRT__KMAP_##n(M, __VA_ARGS__)
#define DLRT__KMAP_1(M, a) M(0, a)
#define DLRT__KMAP_2(M, a, b) DLRT__KMAP_1(M, a), M(1, b)
#define DLRT__KMAP_3(M, a, b, c) DLRT__KMAP_2(M, a, b), M(2, c)
#define DLRT__KMAP_4(M, a, b, c, d) DLRT__KMAP_3(M, a, b, c), M(3, d)
#define DLRT__KMAP_5(M, a, b, c, d, e) DLRT__KMAP_4(M, a, b, c, d), M(4, e)
#define DLRT__KMAP_6(M, a, b, c, d, e, f) DLRT__KMAP_5(M, a, b, c, d, e), M(5, f)
#define DLRT__KMAP_7(M, a, b, c, d, e, f, g) DLRT__KMAP_6(M, a, b, c, d, e, f), M(6, g)
#define DLRT__KMAP_8(M, a, b, c, d, e, f, g, h) DLRT__KMAP_7(M, a, b, c, d, e, f, g), M(7, h)
#define DLRT__KMAP_9(M, a, b, c, d, e, f, g, h, i)                                        \
  DLRT__KMAP_8(M, a, b, c, d, e, f, g, h), M(8, i)
#define DLRT__KMAP_10(M, a, b, c, d, e, f, g, h, i, j)                                    \
  DLRT__KMAP_9(M, a, b, c, d, e, f, g, h, i), M(9, j)
#define DLRT__KMAP_11(M, a, b, c, d, e, f, g, h, i, j, k)                                 \
  DLRT__KMAP_10(M, a, b, c, d, e, f, g, h, i, j), M(10, k)
#define DLRT__KMAP_12(M, a, b, c, d, e, f, g, h, i, j, k, l)                              \
  DLRT__KMAP_11(M, a, b, c, d, e, f, g, h, i, j, k), M(11, l)
#define DLRT__KMAP_13(M, a, b, c, d, e, f, g, h, i, j, k, l, m)                           \
  DLRT__KMAP_12(M, a, b, c, d, e, f, g, h, i, j, k, l), M(12, m)
#define DLRT__KMAP_14(M, a, b, c, d, e, f, g, h, i, j, k, l, m, n)                        \
  DLRT__KMAP_13(M, a, b, c, d, e, f, g, h, i, j, k, l, m), M(13, n)
#define DLRT__KMAP_15(M, a, b, c, d, e, f, g, h, i, j, k, l, m, n, o)                     \
  DLRT__KMAP_14(M, a, b, c, d, e, f, g, h, i, j, k, l, m, n), M(14, o)
#define DLRT__KMAP_16(M, a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p)                  \
  DLRT__KMAP_15(M, a, b, c, d, e, f, g, h, i, j, k, l, m, n, o), M(15, p)

/* The kinds of an entry's arguments, and their C types (a parameter list). */
#define DLRT__KIND_OF(i, kind, type) DLRT__ARG_##kind
#define DLRT__KIND_AT(i, a) DLRT__KARG(DLRT__KIND_OF, i, a)
#define DLRT__TYPE_OF(i, kind, type) type
#define DLRT__TYPE_AT(i, a) DLRT__KARG(DLRT__TYPE_OF, i, a)
#define DLRT__KERNEL_PARAMS(...) DLRT__KMAP(DLRT__TYPE_AT, __VA_ARGS__)

/* ---------------------------------------------------------------- the table */

typedef struct {
  const char *name;      /* "dlrt_k_<name>": the OpenCL kernel's name too */
  unsigned char n_args;
  unsigned char kinds[DLRT__MAX_ARGS]; /* dlrt__arg_kind of each argument */
} dlrt__kernel_info;

#ifdef __cplusplus
extern "C" {
#endif
/* Indexed by dlrt__kernel_id (kernel_table.c). */
extern const dlrt__kernel_info dlrt__kernel_table[DLRT__K_COUNT];
#ifdef __cplusplus
}
#endif

#endif
