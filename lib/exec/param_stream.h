/* param_stream.h — the executor's parameter streaming, owned by
 * param_stream.c (internal): parameters, their optimizer state and their
 * gradients' copies on the host, each parameter fetched to the device a
 * few nodes ahead of its uses and freed after them, gradients sent back as
 * soon as complete and the updates run on the host
 * (dlrt_exec_offload_params). The executor calls it at a few points:
 * exec.c (materialize, the run's residency, destroy) and exec_io.c (reads
 * and writes of streamed tensors). */
#ifndef DLRT_EXEC_PARAM_STREAM_H
#define DLRT_EXEC_PARAM_STREAM_H

#include <stddef.h>

#include "dlrt.h"
#include "exec/param_disk.h"

typedef struct dlrt__pstream dlrt__pstream;
typedef struct dlrt__residency dlrt__residency;

/* The residency policy while streaming (residency.h): the plain one for
 * every storage but the streamed ones. */
extern const dlrt__residency dlrt__residency_params;

void dlrt__pstream_destroy(dlrt_exec_t *e);
/* DLRT_OK, or DLRT_ERR_STATE naming what streaming does not go with
 * (spilling, DLRT_RUN_GRADIENTS; accumulation, clipping and loss scaling
 * where a parameter with a gradient is not streamed). */
int dlrt__pstream_check(const dlrt_exec_t *e, int gradients_only);
/* 1 when tensor storage `id` is streamed (a parameter or its optimizer
 * state), with *host its host copy (for materialize's initial values);
 * else 0. */
int dlrt__pstream_init_host(dlrt_exec_t *e, int id, float **host);
/* dlrt_exec_read / _write of a streamed tensor: *handled = 1 and the host
 * copy is read or written (the device copy, stale, is dropped). */
int dlrt__pstream_io(dlrt_exec_t *e, dlrt_tensor_t *t, void *host, size_t bytes, int write,
                     int *handled);

/* For exec_grads.c, at the first update node: every streamed gradient of
 * this run on the host and folded into its running sum (accumulation); and
 * the sum of the gradients' elements (squared: of their squares), added in
 * the order of the device's (exec_grads.c's gradients_total). */
int dlrt__pstream_accumulate(dlrt_exec_t *e);
int dlrt__pstream_gradients_total(dlrt_exec_t *e, int squared, float *out);

/* param_disk.h: the optimizer state of some streamed parameters on disk. */

/* param_ahead.c: the look-ahead (1 .. max_ahead) whose step, replayed on
 * a model of the copy engine and the kernels (node_ms[k], and fetch_ms[(a -
 * 1) * n + k]: the copies position k needs with look-ahead a, ms), is
 * within 1% of the best, the smallest such; reach_bytes[a - 1]: the
 * parameter bytes in reach with look-ahead a, none past cap (0: no cap).
 * The chosen look-ahead (*predicted_ms its step), or <0. */
int dlrt__choose_ahead(int n, const double *node_ms, const double *fetch_ms,
                       const uint64_t *reach_bytes, uint64_t cap, int max_ahead,
                       double *predicted_ms);

/* host_optim.c: the executor's kernels over host memory, for the gradients
 * and 16-bit copies of streamed parameters (the same bits as a device's):
 * y = x cast to y_dtype (f16 or bf16); y = x + z; *y = dlrt_reduce's sum
 * of x; y = x * x. n floats each. */
int dlrt__host_cast_f32(void *y, dlrt_dtype y_dtype, const float *x, int64_t n);
int dlrt__host_add(float *y, const float *x, const float *z, int64_t n);
int dlrt__host_sum(float *y, const float *x, int64_t n);
int dlrt__host_square(float *y, const float *x, int64_t n);

#endif
