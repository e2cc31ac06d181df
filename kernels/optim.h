/* optim.h — the fused optimizer updates: SGD (momentum, Nesterov, weight decay),
 * Adam and AdamW, as torch.optim defines them
 * (portable dialect, fp32; every output element written by one work-item,
 * so results are deterministic on every device). */
#include "dialect.h"

/* SGD with momentum, Nesterov and L2 weight decay, as torch.optim.SGD:
 *   g = grad + wd * p; v = momentum * v + g (v = g on the first step);
 *   p -= lr * (nesterov ? g + momentum * v : v). */
DLRT_KERNEL(dlrt_k_sgd_update)(DLRT_RANGE DLRT_PTR(float, p), DLRT_PTR(float, v),
                               DLRT_CPTR(float, grad), DLRT_INDEX count, float lr,
                               float momentum, float weight_decay, float grad_scale,
                               DLRT_INDEX nesterov, DLRT_INDEX first) {
  DLRT_BIND(float, p);
  DLRT_BIND(float, v);
  DLRT_CBIND(float, grad);
  DLRT_FOR_EACH(i, count) {
    float g = grad[i] * grad_scale + weight_decay * p[i];
    float vi = first ? g : momentum * v[i] + g;
    v[i] = vi;
    p[i] -= lr * (nesterov ? g + momentum * vi : vi);
  }
}

/* Adam (decoupled = 0, L2 decay added to the gradient) and AdamW
 * (decoupled = 1), as torch.optim: step_size = lr / (1 - beta1^t) and
 * bias2 = sqrt(1 - beta2^t) are computed on the host for step t. */
DLRT_KERNEL(dlrt_k_adam_update)(DLRT_RANGE DLRT_PTR(float, p), DLRT_PTR(float, m),
                                DLRT_PTR(float, v), DLRT_CPTR(float, grad), DLRT_INDEX count,
                                float lr, float beta1, float beta2, float eps,
                                float weight_decay, float step_size, float bias2,
                                float grad_scale, DLRT_INDEX decoupled) {
  DLRT_BIND(float, p);
  DLRT_BIND(float, m);
  DLRT_BIND(float, v);
  DLRT_CBIND(float, grad);
  DLRT_FOR_EACH(i, count) {
    float g0 = grad[i] * grad_scale, p0 = p[i];
    /* Selects, not branches: both sides are computed and the loop vectorizes
     * (the host-side update of spilling runs it on the CPU). */
    float w = decoupled ? p0 - lr * weight_decay * p0 : p0;
    float g = decoupled ? g0 : g0 + weight_decay * p0;
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    p[i] = w - step_size * mi / (DLRT_SQRT(vi) / bias2 + eps);
  }
}
