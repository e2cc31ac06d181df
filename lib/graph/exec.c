/* exec.c — plans and runs a graph on a device.
 *
 * Two schedules: the forward nodes (evaluation) and every node (a training
 * step). For each, the planner finds every storage's last use; the executor
 * allocates a node's outputs from the device's caching allocator just before
 * the node runs and frees each storage right after its last use, all on one
 * stream, so the stream-ordered allocator recycles memory with no host
 * synchronization. Inputs, parameters, optimizer state and kept tensors live
 * as long as the executor. The planned peak is the same walk done on paper. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "device/launch.h"
#include "graph/graph.h"
#include "util/status.h"

typedef struct {
  int *order;     /* node indices */
  int n;
  /* frees[i]: storages (tensor ids) whose last use is order[i], -1 ended. */
  int **frees;
} schedule;

struct dlrt_exec {
  dlrt_graph_t *g;
  dlrt_device_t *dev;
  dlrt_stream_t *stream;
  dlrt_buffer_t **bufs; /* by tensor id; views use their owner's */
  schedule plans[2];    /* by dlrt_run_mode */
  float lr;
  int64_t steps;
  uint64_t planned_peak;
  uint64_t peak_base;   /* allocator's allocated bytes before this executor */
  uint64_t param_bytes, state_bytes;
  int64_t params;
  /* DLRT_GRAPH_PROFILE=1: every node is waited for and timed; the totals per
   * op go to stderr when the executor is destroyed. */
  int profile;
  uint64_t seed;        /* for dropout masks */
  float clip_norm;      /* 0: no clipping */
  float grad_scale;     /* applied by the updates of this step (clipping) */
  dlrt_run_mode mode;   /* of the run in progress */
  double op_ms[OP_COUNT_];
  int64_t op_calls[OP_COUNT_];
};

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void print_profile(const dlrt_exec_t *e) {
  double total = 0;
  for (int i = 0; i < OP_COUNT_; i++) total += e->op_ms[i];
  fprintf(stderr, "dlrt graph profile on %s (each node waited for):\n", dlrt_device_spec(e->dev));
  for (int i = 0; i < OP_COUNT_; i++)
    if (e->op_calls[i])
      fprintf(stderr, "  %-16s %8lld calls %10.1f ms %5.1f%%\n", dlrt__op_name((op_kind)i),
              (long long)e->op_calls[i], e->op_ms[i], total > 0 ? 100.0 * e->op_ms[i] / total : 0);
}

static size_t tensor_bytes(const dlrt_tensor_t *t) {
  return (size_t)t->numel * dlrt_dtype_size(t->dtype);
}

static int persistent(const dlrt_tensor_t *t) {
  return t->kind != TENSOR_INTERMEDIATE || t->kept;
}

/* ---------------------------------------------------------------- planning */

static void schedule_free(schedule *s) {
  for (int i = 0; i < s->n; i++) free(s->frees[i]);
  free(s->frees);
  free(s->order);
  memset(s, 0, sizeof *s);
}

/* Builds the schedule of the nodes whose phase is <= max_phase, and returns
 * its peak of live bytes (512-byte blocks, as the allocator rounds). */
static int plan(dlrt_exec_t *e, node_phase max_phase, schedule *s, uint64_t *peak) {
  dlrt_graph_t *g = e->g;
  int *last = malloc((size_t)g->n_tensors * sizeof *last);
  s->order = malloc((size_t)(g->n_nodes ? g->n_nodes : 1) * sizeof *s->order);
  s->frees = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *s->frees);
  if (!last || !s->order || !s->frees) {
    free(last);
    return dlrt__set_error(DLRT_ERR_OOM, "out of host memory planning the graph");
  }
  for (int i = 0; i < g->n_tensors; i++) last[i] = -1;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->phase <= max_phase) s->order[s->n++] = i;
  for (int k = 0; k < s->n; k++) {
    node *n = g->nodes[s->order[k]];
    for (int j = 0; j < n->n_in; j++) last[n->in[j]->owner->id] = k;
    for (int j = 0; j < n->n_out; j++)
      if (last[n->out[j]->owner->id] < k) last[n->out[j]->owner->id] = k;
  }
  /* Group the frees by position. */
  int *count = calloc((size_t)(s->n ? s->n : 1), sizeof *count);
  if (!count) {
    free(last);
    return dlrt__set_error(DLRT_ERR_OOM, "out of host memory planning the graph");
  }
  for (int i = 0; i < g->n_tensors; i++)
    if (last[i] >= 0 && g->tensors[i]->owner == g->tensors[i] && !persistent(g->tensors[i]))
      count[last[i]]++;
  for (int k = 0; k < s->n; k++) {
    s->frees[k] = malloc((size_t)(count[k] + 1) * sizeof **s->frees);
    if (!s->frees[k]) {
      free(count);
      free(last);
      return dlrt__set_error(DLRT_ERR_OOM, "out of host memory planning the graph");
    }
    s->frees[k][0] = -1;
    count[k] = 0;
  }
  for (int i = 0; i < g->n_tensors; i++)
    if (last[i] >= 0 && g->tensors[i]->owner == g->tensors[i] && !persistent(g->tensors[i])) {
      int k = last[i];
      s->frees[k][count[k]++] = i;
      s->frees[k][count[k]] = -1;
    }
  /* The walk: persistent storage, plus what each node allocates, minus what
   * it frees. */
  uint64_t live = 0, top = 0;
  for (int i = 0; i < g->n_tensors; i++) {
    dlrt_tensor_t *t = g->tensors[i];
    if (t->owner == t && persistent(t)) live += (tensor_bytes(t) + 511) / 512 * 512;
  }
  top = live;
  for (int k = 0; k < s->n; k++) {
    node *n = g->nodes[s->order[k]];
    for (int j = 0; j < n->n_out; j++) {
      dlrt_tensor_t *t = n->out[j];
      if (t->owner == t && !persistent(t)) live += (tensor_bytes(t) + 511) / 512 * 512;
    }
    if (live > top) top = live;
    for (int *f = s->frees[k]; *f >= 0; f++)
      live -= (tensor_bytes(g->tensors[*f]) + 511) / 512 * 512;
  }
  *peak = top;
  free(count);
  free(last);
  return DLRT_OK;
}

/* ---------------------------------------------------------------- init */

static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static double uniform01(uint64_t *state) {
  return (double)(splitmix64(state) >> 11) * (1.0 / 9007199254740992.0);
}

/* Fills a parameter on the host from (seed, name): the same values whatever
 * the device, and whatever else the graph holds. */
static void init_values(const dlrt_tensor_t *t, uint64_t seed, float *v) {
  uint64_t state = seed;
  for (const char *c = t->name; *c; c++) state = (state ^ (unsigned char)*c) * 0x100000001b3ULL;
  double fan_in = (double)t->fan_in, fan_out = (double)(t->fan_out > 0 ? t->fan_out : t->fan_in);
  for (int64_t i = 0; i < t->numel; i++) {
    double x;
    switch (t->init) {
    case DLRT_INIT_ONES: x = 1.0; break;
    case DLRT_INIT_FAN_IN_UNIFORM: x = (2.0 * uniform01(&state) - 1.0) / sqrt(fan_in); break;
    case DLRT_INIT_XAVIER_UNIFORM:
      x = (2.0 * uniform01(&state) - 1.0) * sqrt(6.0 / (fan_in + fan_out));
      break;
    case DLRT_INIT_KAIMING_NORMAL: {
      double u1 = uniform01(&state), u2 = uniform01(&state);
      x = sqrt(-2.0 * log(u1 > 0 ? u1 : 1e-300)) * cos(6.283185307179586 * u2) *
          sqrt(2.0 / fan_in);
      break;
    }
    default: x = 0.0; break;
    }
    v[i] = (float)x;
  }
}

/* ---------------------------------------------------------------- lifetime */

void dlrt_exec_destroy(dlrt_exec_t *e) {
  if (!e) return;
  if (e->profile) print_profile(e);
  if (e->stream) dlrt_stream_synchronize(e->stream);
  if (e->bufs) {
    for (int i = 0; i < e->g->n_tensors; i++)
      if (e->g->tensors[i]->owner == e->g->tensors[i]) dlrt_buffer_free(e->bufs[i]);
    free(e->bufs);
  }
  schedule_free(&e->plans[0]);
  schedule_free(&e->plans[1]);
  dlrt_stream_destroy(e->stream);
  free(e);
}

int dlrt_exec_create(dlrt_graph_t *g, dlrt_device_t *dev, uint64_t seed, dlrt_exec_t **out) {
  DLRT__CHECK_ARG(g && dev && out, "graph, device or out is NULL");
  if (g->status) return dlrt_graph_status(g);
  dlrt_exec_t *e = calloc(1, sizeof *e);
  if (!e) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  e->g = g;
  e->dev = dev;
  e->lr = g->opt.lr;
  e->seed = seed;
  const char *profile = getenv("DLRT_GRAPH_PROFILE");
  e->profile = profile && *profile && strcmp(profile, "0") != 0;
  float *host = NULL;
  int rc = dlrt_stream_create(dev, &e->stream);
  if (rc < 0) goto fail;
  e->bufs = calloc((size_t)(g->n_tensors ? g->n_tensors : 1), sizeof *e->bufs);
  if (!e->bufs) {
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
    goto fail;
  }
  uint64_t forward_peak;
  if ((rc = plan(e, PHASE_FORWARD, &e->plans[DLRT_RUN_FORWARD], &forward_peak)) < 0 ||
      (rc = plan(e, PHASE_UPDATE, &e->plans[DLRT_RUN_TRAIN], &e->planned_peak)) < 0)
    goto fail;
  if (forward_peak > e->planned_peak) e->planned_peak = forward_peak;
  dlrt_mem_stats st;
  dlrt_mem_stats_get(dev, &st);
  e->peak_base = st.allocated.current;
  dlrt_mem_reset_peak(dev);
  /* Persistent storage now: inputs, parameters, state, kept tensors. */
  for (int i = 0; i < g->n_tensors; i++) {
    dlrt_tensor_t *t = g->tensors[i];
    if (t->owner != t || !persistent(t)) continue;
    size_t bytes = tensor_bytes(t);
    if ((rc = dlrt_buffer_alloc(dev, bytes ? bytes : 4, e->stream, &e->bufs[i])) < 0) goto fail;
    if (t->kind == TENSOR_PARAM) {
      e->param_bytes += bytes;
      e->params += t->numel;
    } else if (t->kind == TENSOR_STATE) {
      e->state_bytes += bytes;
    }
    if (t->kind != TENSOR_PARAM && t->kind != TENSOR_STATE) continue;
    free(host);
    host = malloc(bytes ? bytes : 4);
    if (!host) {
      rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
      goto fail;
    }
    init_values(t, seed, host);
    if ((rc = dlrt_copy_h2d(e->bufs[i], 0, host, bytes, e->stream)) < 0) goto fail;
    /* The copy reads `host`: wait before reusing it. */
    if ((rc = dlrt_stream_synchronize(e->stream)) < 0) goto fail;
  }
  free(host);
  *out = e;
  return DLRT_OK;
fail:
  free(host);
  dlrt_exec_destroy(e);
  return rc;
}

/* ---------------------------------------------------------------- running */

static dlrt_buffer_t *buf_of(dlrt_exec_t *e, const dlrt_tensor_t *t) {
  return e->bufs[t->owner->id];
}

static void arg(dlrt__launcher *lb, dlrt_exec_t *e, const dlrt_tensor_t *t) {
  dlrt__launch_buffer_arg(lb, buf_of(e, t), 0, dlrt_dtype_size(t->dtype));
}

/* Starts a launch of `kernel` over `items` indices (or `groups` groups). */
static void start(dlrt__launcher *lb, dlrt_exec_t *e, int kernel, int64_t items,
                  int64_t groups) {
  dlrt__launch_start(lb, e->stream, "graph");
  lb->launch.kernel = kernel;
  lb->launch.items = items;
  lb->launch.groups = groups;
}

/* y[o, y_start + j, i] = x[o, x_start + j, i] for j < count. */
static void start_axis_copy(dlrt__launcher *lb, dlrt_exec_t *e, const dlrt_tensor_t *y,
                            const dlrt_tensor_t *x, int64_t outer, int64_t inner, int64_t y_axis,
                            int64_t x_axis, int64_t y_start, int64_t x_start, int64_t count) {
  start(lb, e, DLRT__K_axis_copy, outer * count, 0);
  lb->launch.item_cost = inner;
  arg(lb, e, y), arg(lb, e, x);
  dlrt__launch_i64(lb, outer), dlrt__launch_i64(lb, inner), dlrt__launch_i64(lb, y_axis);
  dlrt__launch_i64(lb, x_axis), dlrt__launch_i64(lb, y_start), dlrt__launch_i64(lb, x_start);
  dlrt__launch_i64(lb, count);
}

static int run_gemm(dlrt_exec_t *e, dlrt_tensor_t *a, dlrt_tensor_t *b, dlrt_tensor_t *c,
                    const int64_t *p) {
  /* p: ta tb m n k batch stride_a stride_b stride_c */
  dlrt_gemm_desc d = dlrt_gemm_desc_make(DLRT_F32, (int)p[0], (int)p[1], p[2], p[3], p[4],
                                         1.0f, 0.0f);
  d.batch = p[5];
  d.stride_a = p[6];
  d.stride_b = p[7];
  d.stride_c = p[8];
  return dlrt_gemm(e->stream, &d, buf_of(e, a), 0, buf_of(e, b), 0, buf_of(e, c), 0);
}

static int run_node(dlrt_exec_t *e, node *n) {
  dlrt__launcher lb;
  dlrt_tensor_t *y = n->n_out ? n->out[0] : NULL, *a = n->in[0], *b = n->in[1];
  const int64_t *p = n->p;
  switch (n->op) {
  case OP_VIEW: return DLRT_OK;
  case OP_FILL:
    return dlrt_elementwise(e->stream, DLRT_EW_FILL, DLRT_F32, y->numel, n->f[0], buf_of(e, y),
                            0, NULL, 0, NULL, 0);
  case OP_RELU:
    return dlrt_elementwise(e->stream, DLRT_EW_RELU, DLRT_F32, y->numel, 0, buf_of(e, y), 0,
                            buf_of(e, a), 0, NULL, 0);
  case OP_ADD:
  case OP_MUL:
    return dlrt_elementwise(e->stream, n->op == OP_ADD ? DLRT_EW_ADD : DLRT_EW_MUL, DLRT_F32,
                            y->numel, 0, buf_of(e, y), 0, buf_of(e, a), 0, buf_of(e, b), 0);
  case OP_SCALE:
    return dlrt_elementwise(e->stream, DLRT_EW_SCALE, DLRT_F32, y->numel, n->f[0], buf_of(e, y),
                            0, buf_of(e, a), 0, NULL, 0);
  case OP_SUM:
    return dlrt_reduce(e->stream, DLRT_REDUCE_SUM, DLRT_F32, 1, a->numel, buf_of(e, y), 0,
                       buf_of(e, a), 0);
  case OP_BMM: {
    int64_t q[9] = {p[0], p[1], p[2], p[3], p[4], p[5] ? p[5] : 1, p[6], p[7], p[8]};
    return run_gemm(e, a, b, y, q);
  }
  case OP_CONV_GEMM: {
    /* y (O x N*OHW) = W (O x CKK) cols (CKK x N*OHW). */
    int64_t q[9] = {0, 0, p[1], p[0] * p[3], p[2], 1, 0, 0, 0};
    return run_gemm(e, a, b, y, q);
  }
  case OP_PERMUTE:
    start(&lb, e, DLRT__K_swap01, p[0] * p[1], 0);
    lb.launch.item_cost = p[2];
    arg(&lb, e, y), arg(&lb, e, a);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]), dlrt__launch_i64(&lb, p[2]);
    break;
  case OP_BIAS_ROWS:
    start(&lb, e, DLRT__K_bias_rows, y->numel, 0);
    arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]);
    break;
  case OP_BIAS_CHANNELS:
    start(&lb, e, DLRT__K_bias_channels, p[0] * p[1], 0);
    lb.launch.item_cost = p[2];
    arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]), dlrt__launch_i64(&lb, p[2]);
    break;
  case OP_RELU_GRAD:
    start(&lb, e, DLRT__K_relu_grad, y->numel, 0);
    arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b);
    dlrt__launch_i64(&lb, y->numel);
    break;
  case OP_BROADCAST:
    start(&lb, e, DLRT__K_broadcast_scalar, y->numel, 0);
    arg(&lb, e, y), arg(&lb, e, a);
    dlrt__launch_f32(&lb, n->f[0]), dlrt__launch_i64(&lb, y->numel);
    break;
  case OP_SUM_COLS:
    start(&lb, e, DLRT__K_sum_cols, p[1], 0);
    arg(&lb, e, y), arg(&lb, e, a);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]), dlrt__launch_f32(&lb, 0.0f);
    break;
  case OP_SUM_CHANNELS:
    /* One image (CNHW): a row reduction, spread over the whole device. */
    if (p[0] == 1)
      return dlrt_reduce(e->stream, DLRT_REDUCE_SUM, DLRT_F32, p[1], p[2], buf_of(e, y), 0,
                         buf_of(e, a), 0);
    start(&lb, e, DLRT__K_sum_channels, p[1], 0);
    arg(&lb, e, y), arg(&lb, e, a);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]), dlrt__launch_i64(&lb, p[2]);
    break;
  case OP_IM2COL:
  case OP_COL2IM:
    /* Items: an image plane of one cols row (oh x ow) for im2col, an image
     * row (w) for col2im. */
    start(&lb, e, n->op == OP_IM2COL ? DLRT__K_im2col : DLRT__K_col2im,
          y->numel / (n->op == OP_IM2COL ? p[9] * p[10] : p[3]), 0);
    lb.launch.item_cost = n->op == OP_IM2COL ? p[9] * p[10] : p[3] * p[4] * p[5];
    arg(&lb, e, y), arg(&lb, e, a);
    for (int i = 0; i < 12; i++) dlrt__launch_i64(&lb, p[i]);
    break;
  case OP_MAXPOOL:
    start(&lb, e, DLRT__K_maxpool, p[0], 0); /* planes */
    lb.launch.item_cost = p[5] * p[6] * p[3] * p[3];
    arg(&lb, e, y), arg(&lb, e, n->out[1]), arg(&lb, e, a);
    for (int i = 0; i < 7; i++) dlrt__launch_i64(&lb, p[i]);
    break;
  case OP_MAXPOOL_GRAD:
    if (p[4] >= p[3]) {
      /* Disjoint windows: zero dx, then each window writes its maximum. */
      int rc = dlrt_elementwise(e->stream, DLRT_EW_FILL, DLRT_F32, y->numel, 0.0f, buf_of(e, y),
                                0, NULL, 0, NULL, 0);
      if (rc < 0) return rc;
      start(&lb, e, DLRT__K_maxpool_scatter, p[0] * p[5], 0); /* output rows */
      lb.launch.item_cost = p[6];
      arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b);
      dlrt__launch_i64(&lb, p[0] * p[5]), dlrt__launch_i64(&lb, p[6]);
      break;
    }
    start(&lb, e, DLRT__K_maxpool_grad, p[0] * p[1], 0); /* input rows */
    lb.launch.item_cost = p[2] * p[3];
    arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b);
    for (int i = 0; i < 7; i++) dlrt__launch_i64(&lb, p[i]);
    break;
  case OP_XENT: {
    /* Per-row losses and d logits in one pass, then the mean. */
    start(&lb, e, DLRT__K_softmax_xent, 0, p[0]);
    arg(&lb, e, a), arg(&lb, e, b), arg(&lb, e, n->out[1]), arg(&lb, e, n->out[2]);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]);
    dlrt__launch_f32(&lb, n->f[0]), dlrt__launch_f32(&lb, 1.0f / (float)p[0]);
    int rc = dlrt__launch_submit(e->stream, &lb);
    if (rc == DLRT_OK)
      rc = dlrt_reduce(e->stream, DLRT_REDUCE_SUM, DLRT_F32, 1, p[0], buf_of(e, y), 0,
                       buf_of(e, n->out[1]), 0);
    if (rc == DLRT_OK)
      rc = dlrt_elementwise(e->stream, DLRT_EW_SCALE, DLRT_F32, 1, 1.0f / (float)p[0],
                            buf_of(e, y), 0, buf_of(e, y), 0, NULL, 0);
    return rc;
  }
  case OP_SUB:
  case OP_DIV:
    start(&lb, e, n->op == OP_SUB ? DLRT__K_sub : DLRT__K_div, y->numel, 0);
    arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b);
    dlrt__launch_i64(&lb, y->numel);
    break;
  case OP_DIV_GRAD_Z:
    start(&lb, e, DLRT__K_div_grad_z, y->numel, 0);
    arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b), arg(&lb, e, n->in[2]);
    dlrt__launch_i64(&lb, y->numel);
    break;
  case OP_ACT:
    start(&lb, e, DLRT__K_activation, y->numel, 0);
    arg(&lb, e, y), arg(&lb, e, a);
    dlrt__launch_i64(&lb, y->numel), dlrt__launch_i64(&lb, p[0]);
    break;
  case OP_ACT_GRAD:
    start(&lb, e, DLRT__K_activation_grad, y->numel, 0);
    arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b);
    dlrt__launch_i64(&lb, y->numel), dlrt__launch_i64(&lb, p[0]);
    break;
  case OP_SOFTMAX:
  case OP_SOFTMAX_GRAD:
    start(&lb, e, n->op == OP_SOFTMAX ? DLRT__K_softmax : DLRT__K_softmax_grad, 0, p[0]);
    arg(&lb, e, y), arg(&lb, e, a);
    if (n->op == OP_SOFTMAX_GRAD) arg(&lb, e, b);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]);
    break;
  case OP_AVGPOOL:
  case OP_AVGPOOL_GRAD:
    start(&lb, e, n->op == OP_AVGPOOL ? DLRT__K_avgpool : DLRT__K_avgpool_grad, p[0], 0);
    lb.launch.item_cost = p[1] * p[2] * p[3];
    arg(&lb, e, y), arg(&lb, e, a);
    for (int i = 0; i < 7; i++) dlrt__launch_i64(&lb, p[i]);
    break;
  case OP_DROPOUT: {
    /* Evaluation passes values through; training draws a mask per step. */
    if (e->mode == DLRT_RUN_FORWARD || n->f[0] == 0.0f)
      return dlrt_elementwise(e->stream, DLRT_EW_SCALE, DLRT_F32, y->numel, 1.0f, buf_of(e, y), 0,
                              buf_of(e, a), 0, NULL, 0);
    uint64_t seed = e->seed ^ ((uint64_t)e->steps * 0x9e3779b97f4a7c15ULL) ^
                    ((uint64_t)p[0] * 0xbf58476d1ce4e5b9ULL);
    start(&lb, e, DLRT__K_dropout, y->numel, 0);
    arg(&lb, e, y), arg(&lb, e, a);
    dlrt__launch_i64(&lb, y->numel), dlrt__launch_i64(&lb, (int64_t)(seed & INT64_MAX));
    dlrt__launch_i64(&lb, (int64_t)((double)n->f[0] * 4294967296.0));
    dlrt__launch_f32(&lb, 1.0f / (1.0f - n->f[0]));
    break;
  }
  case OP_NORM:
    if (p[3] && e->mode == DLRT_RUN_FORWARD) {
      /* Batch norm when evaluating: the running statistics. */
      start(&lb, e, DLRT__K_norm_rows_eval, p[0], 0);
      lb.launch.item_cost = p[1];
      arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, n->in[3]), arg(&lb, e, n->in[4]);
      arg(&lb, e, b), arg(&lb, e, n->in[2]);
      dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]), dlrt__launch_f32(&lb, n->f[0]);
      break;
    }
    start(&lb, e, DLRT__K_norm_rows, 0, p[0]);
    arg(&lb, e, y), arg(&lb, e, n->out[1]), arg(&lb, e, n->out[2]), arg(&lb, e, a);
    arg(&lb, e, b), arg(&lb, e, n->in[2]);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]), dlrt__launch_f32(&lb, n->f[0]);
    dlrt__launch_i64(&lb, p[2]);
    break;
  case OP_NORM_GRAD:
    start(&lb, e, DLRT__K_norm_rows_grad, 0, p[0]);
    arg(&lb, e, y);
    for (int i = 0; i < 5; i++) arg(&lb, e, n->in[i]);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]), dlrt__launch_i64(&lb, p[2]);
    break;
  case OP_NORM_AFFINE_GRAD:
    start(&lb, e, DLRT__K_norm_affine_grad, p[2] ? p[0] : p[1], 0);
    lb.launch.item_cost = p[2] ? p[1] : p[0];
    arg(&lb, e, y), arg(&lb, e, n->out[1]);
    for (int i = 0; i < 4; i++) arg(&lb, e, n->in[i]);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]), dlrt__launch_i64(&lb, p[2]);
    break;
  case OP_BN_RUNNING:
    if (e->mode == DLRT_RUN_FORWARD) return DLRT_OK;
    start(&lb, e, DLRT__K_bn_running, p[0], 0);
    arg(&lb, e, n->in[2]), arg(&lb, e, n->in[3]), arg(&lb, e, a), arg(&lb, e, b);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]);
    dlrt__launch_f32(&lb, n->f[1]), dlrt__launch_f32(&lb, n->f[0]);
    break;
  case OP_CONCAT: {
    /* One copy per input into its stretch of the axis. */
    int axis = (int)p[3];
    int64_t start = 0;
    for (int i = 0; i < n->n_in; i++) {
      int64_t len = n->in[i]->shape[axis];
      start_axis_copy(&lb, e, y, n->in[i], p[0], p[1], p[2], len, start, 0, len);
      int rc = dlrt__launch_submit(e->stream, &lb);
      if (rc < 0) return rc;
      start += len;
    }
    return DLRT_OK;
  }
  case OP_SLICE:
    start_axis_copy(&lb, e, y, a, p[0], p[1], p[4], p[2], 0, p[3], p[4]);
    break;
  case OP_SLICE_GRAD: {
    int rc = dlrt_elementwise(e->stream, DLRT_EW_FILL, DLRT_F32, y->numel, 0.0f, buf_of(e, y), 0,
                              NULL, 0, NULL, 0);
    if (rc < 0) return rc;
    start_axis_copy(&lb, e, y, a, p[0], p[1], p[2], p[4], p[3], 0, p[4]);
    break;
  }
  case OP_AXIS_SUM:
  case OP_AXIS_EXPAND:
    if (n->op == OP_AXIS_SUM && p[2] == 1)
      /* Summing a contiguous last axis: the device-wide row reduction. */
      if (n->f[0] == 1.0f)
        return dlrt_reduce(e->stream, DLRT_REDUCE_SUM, DLRT_F32, p[0], p[1], buf_of(e, y), 0,
                           buf_of(e, a), 0);
    start(&lb, e, n->op == OP_AXIS_SUM ? DLRT__K_axis_sum : DLRT__K_axis_expand,
          n->op == OP_AXIS_SUM ? p[0] * p[2] : p[0] * p[1], 0);
    lb.launch.item_cost = n->op == OP_AXIS_SUM ? p[1] : p[2];
    arg(&lb, e, y), arg(&lb, e, a);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]), dlrt__launch_i64(&lb, p[2]);
    dlrt__launch_f32(&lb, n->f[0]);
    break;
  case OP_BCAST:
  case OP_BCAST_GRAD_B:
    start(&lb, e, n->op == OP_BCAST ? DLRT__K_bcast : DLRT__K_bcast_grad_b, p[0], 0);
    arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b);
    if (n->op == OP_BCAST_GRAD_B) arg(&lb, e, n->in[2]);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]), dlrt__launch_i64(&lb, p[2]);
    break;
  case OP_EMBED:
  case OP_EMBED_GRAD:
    start(&lb, e, n->op == OP_EMBED ? DLRT__K_embedding : DLRT__K_embedding_grad,
          n->op == OP_EMBED ? p[0] : p[1], 0);
    lb.launch.item_cost = n->op == OP_EMBED ? p[2] : p[0] * p[2];
    arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]), dlrt__launch_i64(&lb, p[2]);
    break;
  case OP_TRANSPOSE:
    return dlrt_transpose(e->stream, DLRT_F32, 1, p[0], p[1], buf_of(e, y), 0, buf_of(e, a), 0);
  case OP_SGD: {
    const dlrt_optimizer *o = &e->g->opt;
    start(&lb, e, DLRT__K_sgd_update, a->numel, 0);
    arg(&lb, e, a), arg(&lb, e, b), arg(&lb, e, n->in[2]);
    dlrt__launch_i64(&lb, a->numel), dlrt__launch_f32(&lb, e->lr);
    dlrt__launch_f32(&lb, o->momentum), dlrt__launch_f32(&lb, o->weight_decay);
    dlrt__launch_f32(&lb, e->grad_scale), dlrt__launch_i64(&lb, o->nesterov);
    dlrt__launch_i64(&lb, e->steps == 0);
    break;
  }
  case OP_ADAM: {
    const dlrt_optimizer *o = &e->g->opt;
    double t = (double)(e->steps + 1);
    float step_size = (float)(e->lr / (1.0 - pow(o->beta1, t)));
    float bias2 = (float)sqrt(1.0 - pow(o->beta2, t));
    start(&lb, e, DLRT__K_adam_update, a->numel, 0);
    arg(&lb, e, a), arg(&lb, e, b), arg(&lb, e, n->in[2]), arg(&lb, e, n->in[3]);
    dlrt__launch_i64(&lb, a->numel), dlrt__launch_f32(&lb, e->lr);
    dlrt__launch_f32(&lb, o->beta1), dlrt__launch_f32(&lb, o->beta2);
    dlrt__launch_f32(&lb, o->eps), dlrt__launch_f32(&lb, o->weight_decay);
    dlrt__launch_f32(&lb, step_size), dlrt__launch_f32(&lb, bias2),
    dlrt__launch_f32(&lb, e->grad_scale);
    dlrt__launch_i64(&lb, o->kind == DLRT_OPT_ADAMW);
    break;
  }
  default:
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "graph: no executor for %s",
                           dlrt__op_name(n->op));
  }
  return dlrt__launch_submit(e->stream, &lb);
}

/* The factor that brings the global L2 norm of the gradients down to
 * clip_norm (1 when already below), as torch.nn.utils.clip_grad_norm_:
 * max_norm / (norm + 1e-6). Squares go through a temporary, per-gradient sums
 * into a small vector, and one number comes back to the host. */
static int clip_factor(dlrt_exec_t *e, float *factor) {
  dlrt_graph_t *g = e->g;
  int64_t largest = 0, count = 0;
  for (int i = 0; i < g->n_tensors; i++) {
    dlrt_tensor_t *p = g->tensors[i];
    if (p->kind == TENSOR_PARAM && p->grad) {
      count++;
      if (p->numel > largest) largest = p->numel;
    }
  }
  *factor = 1.0f;
  if (count == 0) return DLRT_OK;
  dlrt_buffer_t *squares = NULL, *sums = NULL, *total = NULL;
  int rc = dlrt_buffer_alloc(e->dev, (size_t)largest * sizeof(float), e->stream, &squares);
  if (rc == DLRT_OK) rc = dlrt_buffer_alloc(e->dev, (size_t)count * sizeof(float), e->stream, &sums);
  if (rc == DLRT_OK) rc = dlrt_buffer_alloc(e->dev, sizeof(float), e->stream, &total);
  int64_t k = 0;
  for (int i = 0; i < g->n_tensors && rc == DLRT_OK; i++) {
    dlrt_tensor_t *p = g->tensors[i];
    if (p->kind != TENSOR_PARAM || !p->grad) continue;
    dlrt_buffer_t *gb = buf_of(e, p->grad);
    rc = dlrt_elementwise(e->stream, DLRT_EW_MUL, DLRT_F32, p->numel, 0, squares, 0, gb, 0, gb, 0);
    if (rc == DLRT_OK)
      rc = dlrt_reduce(e->stream, DLRT_REDUCE_SUM, DLRT_F32, 1, p->numel, sums,
                       (size_t)k++ * sizeof(float), squares, 0);
  }
  float sq = 0;
  if (rc == DLRT_OK) rc = dlrt_reduce(e->stream, DLRT_REDUCE_SUM, DLRT_F32, 1, count, total, 0, sums, 0);
  if (rc == DLRT_OK) rc = dlrt_copy_d2h(&sq, total, 0, sizeof sq, e->stream);
  if (rc == DLRT_OK) rc = dlrt_stream_synchronize(e->stream);
  dlrt_buffer_free(squares);
  dlrt_buffer_free(sums);
  dlrt_buffer_free(total);
  if (rc == DLRT_OK) {
    double norm = sqrt((double)sq), coef = e->clip_norm / (norm + 1e-6);
    if (coef < 1.0) *factor = (float)coef;
  }
  return rc;
}

int dlrt_exec_set_clip_norm(dlrt_exec_t *e, float max_norm) {
  DLRT__CHECK_ARG(e && max_norm >= 0, "executor is NULL or max norm %g < 0", max_norm);
  e->clip_norm = max_norm;
  return DLRT_OK;
}

int dlrt_exec_run(dlrt_exec_t *e, dlrt_run_mode mode) {
  DLRT__CHECK_ARG(e, "executor is NULL");
  DLRT__CHECK_ARG(mode == DLRT_RUN_FORWARD || mode == DLRT_RUN_TRAIN, "unknown run mode %d",
                  (int)mode);
  if (mode == DLRT_RUN_TRAIN && !e->g->backward_done)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_exec_run: a training run needs "
                           "dlrt_graph_backward first");
  dlrt_graph_t *g = e->g;
  schedule *s = &e->plans[mode];
  int rc = DLRT_OK, clipped = 0;
  e->mode = mode;
  e->grad_scale = 1.0f;
  for (int k = 0; k < s->n && rc == DLRT_OK; k++) {
    node *n = g->nodes[s->order[k]];
    if (n->phase == PHASE_UPDATE && !clipped) {
      clipped = 1;
      if (e->clip_norm > 0 && (rc = clip_factor(e, &e->grad_scale)) < 0) break;
    }
    for (int j = 0; j < n->n_out && rc == DLRT_OK; j++) {
      dlrt_tensor_t *t = n->out[j];
      if (t->owner != t || e->bufs[t->id]) continue;
      size_t bytes = tensor_bytes(t);
      rc = dlrt_buffer_alloc(e->dev, bytes ? bytes : 4, e->stream, &e->bufs[t->id]);
    }
    double t0 = e->profile ? now_ms() : 0;
    if (rc == DLRT_OK) rc = run_node(e, n);
    if (e->profile && rc == DLRT_OK) {
      rc = dlrt_stream_synchronize(e->stream);
      e->op_ms[n->op] += now_ms() - t0;
      e->op_calls[n->op]++;
    }
    if (rc < 0) {
      rc = dlrt__set_error(rc, "graph node %d (%s -> %s): %s", s->order[k],
                           dlrt__op_name(n->op), n->n_out ? n->out[0]->name : "update",
                           dlrt_last_error());
    }
    for (int *f = s->frees[k]; *f >= 0; f++) {
      dlrt_buffer_free(e->bufs[*f]);
      e->bufs[*f] = NULL;
    }
  }
  /* After a failure, intermediates not yet freed are released. */
  if (rc < 0)
    for (int i = 0; i < g->n_tensors; i++) {
      dlrt_tensor_t *t = g->tensors[i];
      if (t->owner == t && !persistent(t) && e->bufs[i]) {
        dlrt_buffer_free(e->bufs[i]);
        e->bufs[i] = NULL;
      }
    }
  if (rc == DLRT_OK && mode == DLRT_RUN_TRAIN && g->optimized) e->steps++;
  return rc;
}

/* ---------------------------------------------------------------- host I/O */

static int check_io(dlrt_exec_t *e, dlrt_tensor_t *t, const void *host, size_t bytes,
                    const char *what) {
  DLRT__CHECK_ARG(e && t && (host || bytes == 0), "%s: executor, tensor or buffer is NULL", what);
  if (t->id >= e->g->n_tensors || e->g->tensors[t->id] != t)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: tensor %s is not of this graph", what,
                           t->name);
  if (bytes != tensor_bytes(t))
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: tensor %s holds %zu bytes, not %zu", what,
                           t->name, tensor_bytes(t), bytes);
  if (!e->bufs[t->owner->id])
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

int dlrt_exec_write(dlrt_exec_t *e, dlrt_tensor_t *t, const void *src, size_t bytes) {
  int rc = check_io(e, t, src, bytes, "dlrt_exec_write");
  if (rc < 0) return rc;
  if (t->cnhw) {
    float *tmp = malloc(bytes ? bytes : 1);
    if (!tmp) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
    swap01(tmp, src, t->shape[0], t->shape[1], t->shape[2] * t->shape[3]);
    rc = dlrt_copy_h2d(buf_of(e, t), 0, tmp, bytes, e->stream);
    if (rc == DLRT_OK) rc = dlrt_stream_synchronize(e->stream);
    free(tmp);
    return rc;
  }
  /* Blocking on the executor's stream: ordered after queued runs, and the
   * caller may reuse `src` at once. */
  rc = dlrt_copy_h2d(buf_of(e, t), 0, src, bytes, e->stream);
  return rc == DLRT_OK ? dlrt_stream_synchronize(e->stream) : rc;
}

int dlrt_exec_read(dlrt_exec_t *e, dlrt_tensor_t *t, void *dst, size_t bytes) {
  int rc = check_io(e, t, dst, bytes, "dlrt_exec_read");
  if (rc < 0) return rc;
  if (t->cnhw) {
    /* Stored C x N x H x W: hand it out as N x C x H x W, as the API says. */
    float *tmp = malloc(bytes ? bytes : 1);
    if (!tmp) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
    rc = dlrt_copy_d2h(tmp, buf_of(e, t), 0, bytes, e->stream);
    if (rc == DLRT_OK) rc = dlrt_stream_synchronize(e->stream);
    if (rc == DLRT_OK) swap01(dst, tmp, t->shape[1], t->shape[0], t->shape[2] * t->shape[3]);
    free(tmp);
    return rc;
  }
  rc = dlrt_copy_d2h(dst, buf_of(e, t), 0, bytes, e->stream);
  return rc == DLRT_OK ? dlrt_stream_synchronize(e->stream) : rc;
}

int dlrt_exec_set_lr(dlrt_exec_t *e, float lr) {
  DLRT__CHECK_ARG(e && lr >= 0, "executor is NULL or lr %g < 0", lr);
  e->lr = lr;
  return DLRT_OK;
}

int dlrt_exec_info_get(dlrt_exec_t *e, dlrt_exec_info *out) {
  DLRT__CHECK_ARG(e && out, "executor or out is NULL");
  dlrt_mem_stats st;
  int rc = dlrt_mem_stats_get(e->dev, &st);
  if (rc < 0) return rc;
  memset(out, 0, sizeof *out);
  out->planned_peak_bytes = e->planned_peak;
  out->measured_peak_bytes = st.allocated.peak > e->peak_base ? st.allocated.peak - e->peak_base : 0;
  out->param_bytes = e->param_bytes;
  out->state_bytes = e->state_bytes;
  out->params = e->params;
  out->steps = e->steps;
  out->nodes = e->g->n_nodes;
  return DLRT_OK;
}

/* ---------------------------------------------------------------- export */

int dlrt_exec_export(dlrt_exec_t *e, int with_state, dlrt_host_tensor **tensors, int *n) {
  DLRT__CHECK_ARG(e && tensors && n, "executor, tensors or n is NULL");
  dlrt_graph_t *g = e->g;
  int count = with_state ? 1 : 0;
  for (int i = 0; i < g->n_tensors; i++)
    count += g->tensors[i]->kind == TENSOR_PARAM || g->tensors[i]->buffer ||
             (with_state && g->tensors[i]->kind == TENSOR_STATE);
  dlrt_host_tensor *out = calloc((size_t)(count ? count : 1), sizeof *out);
  if (!out) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  int k = 0, rc = DLRT_OK;
  for (int i = 0; i < g->n_tensors && rc == DLRT_OK; i++) {
    dlrt_tensor_t *t = g->tensors[i];
    if (!(t->kind == TENSOR_PARAM || t->buffer || (with_state && t->kind == TENSOR_STATE)))
      continue;
    dlrt_host_tensor *h = &out[k++];
    snprintf(h->name, sizeof h->name, "%s", t->name);
    h->dtype = DLRT_F32;
    h->ndim = t->ndim;
    memcpy(h->shape, t->shape, (size_t)t->ndim * sizeof t->shape[0]);
    h->bytes = tensor_bytes(t);
    h->data = malloc(h->bytes ? h->bytes : 1);
    rc = h->data ? dlrt_exec_read(e, t, h->data, h->bytes)
                 : dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  }
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
    dlrt_safetensors_free(out, k, NULL);
    return rc;
  }
  *tensors = out;
  *n = k;
  return DLRT_OK;
}

int dlrt_exec_import(dlrt_exec_t *e, const dlrt_host_tensor *tensors, int n) {
  DLRT__CHECK_ARG(e && (tensors || n == 0), "executor or tensors is NULL");
  dlrt_graph_t *g = e->g;
  /* Check everything first, so a mismatched checkpoint changes nothing. */
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < g->n_tensors; i++) {
      dlrt_tensor_t *t = g->tensors[i];
      if (t->kind != TENSOR_PARAM && t->kind != TENSOR_STATE) continue;
      const dlrt_host_tensor *h = NULL;
      for (int j = 0; j < n && !h; j++)
        if (strcmp(tensors[j].name, t->name) == 0) h = &tensors[j];
      if (!h) {
        if (t->kind == TENSOR_PARAM)
          return dlrt__set_error(DLRT_ERR_INVALID_ARG, "the checkpoint has no tensor %s: it "
                                 "was saved from another model", t->name);
        continue; /* no optimizer state saved: keep the fresh state */
      }
      if (h->dtype != DLRT_F32 || h->ndim != t->ndim || h->bytes != tensor_bytes(t) ||
          memcmp(h->shape, t->shape, (size_t)t->ndim * sizeof t->shape[0]) != 0)
        return dlrt__set_error(DLRT_ERR_INVALID_ARG, "the checkpoint's %s has another dtype "
                               "or shape than the model's: it was saved from another model",
                               t->name);
      if (pass == 1) {
        int rc = dlrt_exec_write(e, t, h->data, h->bytes);
        if (rc < 0) return rc;
      }
    }
  }
  for (int j = 0; j < n; j++)
    if (strcmp(tensors[j].name, "optimizer.step") == 0 && tensors[j].dtype == DLRT_I32 &&
        tensors[j].bytes == 4)
      e->steps = *(const int32_t *)tensors[j].data;
  return DLRT_OK;
}
