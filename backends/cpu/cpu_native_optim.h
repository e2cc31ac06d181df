/* cpu_native_optim.h — Adam and AdamW's update for a CPU (the native version
 * of kernels/optim.h's adam_update, which defines it). A template: each
 * instruction set's file includes it after its target pragma
 * (cpu_native_isa.h).
 *
 * The spilling executor runs the dialect's kernel on the host for the
 * parameters it keeps there (lib/exec/exec_spill.c), and a spilled run must
 * equal an unspilled one bit for bit: so this computes the same operations
 * in the same order, with nothing contracted into an FMA. Every operation
 * is IEEE's correctly rounded one (vector sqrt and division too), so the
 * bits are the dialect's on every instruction set. What the dialect's loop
 * lacks is only `restrict` (the four arrays never overlap): with it the
 * compiler vectorizes the loop. */

#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")

typedef struct {
  float *p, *m, *v;
  const float *grad;
  int64_t count, decoupled;
  float lr, beta1, beta2, eps, weight_decay, step_size, bias2, grad_scale;
} adam_job;

/* Elements per task. */
#define ADAM_BLOCK 16384

static void adam_part(void *ctx, int64_t lo, int64_t hi, int part) {
  const adam_job *j = ctx;
  (void)part;
  int64_t start = lo * ADAM_BLOCK, end = hi * ADAM_BLOCK < j->count ? hi * ADAM_BLOCK : j->count;
  float *restrict p = j->p, *restrict m = j->m, *restrict v = j->v;
  const float *restrict grad = j->grad;
  const float lr = j->lr, beta1 = j->beta1, beta2 = j->beta2, eps = j->eps;
  const float weight_decay = j->weight_decay, step_size = j->step_size, bias2 = j->bias2;
  const float grad_scale = j->grad_scale;
  const int decoupled = j->decoupled != 0;
  for (int64_t i = start; i < end; i++) {
    float g0 = grad[i] * grad_scale, p0 = p[i];
    float w = decoupled ? p0 - lr * weight_decay * p0 : p0;
    float g = decoupled ? g0 : g0 + weight_decay * p0;
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vnew = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vnew;
    p[i] = w - step_size * mi / (sqrtf(vnew) / bias2 + eps);
  }
}

/* Arguments: p, m, v, grad, count, lr, beta1, beta2, eps, weight_decay,
 * step_size, bias2, grad_scale, decoupled. */
static int native_adam_update(const dlrt__arg *a) {
  adam_job j = {.p = NA_BUF(0, float), .m = NA_BUF(1, float), .v = NA_BUF(2, float),
                .grad = NA_BUF(3, float), .count = a[4].i, .lr = a[5].f, .beta1 = a[6].f,
                .beta2 = a[7].f, .eps = a[8].f, .weight_decay = a[9].f, .step_size = a[10].f,
                .bias2 = a[11].f, .grad_scale = a[12].f, .decoupled = a[13].i};
  int64_t tasks = (j.count + ADAM_BLOCK - 1) / ADAM_BLOCK;
  cpu_native_parallel(tasks, cpu_native_parts(tasks, 4 * ADAM_BLOCK), adam_part, &j);
  return DLRT_OK;
}

#pragma GCC pop_options
