/* exec_collective.c — what tensor parallelism's nodes (lib/graph/collective.c)
 * do on an executor: f's copy, g's sum over the peers and the fused head
 * over a vocabulary shard. The peers meet in the collective the layer
 * above registers (dlrt_exec_set_collective: threads of one process, or
 * MPI ranks); the values go to it through a host buffer, pinned where the
 * device has such memory, with the executor's stream waited for. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "exec/exec.h"
#include "util/status.h"

static size_t off(const dlrt_tensor_t *t) { return (size_t)t->offset * dlrt_dtype_size(t->dtype); }

int dlrt_exec_set_collective(dlrt_exec_t *e, dlrt_collective_fn fn, void *user) {
  DLRT__CHECK_ARG(e, "dlrt_exec_set_collective: executor is NULL");
  e->coll.fn = fn;
  e->coll.user = fn ? user : NULL;
  return DLRT_OK;
}

void dlrt__exec_collective_free(dlrt_exec_t *e) {
  dlrt_host_free(e->coll.host);
  e->coll.host = NULL;
  e->coll.host_bytes = 0;
}

/* The executor's host buffer of at least `bytes` (its stream idle). */
static int host_buffer(dlrt_exec_t *e, size_t bytes, float **out) {
  if (e->coll.host_bytes < bytes) {
    dlrt__exec_collective_free(e);
    void *p = NULL;
    int rc = dlrt_host_alloc(e->dev, bytes, &p);
    if (rc < 0) return rc;
    e->coll.host = p;
    e->coll.host_bytes = bytes;
  }
  *out = e->coll.host;
  return DLRT_OK;
}

/* The peers' combination of `count` values at `host`, in place. */
static int combine(dlrt_exec_t *e, float *host, int64_t count, dlrt_collective_op op,
                   int64_t tag) {
  return e->coll.fn ? e->coll.fn(e->coll.user, host, count, op, tag) : DLRT_OK;
}

int dlrt__exec_run_collective(dlrt_exec_t *e, dlrt__node *n) {
  dlrt_tensor_t *x = n->in[0], *y = n->out[0];
  size_t bytes = dlrt__tensor_bytes(x);
  /* f's forward pass, or a group of one: y = x. */
  if (n->op == DLRT__OP_TP_COPY || !e->coll.fn)
    return dlrt_copy_d2d(dlrt__exec_buf(e, y), off(y), dlrt__exec_buf(e, x), off(x), bytes,
                         e->stream);
  const struct dlrt__collective_params *p = &n->collective;
  float *host;
  int rc = host_buffer(e, bytes, &host);
  if (rc == DLRT_OK) rc = dlrt_copy_d2h(host, dlrt__exec_buf(e, x), off(x), bytes, e->stream);
  if (rc == DLRT_OK) rc = dlrt_stream_synchronize(e->stream);
  if (rc == DLRT_OK) rc = combine(e, host, p->count, (dlrt_collective_op)p->op, p->tag);
  if (rc == DLRT_OK) rc = dlrt_copy_h2d(dlrt__exec_buf(e, y), off(y), host, bytes, e->stream);
  /* The host buffer is the next collective's: the copy must be done. */
  if (rc == DLRT_OK) rc = dlrt_stream_synchronize(e->stream);
  return rc;
}

/* The fused head over a vocabulary shard, a chunk of R rows at a time
 * through the workspace (per-row losses [N], N ones, the chunk's row
 * statistics [4R], its logits z [R x V_s]):
 *   z = x_c w^T; each row's maximum, sum of exp(z - maximum), target logit
 *   and sum of logits (kernels/nn.h: xent_shard_stats) to the host; the
 *   maxima combined over the peers (the global maximum M), then the sums
 *   rescaled to M and combined (S, the target logit t, the logits' sum Z):
 *   lse = M + log S, loss = lse - (1 - s) t - (s / V) Z, the same on every
 *   peer; in a training run dz = (exp(z - lse) - q) scale over z, d x_c =
 *   dz w (this shard's part: f before the head sums them) and dw (+)=
 *   dz^T x_c;
 * then the mean loss as a GEMM, as the unsharded head does. Per chunk two
 * collectives of R and 3R floats: nothing of R x V crosses. */
int dlrt__exec_run_xent_shard(dlrt_exec_t *e, dlrt__node *n) {
  const struct dlrt__linear_xent_shard_params *p = &n->linear_xent_shard;
  dlrt_tensor_t *x = n->in[0], *w = n->in[1], *labels = n->in[2];
  dlrt_tensor_t *loss = n->out[0], *dx = n->out[1], *dw = n->out[2], *ws = n->out[3];
  dlrt_buffer_t *wsb = dlrt__exec_buf(e, ws);
  const size_t f = sizeof(float);
  size_t losses_at = off(ws), ones_at = losses_at + (size_t)p->rows * f;
  size_t stats_at = ones_at + (size_t)p->rows * f, z_at = stats_at + (size_t)(4 * p->chunk) * f;
  int train = e->mode != DLRT_RUN_FORWARD;
  /* Host: the statistics [4R], maxima [R], sums [3R], lse [R], losses [R]. */
  float *host;
  int rc = host_buffer(e, (size_t)(10 * p->chunk) * f, &host);
  float *stats = host, *maxima = stats + 4 * p->chunk, *sums = maxima + p->chunk;
  float *lse = sums + 3 * p->chunk, *losses = lse + p->chunk;
  if (rc == DLRT_OK)
    rc = dlrt_elementwise(e->stream, DLRT_EW_FILL, DLRT_F32, p->rows, 1.0f, wsb, ones_at, NULL,
                          0, NULL, 0);
  double smooth_each = (double)p->smoothing / (double)p->vocab;
  for (int64_t r0 = 0; r0 < p->rows && rc == DLRT_OK; r0 += p->chunk) {
    int64_t r = p->rows - r0 < p->chunk ? p->rows - r0 : p->chunk;
    size_t x_at = off(x) + (size_t)(r0 * p->width) * f;
    size_t labels_at = off(labels) + (size_t)r0 * sizeof(int32_t);
    dlrt_gemm_desc d = dlrt_gemm_desc_make(DLRT_F32, 0, 1, r, p->classes, p->width, 1.0f, 0.0f);
    if ((rc = dlrt_gemm(e->stream, &d, dlrt__exec_buf(e, x), x_at, dlrt__exec_buf(e, w), off(w),
                        wsb, z_at)) < 0)
      break;
    dlrt__launcher lb;
    dlrt__launch_start(&lb, e->stream, "graph");
    lb.launch.kernel = DLRT__K_xent_shard_stats;
    lb.launch.groups = r;
    dlrt__launch_buffer_arg(&lb, wsb, z_at, f);
    dlrt__launch_buffer_arg(&lb, dlrt__exec_buf(e, labels), labels_at, sizeof(int32_t));
    dlrt__launch_buffer_arg(&lb, wsb, stats_at, f);
    dlrt__launch_i64(&lb, r), dlrt__launch_i64(&lb, p->classes), dlrt__launch_i64(&lb, p->first);
    if ((rc = dlrt__launch_submit(e->stream, &lb)) < 0 ||
        (rc = dlrt_copy_d2h(stats, wsb, stats_at, (size_t)(4 * r) * f, e->stream)) < 0 ||
        (rc = dlrt_stream_synchronize(e->stream)) < 0)
      break;
    for (int64_t i = 0; i < r; i++) maxima[i] = stats[4 * i];
    if ((rc = combine(e, maxima, r, DLRT_COLLECTIVE_MAX, p->tag)) < 0) break;
    for (int64_t i = 0; i < r; i++) {
      sums[3 * i] = stats[4 * i + 1] * expf(stats[4 * i] - maxima[i]);
      sums[3 * i + 1] = stats[4 * i + 2];
      sums[3 * i + 2] = stats[4 * i + 3];
    }
    if ((rc = combine(e, sums, 3 * r, DLRT_COLLECTIVE_SUM, p->tag + 1)) < 0) break;
    for (int64_t i = 0; i < r; i++) {
      double row_lse = (double)maxima[i] + log((double)sums[3 * i]);
      lse[i] = (float)row_lse;
      losses[i] = (float)(row_lse - (1.0 - (double)p->smoothing) * (double)sums[3 * i + 1] -
                          smooth_each * (double)sums[3 * i + 2]);
    }
    /* lse over the chunk's statistics on the device (read by the gradient). */
    if ((rc = dlrt_copy_h2d(wsb, stats_at, lse, (size_t)r * f, e->stream)) < 0 ||
        (rc = dlrt_copy_h2d(wsb, losses_at + (size_t)r0 * f, losses, (size_t)r * f,
                            e->stream)) < 0)
      break;
    if (!train) continue;
    dlrt__launch_start(&lb, e->stream, "graph");
    lb.launch.kernel = DLRT__K_xent_shard_grad;
    lb.launch.items = r * p->classes;
    dlrt__launch_buffer_arg(&lb, wsb, z_at, f);
    dlrt__launch_buffer_arg(&lb, wsb, z_at, f);
    dlrt__launch_buffer_arg(&lb, dlrt__exec_buf(e, labels), labels_at, sizeof(int32_t));
    dlrt__launch_buffer_arg(&lb, wsb, stats_at, f);
    dlrt__launch_i64(&lb, r), dlrt__launch_i64(&lb, p->classes), dlrt__launch_i64(&lb, p->first);
    dlrt__launch_i64(&lb, p->vocab), dlrt__launch_f32(&lb, p->smoothing);
    dlrt__launch_f32(&lb, e->grads.loss_scale / (float)p->rows);
    if ((rc = dlrt__launch_submit(e->stream, &lb)) < 0) break;
    d = dlrt_gemm_desc_make(DLRT_F32, 0, 0, r, p->width, p->classes, 1.0f, 0.0f);
    if ((rc = dlrt_gemm(e->stream, &d, wsb, z_at, dlrt__exec_buf(e, w), off(w),
                        dlrt__exec_buf(e, dx), off(dx) + (size_t)(r0 * p->width) * f)) < 0)
      break;
    d = dlrt_gemm_desc_make(DLRT_F32, 1, 0, p->classes, p->width, r, 1.0f, r0 ? 1.0f : 0.0f);
    rc = dlrt_gemm(e->stream, &d, wsb, z_at, dlrt__exec_buf(e, x), x_at, dlrt__exec_buf(e, dw),
                   off(dw));
  }
  if (rc == DLRT_OK) {
    /* loss = (1 / N) losses^T ones: 1 x N times N x 1. */
    dlrt_gemm_desc d = dlrt_gemm_desc_make(DLRT_F32, 0, 0, 1, 1, p->rows,
                                           1.0f / (float)p->rows, 0.0f);
    rc = dlrt_gemm(e->stream, &d, wsb, losses_at, wsb, ones_at, dlrt__exec_buf(e, loss),
                   off(loss));
  }
  /* The host buffer is the next collective's: its copies must be done. */
  int rc2 = dlrt_stream_synchronize(e->stream);
  return rc < 0 ? rc : rc2;
}
