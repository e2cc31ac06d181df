/* host_optim.c — the optimizer's update over host memory
 * (dlrt_host_optimizer_update): the offloaded optimizer of lib/exec's
 * spilling runs it, and so may anyone with parameters on the host. The
 * kernels are kernels/optim.h's, run by the cpu backend (its native,
 * vectorized versions where it has them) on its threads. */
#include "config.h"

#include <math.h>

#include "device/launch.h"
#include "dlrt.h"
#include "kernel_table.h"
#include "util/status.h"

int dlrt_host_optimizer_update(const dlrt_optimizer *opt, int64_t step, float *param,
                               float *state0, float *state1, const float *grad, int64_t count,
                               int decay, float grad_scale) {
  DLRT__CHECK_ARG(opt && param && state0 && grad && count >= 0 && step >= 0,
                  "dlrt_host_optimizer_update: optimizer, parameter, state or gradient is "
                  "NULL, or count %lld / step %lld is negative", (long long)count,
                  (long long)step);
  DLRT__CHECK_ARG(opt->kind == DLRT_OPT_SGD || state1, "dlrt_host_optimizer_update: %s needs "
                  "its second moment (state1)", dlrt_optimizer_name(opt->kind));
  DLRT__CHECK_ARG(isfinite(opt->lr) && opt->lr >= 0 && isfinite(grad_scale),
                  "dlrt_host_optimizer_update: lr %g or grad_scale %g is not a finite number "
                  "(lr >= 0)", (double)opt->lr, (double)grad_scale);
  float weight_decay = decay ? opt->weight_decay : 0.0f;
  dlrt__launcher lb;
  if (opt->kind == DLRT_OPT_SGD) {
    dlrt__host_launch_start(&lb, DLRT__K_sgd_update, count, "dlrt_host_optimizer_update(sgd)");
    dlrt__host_launch_ptr(&lb, param, sizeof(float));
    dlrt__host_launch_ptr(&lb, state0, sizeof(float));
    dlrt__host_launch_ptr(&lb, grad, sizeof(float));
    dlrt__launch_i64(&lb, count), dlrt__launch_f32(&lb, opt->lr);
    dlrt__launch_f32(&lb, opt->momentum), dlrt__launch_f32(&lb, weight_decay);
    dlrt__launch_f32(&lb, grad_scale), dlrt__launch_i64(&lb, opt->nesterov);
    dlrt__launch_i64(&lb, step == 0);
    return dlrt__host_launch(&lb);
  }
  /* Adam's bias corrections for update step + 1, as the device update's. */
  double t = (double)(step + 1);
  float step_size = (float)(opt->lr / (1.0 - pow(opt->beta1, t)));
  float bias2 = (float)sqrt(1.0 - pow(opt->beta2, t));
  dlrt__host_launch_start(&lb, DLRT__K_adam_update, count, "dlrt_host_optimizer_update(adam)");
  dlrt__host_launch_ptr(&lb, param, sizeof(float));
  dlrt__host_launch_ptr(&lb, state0, sizeof(float));
  dlrt__host_launch_ptr(&lb, state1, sizeof(float));
  dlrt__host_launch_ptr(&lb, grad, sizeof(float));
  dlrt__launch_i64(&lb, count), dlrt__launch_f32(&lb, opt->lr);
  dlrt__launch_f32(&lb, opt->beta1), dlrt__launch_f32(&lb, opt->beta2);
  dlrt__launch_f32(&lb, opt->eps), dlrt__launch_f32(&lb, weight_decay);
  dlrt__launch_f32(&lb, step_size), dlrt__launch_f32(&lb, bias2);
  dlrt__launch_f32(&lb, grad_scale), dlrt__launch_i64(&lb, opt->kind == DLRT_OPT_ADAMW);
  return dlrt__host_launch(&lb);
}

/* ---------------------------------------------------------------- gradients on the host */

/* The kernels the executor runs on a gradient's device copy, over its host
 * copy (param_stream.c): the same kernels and the same order of additions,
 * so the same bits as on any device. */

int dlrt__host_cast_f32(void *y, dlrt_dtype y_dtype, const float *x, int64_t n) {
  int kernel = y_dtype == DLRT_F16 ? DLRT__K_cast_f16_f32 : DLRT__K_cast_bf16_f32;
  dlrt__launcher lb;
  dlrt__host_launch_start(&lb, kernel, n, "dlrt__host_cast_f32");
  dlrt__host_launch_ptr(&lb, y, 2);
  dlrt__host_launch_ptr(&lb, x, sizeof(float));
  dlrt__launch_i64(&lb, n);
  return dlrt__host_launch(&lb);
}

int dlrt__host_add(float *y, const float *x, const float *z, int64_t n) {
  dlrt__launcher lb;
  dlrt__host_launch_start(&lb, DLRT__K_add_f32, n, "dlrt__host_add");
  dlrt__host_launch_ptr(&lb, y, sizeof(float));
  dlrt__host_launch_ptr(&lb, x, sizeof(float));
  dlrt__host_launch_ptr(&lb, z, sizeof(float));
  dlrt__launch_i64(&lb, n);
  return dlrt__host_launch(&lb);
}

/* dlrt_reduce(SUM, f32, 1 row of n) into *y: its two passes, the partials
 * on the stack (at most 1024 segments). */
int dlrt__host_sum(float *y, const float *x, int64_t n) {
  float partial[1024];
  int64_t segs = n ? dlrt__reduce_segments(1, n) : 1;
  dlrt__launcher lb;
  dlrt__host_launch_start(&lb, DLRT__K_reduce_sum_f32, 0, "dlrt__host_sum");
  lb.launch.groups = segs;
  dlrt__host_launch_ptr(&lb, x, sizeof(float));
  dlrt__launch_i64(&lb, 1), dlrt__launch_i64(&lb, n), dlrt__launch_i64(&lb, segs);
  dlrt__host_launch_ptr(&lb, partial, sizeof(float));
  int rc = dlrt__host_launch(&lb);
  if (rc < 0) return rc;
  dlrt__host_launch_start(&lb, DLRT__K_reduce_final_sum_f32, 1, "dlrt__host_sum");
  dlrt__host_launch_ptr(&lb, partial, sizeof(float));
  dlrt__launch_i64(&lb, 1), dlrt__launch_i64(&lb, segs);
  dlrt__host_launch_ptr(&lb, y, sizeof(float));
  return dlrt__host_launch(&lb);
}

/* The squares of x (n floats) into y: dlrt_elementwise(MUL, y, x, x). */
int dlrt__host_square(float *y, const float *x, int64_t n) {
  dlrt__launcher lb;
  dlrt__host_launch_start(&lb, DLRT__K_mul_f32, n, "dlrt__host_square");
  dlrt__host_launch_ptr(&lb, y, sizeof(float));
  dlrt__host_launch_ptr(&lb, x, sizeof(float));
  dlrt__host_launch_ptr(&lb, x, sizeof(float));
  dlrt__launch_i64(&lb, n);
  return dlrt__host_launch(&lb);
}
