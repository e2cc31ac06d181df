/* cpu_kernels.c — the kernels of kernels/ compiled as plain C, and their
 * launch on a CPU stream: item kernels split their index range, group kernels
 * their work-groups, over the backend's thread pool (cpu_pool.c). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"
#include "cpu_pool.h"
#include "elementwise.h"
#include "conv.h"
#include "nn.h"
#include "norm.h"
#include "optim.h"
#include "reduce.h"
#include "shape.h"
#include "transpose.h"
#include "typed.h"
#include "util/status.h"

typedef void (*cpu_kernel_fn)(const dlrt__arg *a, int64_t lo, int64_t hi);

/* Argument k of a launch as the kernel's parameter type. */
#define PTR(T, k) ((T *)(void *)((char *)a[k].mem.host + a[k].offset))
#define F32(k) (a[k].f)
#define I64(k) (a[k].i)

/* One wrapper per kernel, unpacking the launch's arguments in signature order. */
#define WRAPPERS_OF_TYPE(SUF, T)                                                       \
  static void w_fill_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {               \
    dlrt_k_fill_##SUF(lo, hi, PTR(T, 0), F32(1), I64(2));                              \
  }                                                                                    \
  static void w_scale_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {              \
    dlrt_k_scale_##SUF(lo, hi, PTR(T, 0), PTR(const T, 1), F32(2), I64(3));            \
  }                                                                                    \
  static void w_axpy_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {               \
    dlrt_k_axpy_##SUF(lo, hi, PTR(T, 0), PTR(const T, 1), F32(2), I64(3));             \
  }                                                                                    \
  static void w_add_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {                \
    dlrt_k_add_##SUF(lo, hi, PTR(T, 0), PTR(const T, 1), PTR(const T, 2), I64(3));     \
  }                                                                                    \
  static void w_mul_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {                \
    dlrt_k_mul_##SUF(lo, hi, PTR(T, 0), PTR(const T, 1), PTR(const T, 2), I64(3));     \
  }                                                                                    \
  static void w_relu_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {               \
    dlrt_k_relu_##SUF(lo, hi, PTR(T, 0), PTR(const T, 1), I64(2));                     \
  }                                                                                    \
  static void w_reduce_sum_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {         \
    dlrt_k_reduce_sum_##SUF(lo, hi, PTR(const T, 0), I64(1), I64(2), I64(3),           \
                            PTR(float, 4));                                            \
  }                                                                                    \
  static void w_reduce_max_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {         \
    dlrt_k_reduce_max_##SUF(lo, hi, PTR(const T, 0), I64(1), I64(2), I64(3),           \
                            PTR(float, 4));                                            \
  }                                                                                    \
  static void w_reduce_final_sum_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {   \
    dlrt_k_reduce_final_sum_##SUF(lo, hi, PTR(const float, 0), I64(1), I64(2),        \
                                  PTR(T, 3));                                          \
  }                                                                                    \
  static void w_reduce_final_max_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {   \
    dlrt_k_reduce_final_max_##SUF(lo, hi, PTR(const float, 0), I64(1), I64(2),         \
                                  PTR(T, 3));                                          \
  }                                                                                    \
  static void w_cast_f32_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {           \
    dlrt_k_cast_f32_##SUF(lo, hi, PTR(float, 0), PTR(const T, 1), I64(2));             \
  }                                                                                    \
  static void w_cast_f16_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {           \
    dlrt_k_cast_f16_##SUF(lo, hi, PTR(DLRT_U16, 0), PTR(const T, 1), I64(2));          \
  }                                                                                    \
  static void w_cast_bf16_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {          \
    dlrt_k_cast_bf16_##SUF(lo, hi, PTR(DLRT_U16, 0), PTR(const T, 1), I64(2));         \
  }

WRAPPERS_OF_TYPE(f32, float)
WRAPPERS_OF_TYPE(f16, DLRT_U16)
WRAPPERS_OF_TYPE(bf16, DLRT_U16)

#define TRANSPOSE_WRAPPER(SUF, T)                                                      \
  static void w_transpose_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {          \
    dlrt_k_transpose_##SUF(lo, hi, PTR(T, 0), PTR(const T, 1), I64(2), I64(3), I64(4)); \
  }
TRANSPOSE_WRAPPER(b32, unsigned int)
TRANSPOSE_WRAPPER(b16, DLRT_U16)

#define GATHER_WRAPPER(SUF, T)                                                         \
  static void w_gather_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {             \
    dlrt_k_gather_##SUF(lo, hi, PTR(T, 0), PTR(const T, 1), I64(2), I64(3), I64(4), I64(5), \
                        I64(6), I64(7), I64(8), I64(9));                               \
  }
GATHER_WRAPPER(b32, unsigned int)
GATHER_WRAPPER(b16, DLRT_U16)

/* kernels/typed.h */
#define TYPED_WRAPPERS(SUF, T)                                                         \
  static void w_bias_rows_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {          \
    dlrt_k_bias_rows_##SUF(lo, hi, PTR(T, 0), PTR(const T, 1), PTR(const T, 2), I64(3), \
                           I64(4));                                                    \
  }                                                                                    \
  static void w_bias_channels_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {      \
    dlrt_k_bias_channels_##SUF(lo, hi, PTR(T, 0), PTR(const T, 1), PTR(const T, 2),    \
                               I64(3), I64(4), I64(5));                                \
  }                                                                                    \
  static void w_relu_grad_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {          \
    dlrt_k_relu_grad_##SUF(lo, hi, PTR(T, 0), PTR(const T, 1), PTR(const T, 2), I64(3)); \
  }                                                                                    \
  static void w_sum_cols_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {           \
    dlrt_k_sum_cols_##SUF(lo, hi, PTR(T, 0), PTR(const T, 1), I64(2), I64(3), F32(4)); \
  }                                                                                    \
  static void w_sum_channels_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {       \
    dlrt_k_sum_channels_##SUF(lo, hi, PTR(T, 0), PTR(const T, 1), I64(2), I64(3), I64(4)); \
  }                                                                                    \
  static void w_sum_planes_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {         \
    dlrt_k_sum_planes_##SUF(lo, hi, PTR(float, 0), PTR(const T, 1), I64(2), I64(3));   \
  }                                                                                    \
  static void w_sum_parts_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {          \
    dlrt_k_sum_parts_##SUF(lo, hi, PTR(T, 0), PTR(const float, 1), I64(2), I64(3), I64(4)); \
  }                                                                                    \
  static void w_im2col_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {             \
    dlrt_k_im2col_##SUF(lo, hi, PTR(T, 0), PTR(const T, 1), I64(2), I64(3), I64(4),    \
                        I64(5), I64(6), I64(7), I64(8), I64(9), I64(10), I64(11),      \
                        I64(12), I64(13), I64(14), I64(15));                           \
  }                                                                                    \
  static void w_col2im_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {             \
    dlrt_k_col2im_##SUF(lo, hi, PTR(T, 0), PTR(const T, 1), I64(2), I64(3), I64(4),    \
                        I64(5), I64(6), I64(7), I64(8), I64(9), I64(10), I64(11),      \
                        I64(12), I64(13), I64(14), I64(15));                           \
  }                                                                                    \
  static void w_swap01_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {             \
    dlrt_k_swap01_##SUF(lo, hi, PTR(T, 0), PTR(const T, 1), I64(2), I64(3), I64(4));   \
  }                                                                                    \
  static void w_maxpool_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {            \
    dlrt_k_maxpool_##SUF(lo, hi, PTR(T, 0), PTR(unsigned char, 1), PTR(const T, 2), I64(3), \
                         I64(4), I64(5), I64(6), I64(7), I64(8), I64(9), I64(10), I64(11), \
                         I64(12));                                                     \
  }                                                                                    \
  static void w_maxpool_grad_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {       \
    dlrt_k_maxpool_grad_##SUF(lo, hi, PTR(T, 0), PTR(const T, 1), PTR(const unsigned char, 2), \
                              PTR(const T, 3), I64(4), I64(5), I64(6), I64(7), I64(8),  \
                              I64(9), I64(10), I64(11), I64(12), I64(13), I64(14));    \
  }                                                                                    \
  static void w_maxpool_scatter_##SUF(const dlrt__arg *a, int64_t lo, int64_t hi) {    \
    dlrt_k_maxpool_scatter_##SUF(lo, hi, PTR(T, 0), PTR(const T, 1),                   \
                                 PTR(const unsigned char, 2), PTR(const T, 3), I64(4), \
                                 I64(5), I64(6), I64(7), I64(8), I64(9), I64(10),      \
                                 I64(11), I64(12), I64(13), I64(14));                  \
  }
TYPED_WRAPPERS(f32, float)
TYPED_WRAPPERS(f16, DLRT_U16)
TYPED_WRAPPERS(bf16, DLRT_U16)

/* kernels/nn.h */
static void w_softmax_xent(const dlrt__arg *a, int64_t lo, int64_t hi) {
  dlrt_k_softmax_xent(lo, hi, PTR(const float, 0), PTR(const int, 1), PTR(float, 2),
                      PTR(float, 3), I64(4), I64(5), F32(6), F32(7));
}
static void w_sgd_update(const dlrt__arg *a, int64_t lo, int64_t hi) {
  dlrt_k_sgd_update(lo, hi, PTR(float, 0), PTR(float, 1), PTR(const float, 2), I64(3), F32(4),
                    F32(5), F32(6), F32(7), I64(8), I64(9));
}
static void w_adam_update(const dlrt__arg *a, int64_t lo, int64_t hi) {
  dlrt_k_adam_update(lo, hi, PTR(float, 0), PTR(float, 1), PTR(float, 2), PTR(const float, 3),
                     I64(4), F32(5), F32(6), F32(7), F32(8), F32(9), F32(10), F32(11), F32(12),
                     I64(13));
}

static void w_broadcast_scalar(const dlrt__arg *a, int64_t lo, int64_t hi) {
  dlrt_k_broadcast_scalar(lo, hi, PTR(float, 0), PTR(const float, 1), F32(2), I64(3));
}



static void w_sub(const dlrt__arg *a, int64_t lo, int64_t hi) {
  dlrt_k_sub(lo, hi, PTR(float, 0), PTR(const float, 1), PTR(const float, 2), I64(3));
}
static void w_div(const dlrt__arg *a, int64_t lo, int64_t hi) {
  dlrt_k_div(lo, hi, PTR(float, 0), PTR(const float, 1), PTR(const float, 2), I64(3));
}
static void w_div_grad_z(const dlrt__arg *a, int64_t lo, int64_t hi) {
  dlrt_k_div_grad_z(lo, hi, PTR(float, 0), PTR(const float, 1), PTR(const float, 2),
                    PTR(const float, 3), I64(4));
}
static void w_activation(const dlrt__arg *a, int64_t lo, int64_t hi) {
  dlrt_k_activation(lo, hi, PTR(float, 0), PTR(const float, 1), I64(2), I64(3));
}
static void w_activation_grad(const dlrt__arg *a, int64_t lo, int64_t hi) {
  dlrt_k_activation_grad(lo, hi, PTR(float, 0), PTR(const float, 1), PTR(const float, 2),
                         I64(3), I64(4));
}
static void w_softmax(const dlrt__arg *a, int64_t lo, int64_t hi) {
  dlrt_k_softmax(lo, hi, PTR(float, 0), PTR(const float, 1), I64(2), I64(3));
}
static void w_softmax_grad(const dlrt__arg *a, int64_t lo, int64_t hi) {
  dlrt_k_softmax_grad(lo, hi, PTR(float, 0), PTR(const float, 1), PTR(const float, 2), I64(3),
                      I64(4));
}
static void w_avgpool(const dlrt__arg *a, int64_t lo, int64_t hi) {
  dlrt_k_avgpool(lo, hi, PTR(float, 0), PTR(const float, 1), I64(2), I64(3), I64(4), I64(5),
                 I64(6), I64(7), I64(8));
}
static void w_avgpool_grad(const dlrt__arg *a, int64_t lo, int64_t hi) {
  dlrt_k_avgpool_grad(lo, hi, PTR(float, 0), PTR(const float, 1), I64(2), I64(3), I64(4),
                      I64(5), I64(6), I64(7), I64(8));
}
static void w_dropout(const dlrt__arg *a, int64_t lo, int64_t hi) {
  dlrt_k_dropout(lo, hi, PTR(float, 0), PTR(const float, 1), I64(2), I64(3), I64(4), F32(5));
}

static void w_norm_rows(const dlrt__arg *a, int64_t lo, int64_t hi) {
  dlrt_k_norm_rows(lo, hi, PTR(float, 0), PTR(float, 1), PTR(float, 2), PTR(const float, 3),
                   PTR(const float, 4), PTR(const float, 5), I64(6), I64(7), F32(8), I64(9));
}
static void w_norm_rows_grad(const dlrt__arg *a, int64_t lo, int64_t hi) {
  dlrt_k_norm_rows_grad(lo, hi, PTR(float, 0), PTR(const float, 1), PTR(const float, 2),
                        PTR(const float, 3), PTR(const float, 4), PTR(const float, 5), I64(6),
                        I64(7), I64(8));
}
static void w_norm_affine_grad(const dlrt__arg *a, int64_t lo, int64_t hi) {
  dlrt_k_norm_affine_grad(lo, hi, PTR(float, 0), PTR(float, 1), PTR(const float, 2),
                          PTR(const float, 3), PTR(const float, 4), PTR(const float, 5), I64(6),
                          I64(7), I64(8));
}
static void w_norm_rows_eval(const dlrt__arg *a, int64_t lo, int64_t hi) {
  dlrt_k_norm_rows_eval(lo, hi, PTR(float, 0), PTR(const float, 1), PTR(const float, 2),
                        PTR(const float, 3), PTR(const float, 4), PTR(const float, 5), I64(6),
                        I64(7), F32(8));
}
static void w_bn_running(const dlrt__arg *a, int64_t lo, int64_t hi) {
  dlrt_k_bn_running(lo, hi, PTR(float, 0), PTR(float, 1), PTR(const float, 2),
                    PTR(const float, 3), I64(4), I64(5), F32(6), F32(7));
}

static void w_axis_copy(const dlrt__arg *a, int64_t lo, int64_t hi) {
  dlrt_k_axis_copy(lo, hi, PTR(float, 0), PTR(const float, 1), I64(2), I64(3), I64(4), I64(5),
                   I64(6), I64(7), I64(8));
}
static void w_axis_sum(const dlrt__arg *a, int64_t lo, int64_t hi) {
  dlrt_k_axis_sum(lo, hi, PTR(float, 0), PTR(const float, 1), I64(2), I64(3), I64(4), F32(5));
}
static void w_axis_expand(const dlrt__arg *a, int64_t lo, int64_t hi) {
  dlrt_k_axis_expand(lo, hi, PTR(float, 0), PTR(const float, 1), I64(2), I64(3), I64(4),
                     F32(5));
}
static void w_bcast(const dlrt__arg *a, int64_t lo, int64_t hi) {
  dlrt_k_bcast(lo, hi, PTR(float, 0), PTR(const float, 1), PTR(const float, 2), I64(3), I64(4),
               I64(5));
}
static void w_bcast_grad_b(const dlrt__arg *a, int64_t lo, int64_t hi) {
  dlrt_k_bcast_grad_b(lo, hi, PTR(float, 0), PTR(const float, 1), PTR(const float, 2),
                      PTR(const float, 3), I64(4), I64(5), I64(6));
}
static void w_embedding(const dlrt__arg *a, int64_t lo, int64_t hi) {
  dlrt_k_embedding(lo, hi, PTR(float, 0), PTR(const int, 1), PTR(const float, 2), I64(3),
                   I64(4), I64(5));
}
static void w_embedding_grad(const dlrt__arg *a, int64_t lo, int64_t hi) {
  dlrt_k_embedding_grad(lo, hi, PTR(float, 0), PTR(const float, 1), PTR(const int, 2), I64(3),
                        I64(4), I64(5));
}

static const cpu_kernel_fn kernels[DLRT__K_COUNT] = {
#define ENTRY(name, ...) [DLRT__K_##name] = w_##name,
    DLRT_KERNEL_TABLE(ENTRY)
#undef ENTRY
};

/* Below this many indices one thread is faster than waking a team; slices of
 * this many keep each thread on whole cache lines and pages. */
#define ITEM_GRAIN 16384

void cpu_set_threads(int threads) { cpu_pool_set_threads(threads); }

typedef struct {
  cpu_kernel_fn fn;
  int64_t items, groups, item_cost;
  dlrt__arg args[DLRT__MAX_ARGS];
} kernel_command;

typedef struct {
  const kernel_command *c;
  int64_t grain, total;
} slice_job;

static void run_slice(void *ctx, int64_t s) {
  const slice_job *j = ctx;
  int64_t lo = s * j->grain, hi = lo + j->grain < j->total ? lo + j->grain : j->total;
  j->c->fn(j->c->args, lo, hi);
}

static int run_kernel(void *payload) {
  const kernel_command *c = payload;
  int64_t total = c->items ? c->items : c->groups;
  int64_t cost = c->item_cost > 1 ? c->item_cost : 1;
  int64_t grain = c->items ? (ITEM_GRAIN + cost - 1) / cost : 1;
  int64_t slices = (total + grain - 1) / grain;
  if (slices <= 1) {
    c->fn(c->args, 0, total);
    return DLRT_OK;
  }
  /* Each slice writes its own outputs, so results never depend on which
   * thread ran it. */
  slice_job job = {c, grain, total};
  cpu_pool_run(slices, run_slice, &job);
  return DLRT_OK;
}

int cpu_launch(void *stream, const dlrt__launch *l) {
  kernel_command c;
  if (l->kernel < 0 || l->kernel >= DLRT__K_COUNT || !kernels[l->kernel])
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "cpu: no kernel %d", l->kernel);
  c.fn = kernels[l->kernel];
  c.items = l->items;
  c.groups = l->groups;
  c.item_cost = l->item_cost;
  memcpy(c.args, l->args, sizeof c.args);
  return cpu_stream_enqueue(stream, run_kernel, &c, sizeof c);
}
