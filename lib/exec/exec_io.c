/* exec_io.c — moving tensors between the host and an executor: inputs and
 * parameters in, results out (CNHW images handed out as NCHW), figures, and
 * parameters and optimizer state for checkpoints. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dialect.h" /* the kernels' fp16 / bf16 conversions */
#include "exec/exec.h"
#include "util/status.h"

/* ---------------------------------------------------------------- host I/O */

static int check_io(dlrt_exec_t *e, dlrt_tensor_t *t, const void *host, size_t bytes,
                    const char *what) {
  DLRT__CHECK_ARG(e && t && (host || bytes == 0), "%s: executor, tensor or buffer is NULL", what);
  if (t->id >= e->g->n_tensors || e->g->tensors[t->id] != t)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: tensor %s is not of this graph", what,
                           t->name);
  if (bytes != dlrt__tensor_bytes(t))
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: tensor %s holds %zu bytes, not %zu", what,
                           t->name, dlrt__tensor_bytes(t), bytes);
  if (strcmp(what, "dlrt_exec_read") != 0 && (t->offset || !dlrt__contiguous(t)))
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: tensor %s is a slice or transposed "
                           "view of %s; write the tensor it views", what, t->name,
                           t->owner->name);
  if (!e->bufs[t->owner->id] && !(e->spill.pool && dlrt__persistent(t->owner)))
    return dlrt__set_error(DLRT_ERR_STATE, "%s: tensor %s is not kept (call dlrt_keep when "
                           "building) or was not computed yet", what, t->name);
  return DLRT_OK;
}

/* y[b, a, p] = x[a, b, p] on the host: CNHW <-> NCHW for reads and writes
 * of image tensors that convolution stacks store channel-major. */
static void swap01(float *y, const float *x, int64_t na, int64_t nb, int64_t inner) {
  for (int64_t a = 0; a < na; a++)
    for (int64_t b = 0; b < nb; b++)
      memcpy(y + (b * na + a) * inner, x + (a * nb + b) * inner, (size_t)inner * sizeof *y);
}

static int write_resident(dlrt_exec_t *e, dlrt_tensor_t *t, const void *src, size_t bytes);
static int read_resident(dlrt_exec_t *e, dlrt_tensor_t *t, void *dst, size_t bytes);

/* With spilling the storage is made resident around the copy. */
int dlrt_exec_write(dlrt_exec_t *e, dlrt_tensor_t *t, const void *src, size_t bytes) {
  int handled, rc = e && t && src ? dlrt__pstream_io(e, t, (void *)src, bytes, 1, &handled) : 0;
  if (rc < 0 || (rc == DLRT_OK && e && t && src && handled)) return rc;
  rc = check_io(e, t, src, bytes, "dlrt_exec_write");
  if (rc < 0 || (rc = dlrt__exec_use(e, t, 1)) < 0) return rc;
  rc = write_resident(e, t, src, bytes);
  dlrt__exec_unuse(e, t);
  return rc;
}

int dlrt_exec_read(dlrt_exec_t *e, dlrt_tensor_t *t, void *dst, size_t bytes) {
  int handled, rc = e && t && dst ? dlrt__pstream_io(e, t, dst, bytes, 0, &handled) : 0;
  if (rc < 0 || (rc == DLRT_OK && e && t && dst && handled)) return rc;
  rc = check_io(e, t, dst, bytes, "dlrt_exec_read");
  if (rc < 0 || (rc = dlrt__exec_use(e, t, 0)) < 0) return rc;
  rc = read_resident(e, t, dst, bytes);
  dlrt__exec_unuse(e, t);
  return rc;
}

static int write_resident(dlrt_exec_t *e, dlrt_tensor_t *t, const void *src, size_t bytes) {
  int rc;
  if (t->cnhw) {
    float *tmp = malloc(bytes ? bytes : 1);
    if (!tmp) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
    swap01(tmp, src, t->shape[0], t->shape[1], t->shape[2] * t->shape[3]);
    rc = dlrt_copy_h2d(dlrt__exec_buf(e, t), 0, tmp, bytes, e->stream);
    if (rc == DLRT_OK) rc = dlrt_stream_synchronize(e->stream);
    free(tmp);
    return rc;
  }
  /* Blocking on the executor's stream: ordered after queued runs, and the
   * caller may reuse `src` at once. */
  rc = dlrt_copy_h2d(dlrt__exec_buf(e, t), 0, src, bytes, e->stream);
  return rc == DLRT_OK ? dlrt_stream_synchronize(e->stream) : rc;
}

static int read_resident(dlrt_exec_t *e, dlrt_tensor_t *t, void *dst, size_t bytes) {
  int rc;
  if (t->cnhw) {
    /* Stored C x N x H x W: hand it out as N x C x H x W, as the API says. */
    float *tmp = malloc(bytes ? bytes : 1);
    if (!tmp) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
    rc = dlrt_copy_d2h(tmp, dlrt__exec_buf(e, t), 0, bytes, e->stream);
    if (rc == DLRT_OK) rc = dlrt_stream_synchronize(e->stream);
    if (rc == DLRT_OK) swap01(dst, tmp, t->shape[1], t->shape[0], t->shape[2] * t->shape[3]);
    free(tmp);
    return rc;
  }
  size_t es = dlrt_dtype_size(t->dtype), at = (size_t)t->offset * es;
  if (!dlrt__contiguous(t) && t->numel > 0) {
    /* A strided view: read the stretch of storage it spans, gather here. */
    int64_t span = 1;
    for (int i = 0; i < t->ndim; i++) span += (t->shape[i] - 1) * t->strides[i];
    char *tmp = malloc((size_t)span * es);
    if (!tmp) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
    rc = dlrt_copy_d2h(tmp, dlrt__exec_buf(e, t), at, (size_t)span * es, e->stream);
    if (rc == DLRT_OK) rc = dlrt_stream_synchronize(e->stream);
    int64_t index[DLRT_MAX_DIMS] = {0};
    for (int64_t k = 0; rc == DLRT_OK && k < t->numel; k++) {
      int64_t from = 0;
      for (int i = 0; i < t->ndim; i++) from += index[i] * t->strides[i];
      memcpy((char *)dst + (size_t)k * es, tmp + (size_t)from * es, es);
      for (int i = t->ndim - 1; i >= 0 && ++index[i] == t->shape[i]; i--) index[i] = 0;
    }
    free(tmp);
    return rc;
  }
  rc = dlrt_copy_d2h(dst, dlrt__exec_buf(e, t), at, bytes, e->stream);
  return rc == DLRT_OK ? dlrt_stream_synchronize(e->stream) : rc;
}

/* dlrt_exec_copy_in from a source of `src_dtype`: a copy, or a conversion
 * to t's storage type on the executor's stream. */
static int copy_in(dlrt_exec_t *e, dlrt_tensor_t *t, dlrt_buffer_t *src, size_t src_offset,
                   dlrt_dtype src_dtype, dlrt_event_t *wait) {
  DLRT__CHECK_ARG(src, "dlrt_exec_copy_in: source buffer is NULL");
  size_t bytes = t ? dlrt__tensor_bytes(t) : 0;
  int rc = check_io(e, t, src, bytes, "dlrt_exec_copy_in");
  if (rc < 0) return rc;
  if (t->kind != DLRT__TENSOR_INPUT)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "dlrt_exec_copy_in: %s is not an input",
                           t->name);
  if (dlrt_buffer_device(src) != e->dev)
    return dlrt__set_error(DLRT_ERR_WRONG_DEVICE, "dlrt_exec_copy_in: the source buffer is on "
                           "%s, the executor on %s", dlrt_device_spec(dlrt_buffer_device(src)),
                           dlrt_device_spec(e->dev));
  /* Inputs are never stored channel-major (only what convolutions produce). */
  if (t->cnhw)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "dlrt_exec_copy_in: input %s is stored "
                           "channel-major", t->name);
  if (wait && (rc = dlrt_stream_wait_event(e->stream, wait)) < 0) return rc;
  if ((rc = dlrt__exec_use(e, t, 1)) < 0) return rc;
  if (src_dtype == t->dtype)
    rc = dlrt_copy_d2d(dlrt__exec_buf(e, t), 0, src, src_offset, bytes, e->stream);
  else
    rc = dlrt_cast(e->stream, t->numel, dlrt__exec_buf(e, t), 0, t->dtype, src, src_offset,
                   src_dtype);
  dlrt__exec_unuse(e, t);
  return rc;
}

int dlrt_exec_copy_in(dlrt_exec_t *e, dlrt_tensor_t *t, dlrt_buffer_t *src, size_t src_offset,
                      dlrt_event_t *wait) {
  return copy_in(e, t, src, src_offset, t ? t->dtype : DLRT_F32, wait);
}

int dlrt__exec_copy_in_from(dlrt_exec_t *e, dlrt_tensor_t *t, dlrt_buffer_t *src,
                            size_t src_offset, dlrt_dtype src_dtype, dlrt_event_t *wait) {
  return copy_in(e, t, src, src_offset, src_dtype, wait);
}

int dlrt__exec_write_f32(dlrt_exec_t *e, dlrt_tensor_t *t, const float *src, int64_t count) {
  DLRT__CHECK_ARG(t && src && count >= 0, "dlrt_exec_write: tensor or source is NULL");
  if (t->dtype == DLRT_F32) return dlrt_exec_write(e, t, src, (size_t)count * sizeof(float));
  if (t->dtype != DLRT_F16 && t->dtype != DLRT_BF16)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "dlrt_exec_write: %s holds %s, not a "
                           "floating type fp32 values convert to", t->name,
                           dlrt_dtype_name(t->dtype));
  uint16_t *tmp = malloc((size_t)(count ? count : 1) * sizeof *tmp);
  if (!tmp) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  /* The rounding of the device's cast kernel (nearest even). */
  for (int64_t i = 0; i < count; i++)
    tmp[i] = t->dtype == DLRT_F16 ? dlrt_float_to_half(src[i]) : dlrt_float_to_bf16(src[i]);
  int rc = dlrt_exec_write(e, t, tmp, (size_t)count * sizeof *tmp);
  free(tmp);
  return rc;
}

dlrt_stream_t *dlrt_exec_stream(dlrt_exec_t *e) { return e ? e->stream : NULL; }

int dlrt_exec_set_lr(dlrt_exec_t *e, float lr) {
  DLRT__CHECK_ARG(e && lr >= 0 && isfinite(lr), "executor is NULL or lr %g is not a finite "
                  "number >= 0", lr);
  e->lr = lr;
  return DLRT_OK;
}

int dlrt_exec_info_get(dlrt_exec_t *e, dlrt_exec_info *out) {
  DLRT__CHECK_ARG(e && out, "executor or out is NULL");
  dlrt_mem_stats st;
  int rc = dlrt_mem_stats_get(e->dev, &st);
  if (rc < 0) return rc;
  memset(out, 0, sizeof *out);
  out->planned_peak_bytes = e->plan.planned_peak + e->grads.accum_bytes;
  uint64_t base = e->plan.peak_base;
  out->measured_peak_bytes = st.allocated.peak > base ? st.allocated.peak - base : 0;
  out->param_bytes = e->plan.param_bytes;
  out->state_bytes = e->plan.state_bytes;
  out->params = e->plan.params;
  out->steps = e->steps;
  out->nodes = e->g->n_nodes;
  return DLRT_OK;
}

/* ---------------------------------------------------------------- export */

int dlrt__exported(const dlrt_tensor_t *t, int with_state) {
  return t->kind == DLRT__TENSOR_PARAM || t->buffer ||
         (with_state && t->kind == DLRT__TENSOR_STATE);
}

int dlrt__export_count(const dlrt_graph_t *g, int with_state) {
  int count = with_state ? 1 : 0; /* the optimizer's step counter */
  for (int i = 0; i < g->n_tensors; i++) count += dlrt__exported(g->tensors[i], with_state);
  return count;
}

int dlrt__host_tensor_like(dlrt_host_tensor *h, const dlrt_tensor_t *t) {
  snprintf(h->name, sizeof h->name, "%s", t->name);
  h->dtype = DLRT_F32;
  h->ndim = t->ndim;
  memcpy(h->shape, t->shape, (size_t)t->ndim * sizeof t->shape[0]);
  h->bytes = dlrt__tensor_bytes(t);
  h->data = malloc(h->bytes ? h->bytes : 1);
  return h->data ? DLRT_OK : dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
}

int dlrt_exec_export(dlrt_exec_t *e, int with_state, dlrt_host_tensor **tensors, int *n) {
  DLRT__CHECK_ARG(e && tensors && n, "executor, tensors or n is NULL");
  dlrt_graph_t *g = e->g;
  int count = dlrt__export_count(g, with_state);
  dlrt_host_tensor *out = calloc((size_t)(count ? count : 1), sizeof *out);
  if (!out) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  int k = 0, rc = DLRT_OK;
  for (int i = 0; i < g->n_tensors && rc == DLRT_OK; i++) {
    dlrt_tensor_t *t = g->tensors[i];
    if (!dlrt__exported(t, with_state)) continue;
    dlrt_host_tensor *h = &out[k++];
    if ((rc = dlrt__host_tensor_like(h, t)) == DLRT_OK) rc = dlrt_exec_read(e, t, h->data, h->bytes);
  }
  if (rc == DLRT_OK && with_state && (e->steps < 0 || e->steps > INT32_MAX))
    rc = dlrt__set_error(DLRT_ERR_UNSUPPORTED, "dlrt_exec_export: %lld updates made; the "
                         "checkpoint's optimizer.step (I32) holds 0 to %d",
                         (long long)e->steps, INT32_MAX);
  if (rc == DLRT_OK && with_state) {
    dlrt_host_tensor *h = &out[k++];
    snprintf(h->name, sizeof h->name, "optimizer.step");
    h->dtype = DLRT_I32;
    h->ndim = 1;
    h->shape[0] = 1;
    h->bytes = 4;
    int32_t *step = malloc(4);
    if (step) *step = (int32_t)e->steps;
    h->data = step;
    if (!step) rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  }
  if (rc < 0) {
    dlrt_host_tensors_free(out, k);
    return rc;
  }
  *tensors = out;
  *n = k;
  return DLRT_OK;
}

/* The updates made, from a checkpoint's "optimizer.step" (one I32 from 0
 * up): *steps is left alone when there is none. */
static int saved_steps(const dlrt_host_tensor *tensors, int n, int64_t *steps) {
  for (int j = 0; j < n; j++) {
    const dlrt_host_tensor *h = &tensors[j];
    if (strcmp(h->name, "optimizer.step") != 0) continue;
    if (h->dtype != DLRT_I32 || h->bytes != 4 || !h->data || h->ndim > 1)
      return dlrt__set_error(DLRT_ERR_INVALID_ARG, "the checkpoint's optimizer.step is %d-d "
                             "%s of %zu bytes; expected one I32 (the updates made): the file "
                             "is damaged or was not written by dlrt", h->ndim,
                             dlrt_dtype_name(h->dtype), h->bytes);
    int32_t step;
    memcpy(&step, h->data, sizeof step);
    if (step < 0)
      return dlrt__set_error(DLRT_ERR_INVALID_ARG, "the checkpoint's optimizer.step is %d; "
                             "expected the updates made, 0 to %d: the file is damaged or was "
                             "edited", (int)step, INT32_MAX);
    *steps = step;
  }
  return DLRT_OK;
}

int dlrt_exec_import(dlrt_exec_t *e, const dlrt_host_tensor *tensors, int n) {
  DLRT__CHECK_ARG(e && (tensors || n == 0), "executor or tensors is NULL");
  dlrt_graph_t *g = e->g;
  int64_t steps = e->steps;
  int rc = saved_steps(tensors, n, &steps);
  if (rc < 0) return rc;
  /* Check everything first, so a mismatched checkpoint changes nothing.
   * Optimizer state is all or nothing: none (weights only, or another
   * optimizer's) keeps the fresh state, but part of it means a damaged
   * file or another model. */
  int states_found = 0;
  const char *state_missing = NULL;
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < g->n_tensors; i++) {
      dlrt_tensor_t *t = g->tensors[i];
      if (t->kind != DLRT__TENSOR_PARAM && t->kind != DLRT__TENSOR_STATE) continue;
      const dlrt_host_tensor *h = NULL;
      for (int j = 0; j < n && !h; j++)
        if (strcmp(tensors[j].name, t->name) == 0) h = &tensors[j];
      if (t->kind == DLRT__TENSOR_STATE && pass == 0) {
        if (h) states_found++;
        else if (!state_missing) state_missing = t->name;
      }
      if (!h) {
        if (t->kind == DLRT__TENSOR_PARAM)
          return dlrt__set_error(DLRT_ERR_INVALID_ARG, "the checkpoint has no tensor %s: it "
                                 "was saved from another model", t->name);
        continue; /* no optimizer state saved: keep the fresh state */
      }
      if (h->dtype != DLRT_F32 || h->ndim != t->ndim || h->bytes != dlrt__tensor_bytes(t) ||
          memcmp(h->shape, t->shape, (size_t)t->ndim * sizeof t->shape[0]) != 0)
        return dlrt__set_error(DLRT_ERR_INVALID_ARG, "the checkpoint's %s has another dtype "
                               "or shape than the model's: it was saved from another model",
                               t->name);
      if (pass == 1) {
        rc = dlrt_exec_write(e, t, h->data, h->bytes);
        if (rc < 0) return rc;
      }
    }
    if (pass == 0 && states_found && state_missing)
      return dlrt__set_error(DLRT_ERR_INVALID_ARG, "the checkpoint has the optimizer state of "
                             "some parameters but not %s: it is damaged or was saved from "
                             "another model", state_missing);
  }
  e->steps = steps;
  return DLRT_OK;
}
