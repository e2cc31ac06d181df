/* leaves.c — the graph's leaves: inputs the caller writes, trained
 * parameters, state that runs keep (key / value caches), and the kept
 * tensors that survive a run. */
#include "config.h"

#include <math.h>

#include "graph/graph.h"
#include "util/status.h"

dlrt_tensor_t *dlrt_input(dlrt_graph_t *g, const char *name, dlrt_dtype dtype, int ndim,
                          const int64_t *shape) {
  if (!g || g->status) return NULL;
  /* 16-bit inputs feed a graph that computes in their type (its precision
   * set first): data enters in the compute type, with no fp32 copy. */
  if (dtype != DLRT_F32 && dtype != DLRT_I32 &&
      !((dtype == DLRT_F16 || dtype == DLRT_BF16) && dtype == g->precision))
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "input %s: dtype %s (use f32 or i32, or "
                            "the compute type after dlrt_graph_set_precision)",
                            name ? name : "", dlrt_dtype_name(dtype));
  if (!shape && ndim) return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "input: shape is NULL");
  dlrt_tensor_t *t = dlrt__tensor_new(g, name, dtype, ndim, shape, DLRT__TENSOR_INPUT);
  if (t) t->kept = 1;
  return t;
}

dlrt_tensor_t *dlrt_state(dlrt_graph_t *g, const char *name, dlrt_dtype dtype, int ndim,
                          const int64_t *shape) {
  if (!g || g->status) return NULL;
  /* fp32 only: the ops that write state (dlrt_attention_decode) store
   * fp32, whatever the graph's compute type. */
  if (dtype != DLRT_F32)
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "state %s: dtype %s (state is f32)",
                            name ? name : "", dlrt_dtype_name(dtype));
  if (!shape && ndim) return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "state: shape is NULL");
  dlrt_tensor_t *t = dlrt__tensor_new(g, name, dtype, ndim, shape, DLRT__TENSOR_CACHE);
  if (!t) return NULL;
  t->init = DLRT_INIT_ZEROS; /* the executor zeroes it once, when it is made */
  t->kept = 1;
  return t;
}

dlrt_tensor_t *dlrt_param(dlrt_graph_t *g, const char *name, int ndim, const int64_t *shape,
                          dlrt_init_kind init, int64_t fan_in, int64_t fan_out) {
  if (!g || g->status) return NULL;
  if (g->backward_done)
    return dlrt__graph_fail(g, DLRT_ERR_STATE, "param %s: added after dlrt_graph_backward",
                            name ? name : "");
  if (!shape && ndim) return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "param: shape is NULL");
  if (init < DLRT_INIT_ZEROS || init > DLRT_INIT_XAVIER_UNIFORM ||
      (init >= DLRT_INIT_FAN_IN_UNIFORM && fan_in <= 0))
    /* DLRT_INIT_NORMAL comes through dlrt_param_normal, with its std. */
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "param %s: initialiser %d needs fan_in > 0",
                            name ? name : "", (int)init);
  dlrt_tensor_t *t = dlrt__tensor_new(g, name, DLRT_F32, ndim, shape, DLRT__TENSOR_PARAM);
  if (!t) return NULL;
  t->init = init;
  t->fan_in = fan_in;
  t->fan_out = fan_out;
  t->kept = 1;
  t->needs_grad = 1;
  return t;
}

dlrt_tensor_t *dlrt_param_normal(dlrt_graph_t *g, const char *name, int ndim,
                                 const int64_t *shape, float std) {
  if (!g || g->status) return NULL;
  if (!(std > 0) || !isfinite(std))
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "param %s: a normal initialiser needs a "
                            "finite std > 0, not %g", name ? name : "", (double)std);
  dlrt_tensor_t *t = dlrt_param(g, name, ndim, shape, DLRT_INIT_ZEROS, 0, 0);
  if (!t) return NULL;
  t->init = DLRT_INIT_NORMAL;
  t->init_std = std;
  return t;
}

dlrt_tensor_t *dlrt_param_set_decay(dlrt_graph_t *g, dlrt_tensor_t *p, int decay) {
  if (!g || g->status) return NULL;
  if (!p || p->kind != DLRT__TENSOR_PARAM)
    return dlrt__graph_fail(g, DLRT_ERR_INVALID_ARG, "dlrt_param_set_decay: %s is not a "
                            "parameter", p ? p->name : "NULL");
  if (g->backward_done)
    return dlrt__graph_fail(g, DLRT_ERR_STATE, "dlrt_param_set_decay(%s): after "
                            "dlrt_graph_optimize's inputs were fixed by dlrt_graph_backward",
                            p->name);
  p->no_decay = !decay;
  return p;
}

dlrt_tensor_t *dlrt_keep(dlrt_graph_t *g, dlrt_tensor_t *t) {
  if (!g || g->status || !t) return NULL;
  t->owner->kept = 1;
  t->kept = 1;
  return t;
}
