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
