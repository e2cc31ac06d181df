/* dlbench-suites.c — the suites copy, gemm (beside the vendor libraries of
 * dlbench-vendor.c) and ops, and the table of every suite (train, spill and
 * loader are in dlbench-train.c). Each suite runs its cases on one device
 * and appends a row per case; the table at the end is all a new suite needs
 * besides its function. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dlbench-cases.h"
#include "dlbench-vendor.h"

#define KIB ((size_t)1024)
#define MIB (KIB * KIB)

/* ---------------------------------------------------------------- helpers */

/* Uniform values in [-1, 1) from a fixed LCG: the same inputs on every side. */
static void fill_random(float *v, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    v[i] = (float)(seed >> 8) / (float)(1u << 23) - 1.0f;
  }
}

/* "4KiB", "256MiB": sizes in case names. */
static void size_name(size_t bytes, char *out, size_t size) {
  if (bytes >= MIB && bytes % MIB == 0)
    snprintf(out, size, "%zuMiB", bytes / MIB);
  else if (bytes >= KIB && bytes % KIB == 0)
    snprintf(out, size, "%zuKiB", bytes / KIB);
  else
    snprintf(out, size, "%zuB", bytes);
}

static float half_to_float(uint16_t h) {
  int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v = exp == 0    ? ldexpf((float)man, -24) /* subnormal */
            : exp == 31 ? (man ? NAN : INFINITY)
                        : ldexpf((float)(man | 0x400), exp - 25);
  return h & 0x8000 ? -v : v;
}

/* Element i of a host array of dtype (F32, F16, BF16) as a float. */
static float element(const void *data, dlrt_dtype t, size_t i) {
  float f;
  if (t == DLRT_F32)
    return ((const float *)data)[i];
  uint16_t h = ((const uint16_t *)data)[i];
  if (t == DLRT_F16)
    return half_to_float(h);
  uint32_t bits = (uint32_t)h << 16; /* bf16 is the top half of a float */
  memcpy(&f, &bits, sizeof f);
  return f;
}

/* ---------------------------------------------------------------- measuring */

int run_dlrt_side(void *p, double *ms) {
  dlrt_side *s = p;
  int rc = bench_timer_begin(s->timer);
  if (rc == DLRT_OK) rc = s->queue(s->op);
  if (rc == DLRT_OK) rc = bench_timer_end(s->timer, ms);
  return rc;
}

int measure_case(bench_ctx *ctx, const case_id *id, bench_timer *timer, int (*queue)(void *),
                 void *op, const vendor_side *beside, bench_row **out) {
  dlrt_side ds = {timer, queue, op};
  bench_side side = {run_dlrt_side, &ds, bench_timer_kind(timer)};
  bench_samples sa = {0}, sb = {0};
  *out = NULL;
  dlrt_clear_error();
  int rc = bench_measure(ctx->opt, &side, beside ? beside->side : NULL, &sa,
                         beside ? &sb : NULL);
  if (rc == DLRT_OK) {
    bench_row *row = bench_row_new(ctx->res, id->suite, ctx->props.spec, id->name, id->unit,
                                   id->work);
    if (row)
      bench_row_fill(row, &sa, side.timing, beside ? &sb : NULL, beside ? beside->name : NULL,
                     beside ? beside->side->timing : NULL);
    else
      rc = bench_fail(ctx, id->suite, id->name, "out of host memory", DLRT_ERR_OOM);
    *out = row;
  } else if (beside && beside->error[0]) {
    fprintf(stderr, "dlbench: %s on %s, %s: %s: %s\n", id->suite, ctx->props.spec, id->name,
            beside->name, beside->error);
    ctx->failures++;
  } else if (rc == DLRT_ERR_UNSUPPORTED) { /* the device lacks it: a skip, not a failure */
    char reason[160];
    snprintf(reason, sizeof reason, "%.40s: %.110s", id->name, dlrt_last_error());
    rc = bench_skip_add(ctx->res, id->suite, ctx->props.spec, reason);
  } else {
    bench_fail(ctx, id->suite, id->name, "measuring", rc);
  }
  bench_samples_free(&sa);
  bench_samples_free(&sb);
  return rc;
}

int measure_dlrt(bench_ctx *ctx, const case_id *id, dlrt_stream_t *stream, int (*queue)(void *),
                 void *op, bench_row **out) {
  bench_timer timer;
  *out = NULL;
  int rc = bench_timer_init(&timer, ctx->dev, stream);
  if (rc != DLRT_OK)
    return bench_fail(ctx, id->suite, id->name, "cannot set up timing", rc);
  rc = measure_case(ctx, id, &timer, queue, op, NULL, out);
  bench_timer_free(&timer);
  return rc;
}

/* ---------------------------------------------------------------- copy */

typedef enum { H2D_PAGEABLE, H2D_PINNED, D2H_PAGEABLE, D2H_PINNED, D2D, COPY_KINDS } copy_kind;
static const char *const COPY_NAMES[COPY_KINDS] = {"h2d-pageable", "h2d-pinned",
                                                    "d2h-pageable", "d2h-pinned", "d2d"};

typedef struct {
  copy_kind kind;
  size_t bytes;
  dlrt_stream_t *stream;
  dlrt_buffer_t *src, *dst; /* device buffers */
  void *pageable, *pinned;  /* host buffers */
} copy_op;

static int queue_copy(void *p) {
  const copy_op *c = p;
  switch (c->kind) {
  case H2D_PAGEABLE: return dlrt_copy_h2d(c->dst, 0, c->pageable, c->bytes, c->stream);
  case H2D_PINNED: return dlrt_copy_h2d(c->dst, 0, c->pinned, c->bytes, c->stream);
  case D2H_PAGEABLE: return dlrt_copy_d2h(c->pageable, c->src, 0, c->bytes, c->stream);
  case D2H_PINNED: return dlrt_copy_d2h(c->pinned, c->src, 0, c->bytes, c->stream);
  default: return dlrt_copy_d2d(c->dst, 0, c->src, 0, c->bytes, c->stream);
  }
}

static void copy_name(copy_kind kind, size_t bytes, char *out, size_t size) {
  char text[32];
  size_name(bytes, text, sizeof text);
  snprintf(out, size, "%s/%s", COPY_NAMES[kind], text);
}

/* The five copies of one size. Host memory is written first so that page
 * faults of a first touch are not timed. */
static int copy_size(bench_ctx *ctx, dlrt_stream_t *stream, size_t bytes) {
  copy_op op = {.bytes = bytes, .stream = stream};
  char what[64], name[64], size[32];
  int rc = DLRT_OK, wanted = 0;
  for (int k = 0; k < COPY_KINDS; k++) {
    copy_name((copy_kind)k, bytes, name, sizeof name);
    wanted |= bench_matches(ctx, name);
  }
  if (!wanted) /* --filter: no buffers for nothing */
    return DLRT_OK;
  size_name(bytes, size, sizeof size);
  snprintf(what, sizeof what, "buffers of %s", size);
  if (!(op.pageable = malloc(bytes))) {
    rc = bench_fail(ctx, "copy", what, "out of host memory", DLRT_ERR_OOM);
    goto done;
  }
  memset(op.pageable, 1, bytes);
  if ((rc = dlrt_host_alloc(ctx->dev, bytes, &op.pinned)) != DLRT_OK ||
      (rc = dlrt_buffer_alloc(ctx->dev, bytes, stream, &op.src)) != DLRT_OK ||
      (rc = dlrt_buffer_alloc(ctx->dev, bytes, stream, &op.dst)) != DLRT_OK ||
      (rc = dlrt_memset(op.src, 0, 2, bytes, stream)) != DLRT_OK ||
      (rc = dlrt_stream_synchronize(stream)) != DLRT_OK) {
    bench_fail(ctx, "copy", what, "cannot allocate", rc);
    goto done;
  }
  memset(op.pinned, 1, bytes);
  for (int k = 0; k < COPY_KINDS; k++) {
    /* Device to device reads and writes each byte: it counts both, as
     * CUDA's bandwidthTest does, so that it compares with the ops suite. */
    case_id id = {"copy", "GB/s", "", (double)bytes * (k == D2D ? 2 : 1)};
    copy_name((copy_kind)k, bytes, id.name, sizeof id.name);
    if (!bench_wanted(ctx, "copy", id.name))
      continue;
    bench_row *row;
    op.kind = (copy_kind)k;
    if (measure_dlrt(ctx, &id, stream, queue_copy, &op, &row) == DLRT_OK && row) {
      double model = dlrt_link_seconds(ctx->dev, bytes); /* 0: no link model */
      row->bytes = (double)bytes;
      if (k == D2D)
        snprintf(row->note, sizeof row->note, "GB/s counts bytes read plus bytes written%s",
                 model > 0 ? "; within the device, not on the link" : "");
      else if (model > 0)
        row->model = (double)bytes / model / 1e9;
    }
  }
done:
  dlrt_buffer_free(op.src);
  dlrt_buffer_free(op.dst);
  if (op.pinned) dlrt_host_free(op.pinned);
  free(op.pageable);
  return rc;
}

static int suite_copy(bench_ctx *ctx) {
  /* 4 KiB to 256 MiB by fours; --quick: 4 KiB to 16 MiB by sixteens. */
  size_t last = ctx->opt->quick ? 16 * MIB : 256 * MIB, step = ctx->opt->quick ? 16 : 4;
  dlrt_stream_t *stream = NULL;
  int rc = dlrt_stream_create(ctx->dev, &stream);
  if (rc != DLRT_OK) {
    bench_fail(ctx, "copy", "setup", "cannot create a stream", rc);
    return STATUS_FAIL;
  }
  /* On a modelled link, sizes stop where one copy would take more than
   * this: a slow link (a preset on a CPU: a few MB/s) would take minutes. */
  const double link_cap_s = 0.05;
  for (size_t bytes = 4 * KIB; bytes <= last && rc == DLRT_OK; bytes *= step) {
    if (bytes > 4 * KIB && dlrt_link_seconds(ctx->dev, bytes) > link_cap_s) {
      char reason[160], size[32], name[64];
      int wanted = 0; /* a skip worth telling: --filter would have run one */
      for (size_t b = bytes; b <= last; b *= step)
        for (int k = 0; k < COPY_KINDS; k++) {
          copy_name((copy_kind)k, b, name, sizeof name);
          wanted |= k != D2D && bench_matches(ctx, name);
        }
      if (!wanted) break;
      size_name(bytes, size, sizeof size);
      snprintf(reason, sizeof reason, "sizes from %s: a copy would take %.2f s on the "
               "modelled link (the suite stops past %.0f ms)", size,
               dlrt_link_seconds(ctx->dev, bytes), link_cap_s * 1e3);
      if (bench_skip_add(ctx->res, "copy", ctx->props.spec, reason)) rc = DLRT_ERR_OOM;
      break;
    }
    rc = copy_size(ctx, stream, bytes);
  }
  dlrt_stream_destroy(stream);
  dlrt_mem_empty_cache(ctx->dev); /* leave the device's memory to the next suite */
  return rc == DLRT_OK ? 0 : STATUS_FAIL;
}

/* ---------------------------------------------------------------- gemm */

static const gemm_shape GEMM_SHAPES[] = {
    {256, 256, 256, 0, 0, EVERY_RUN},
    {512, 512, 512, 0, 0, FULL_RUNS},
    {1024, 1024, 1024, 0, 0, FULL_RUNS},
    /* A GPU needs more work than 1024^3 (about 2 GFLOP) to show its peak;
     * a CPU would take seconds a run. */
    {4096, 4096, 4096, 0, 0, DISCRETE_ONLY},
    /* A 784 -> 512 linear layer at batch 64 (the mlp's first; dlrt_linear
     * computes y = x W^T) and its backward GEMMs: dx = dy W, dW = dy^T x. */
    {64, 512, 784, 0, 1, EVERY_RUN},
    {64, 784, 512, 0, 0, FULL_RUNS},
    {512, 784, 64, 1, 0, EVERY_RUN},
};
static const dlrt_dtype GEMM_DTYPES[] = {DLRT_F32, DLRT_F16, DLRT_BF16};


static int queue_gemm(void *p) {
  gemm_case *g = p;
  return dlrt_gemm(g->stream, &g->desc, g->a, 0, g->b, 0, g->c, 0);
}

/* A device buffer of `dtype` holding `count` values from fill_random(seed). */
static int random_operand(dlrt_device_t *dev, dlrt_stream_t *stream, dlrt_dtype dtype,
                          size_t count, uint32_t seed, dlrt_buffer_t **out) {
  float *host = malloc(count * sizeof *host);
  dlrt_buffer_t *f32 = NULL;
  int rc = host ? DLRT_OK : DLRT_ERR_OOM;
  if (host) fill_random(host, count, seed);
  if (rc == DLRT_OK) rc = dlrt_buffer_alloc(dev, count * 4, stream, &f32);
  if (rc == DLRT_OK) rc = dlrt_copy_h2d(f32, 0, host, count * 4, stream);
  if (rc == DLRT_OK && dtype != DLRT_F32) {
    rc = dlrt_buffer_alloc(dev, count * dlrt_dtype_size(dtype), stream, out);
    if (rc == DLRT_OK) rc = dlrt_cast(stream, (int64_t)count, *out, 0, dtype, f32, 0, DLRT_F32);
  } else if (rc == DLRT_OK) {
    *out = f32;
    f32 = NULL;
  }
  if (rc == DLRT_OK) rc = dlrt_stream_synchronize(stream); /* host array still in use */
  dlrt_buffer_free(f32);
  free(host);
  return rc;
}

static int gemm_setup(bench_ctx *ctx, gemm_case *g) {
  const gemm_shape *s = &g->shape;
  g->desc = dlrt_gemm_desc_make(g->dtype, s->trans_a, s->trans_b, s->m, s->n, s->k, 1.0f, 0.0f);
  g->esize = dlrt_dtype_size(g->dtype);
  g->a_elems = (size_t)(s->m * s->k);
  g->b_elems = (size_t)(s->k * s->n);
  g->c_elems = (size_t)(s->m * s->n);
  g->a_host = malloc(g->a_elems * g->esize);
  g->b_host = malloc(g->b_elems * g->esize);
  g->c_dlrt = malloc(g->c_elems * g->esize);
  g->c_vendor = malloc(g->c_elems * g->esize);
  if (!g->a_host || !g->b_host || !g->c_dlrt || !g->c_vendor)
    return DLRT_ERR_OOM;
  int rc = random_operand(ctx->dev, g->stream, g->dtype, g->a_elems, 12345, &g->a);
  if (rc == DLRT_OK) rc = random_operand(ctx->dev, g->stream, g->dtype, g->b_elems, 54321, &g->b);
  if (rc == DLRT_OK) rc = dlrt_buffer_alloc(ctx->dev, g->c_elems * g->esize, g->stream, &g->c);
  if (rc == DLRT_OK) rc = dlrt_copy_d2h(g->a_host, g->a, 0, g->a_elems * g->esize, g->stream);
  if (rc == DLRT_OK) rc = dlrt_copy_d2h(g->b_host, g->b, 0, g->b_elems * g->esize, g->stream);
  if (rc == DLRT_OK) rc = dlrt_stream_synchronize(g->stream);
  return rc;
}

static void gemm_release(gemm_case *g) {
  dlrt_buffer_free(g->a);
  dlrt_buffer_free(g->b);
  dlrt_buffer_free(g->c);
  free(g->a_host);
  free(g->b_host);
  free(g->c_dlrt);
  free(g->c_vendor);
}

/* max |dlrt - vendor| / max |vendor| over C (infinite when either is not finite). */
static double gemm_difference(const gemm_case *g) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < g->c_elems; i++) {
    double d = element(g->c_dlrt, g->dtype, i), v = element(g->c_vendor, g->dtype, i);
    double diff = fabs(d - v);
    if (!isfinite(diff))
      return INFINITY;
    worst = diff > worst ? diff : worst;
    scale = fabs(v) > scale ? fabs(v) : scale;
  }
  return scale > 0 ? worst / scale : worst;
}

/* ------------------------------------------------ gemm cases */

/* dlrt's C and the vendor's, compared: the row's check_error, and a note
 * when they disagree beyond what the dtype's rounding explains. */
static int gemm_check(bench_ctx *ctx, gemm_case *g, vendor *v, bench_row *row) {
  static const double tolerance[] = {[DLRT_F32] = 1e-4, [DLRT_F16] = 2e-2, [DLRT_BF16] = 5e-2};
  int rc = dlrt_copy_d2h(g->c_dlrt, g->c, 0, g->c_elems * g->esize, g->stream);
  if (rc == DLRT_OK) rc = dlrt_stream_synchronize(g->stream);
  if (rc != DLRT_OK)
    return bench_fail(ctx, "gemm", row->name, "cannot read C", rc);
  if (v->ops->result(v, g) != 0) {
    snprintf(row->note, sizeof row->note, "%s: %.180s", v->ops->name, v->error);
    return DLRT_OK;
  }
  row->check_error = gemm_difference(g);
  if (!(row->check_error <= tolerance[g->dtype]))
    snprintf(row->note, sizeof row->note, "dlrt and %s disagree: max relative difference %.2g",
             v->ops->name, row->check_error);
  return DLRT_OK;
}

/* Sets the vendor up for the case: 1 if it takes part, else 0 with why not
 * in `why` (a dtype it lacks, or a failure, which is also reported). */
static int gemm_vendor_setup(bench_ctx *ctx, vendor *v, gemm_case *g, const char *name,
                             char *why, size_t size) {
  if (!v->ops->supports(v, g->dtype)) {
    snprintf(why, size, "%s", v->error);
    return 0;
  }
  if (v->ops->setup(v, g) != 0) {
    fprintf(stderr, "dlbench: gemm on %s, %s: %s: %s\n", ctx->props.spec, name, v->ops->name,
            v->error);
    ctx->failures++;
    snprintf(why, size, "%s: %.230s", v->ops->name, v->error);
    return 0;
  }
  v->error[0] = '\0'; /* from here on, a message there is a failure of its run */
  return 1;
}

/* The vendor library of the suite's device, opened for the first case that
 * runs (so that --filter leaving no GEMM costs no context or dlopen). */
typedef struct {
  vendor *v;
  int tried;
  char why[256]; /* why there is none */
} gemm_vendor;

static vendor *gemm_vendor_get(bench_ctx *ctx, gemm_vendor *gv) {
  if (!gv->tried) {
    gv->tried = 1;
    gv->v = vendor_open(&ctx->props, gv->why, sizeof gv->why);
    if (!gv->v && !ctx->opt->quiet)
      fprintf(stderr, "dlbench: gemm on %s without a vendor library: %s\n", ctx->props.spec,
              gv->why);
  }
  return gv->v;
}

static int gemm_one(bench_ctx *ctx, gemm_vendor *gv, gemm_case *g) {
  const gemm_shape *s = &g->shape;
  case_id id = {"gemm", "GFLOP/s", "", 2.0 * (double)s->m * (double)s->n * (double)s->k};
  snprintf(id.name, sizeof id.name, "%s/%lldx%lldx%lld/%c%c", dlrt_dtype_name(g->dtype),
           (long long)s->m, (long long)s->n, (long long)s->k, s->trans_a ? 'T' : 'N',
           s->trans_b ? 'T' : 'N');
  if (!bench_wanted(ctx, "gemm", id.name))
    return DLRT_OK;
  vendor *v = gemm_vendor_get(ctx, gv);
  bench_timer timer = {0};
  bench_row *row = NULL;
  char why[256];
  int use_vendor = 0, rc = gemm_setup(ctx, g);
  snprintf(why, sizeof why, "%s", gv->why);
  if (rc != DLRT_OK) {
    bench_fail(ctx, "gemm", id.name, "setup", rc);
    goto done;
  }
  if ((rc = bench_timer_init(&timer, ctx->dev, g->stream)) != DLRT_OK) {
    bench_fail(ctx, "gemm", id.name, "cannot set up timing", rc);
    goto done;
  }
  if (v)
    use_vendor = gemm_vendor_setup(ctx, v, g, id.name, why, sizeof why);
  bench_side vside = {v ? v->ops->run : NULL, v, v ? v->ops->timing : NULL};
  vendor_side vs = {&vside, v ? v->ops->name : NULL, v ? v->error : NULL};
  rc = measure_case(ctx, &id, &timer, queue_gemm, g, use_vendor ? &vs : NULL, &row);
  if (row && use_vendor)
    rc = gemm_check(ctx, g, v, row);
  else if (row) /* why the vendor figure is absent */
    snprintf(row->note, sizeof row->note, "%s", why);
done:
  if (v) v->ops->release(v);
  bench_timer_free(&timer);
  gemm_release(g);
  return rc;
}

static int gemm_shape_runs(const bench_ctx *ctx, const gemm_shape *s) {
  switch (s->when) {
  case EVERY_RUN: return 1;
  case FULL_RUNS: return !ctx->opt->quick;
  default: return !ctx->opt->quick && ctx->props.kind == DLRT_DEVICE_DISCRETE;
  }
}

static int suite_gemm(bench_ctx *ctx) {
  gemm_vendor gv = {0};
  dlrt_stream_t *stream = NULL;
  int rc = dlrt_stream_create(ctx->dev, &stream);
  if (rc != DLRT_OK) {
    bench_fail(ctx, "gemm", "setup", "cannot create a stream", rc);
    return STATUS_FAIL;
  }
  for (size_t t = 0; t < sizeof GEMM_DTYPES / sizeof *GEMM_DTYPES; t++)
    for (size_t s = 0; s < sizeof GEMM_SHAPES / sizeof *GEMM_SHAPES; s++) {
      if (!gemm_shape_runs(ctx, &GEMM_SHAPES[s]))
        continue;
      gemm_case g = {.dtype = GEMM_DTYPES[t], .shape = GEMM_SHAPES[s], .stream = stream};
      gemm_one(ctx, &gv, &g); /* a failed case is counted; the others still run */
    }
  if (gv.v) gv.v->ops->close(gv.v);
  dlrt_stream_destroy(stream);
  dlrt_mem_empty_cache(ctx->dev);
  return 0;
}

/* ---------------------------------------------------------------- ops */

/* One kernel over n elements of x, z into y (r: the reduction's result). */
typedef struct {
  dlrt_stream_t *stream;
  dlrt_dtype dtype;
  int64_t n;
  int is_reduce, op, rows; /* reductions: rows x n/rows */
  dlrt_buffer_t *x, *z, *y, *r;
} kernel_op;

static int queue_kernel(void *p) {
  const kernel_op *k = p;
  if (k->is_reduce)
    return dlrt_reduce(k->stream, (dlrt_reduce_op)k->op, k->dtype, k->rows, k->n / k->rows, k->r,
                       0, k->x, 0);
  /* alpha 0.5: axpy and scale stay finite however many runs there are. */
  return dlrt_elementwise(k->stream, (dlrt_ew_op)k->op, k->dtype, k->n, 0.5f, k->y, 0, k->x, 0,
                          k->z, 0);
}

static int queue_d2d(void *p) {
  const kernel_op *k = p;
  return dlrt_copy_d2d(k->y, 0, k->x, 0, (size_t)k->n * dlrt_dtype_size(k->dtype), k->stream);
}

/* Bytes a kernel reads and writes per run. */
static double kernel_traffic(const kernel_op *k) {
  double e = (double)dlrt_dtype_size(k->dtype), n = (double)k->n;
  if (k->is_reduce)
    return e * (n + k->rows);
  switch ((dlrt_ew_op)k->op) {
  case DLRT_EW_FILL: return e * n;
  case DLRT_EW_SCALE:
  case DLRT_EW_RELU: return 2 * e * n;
  default: return 3 * e * n; /* add, mul, axpy: two reads, one write */
  }
}

/* What the kernel cases of one dtype share, set up for the first case that
 * runs (so that --filter leaving none costs nothing): the arrays, filled,
 * and the yardstick, the device-to-device copy of an array. */
typedef struct {
  int prepared, failed;
  double copy_gbs; /* NAN when the copy could not be measured */
} kernel_prep;

static int kernel_buffers(bench_ctx *ctx, kernel_op *k) {
  size_t bytes = (size_t)k->n * 4; /* the widest dtype; f16 uses half of it */
  if (k->x) /* allocated for an earlier dtype */
    return DLRT_OK;
  int rc = dlrt_buffer_alloc(ctx->dev, bytes, k->stream, &k->x);
  if (rc == DLRT_OK) rc = dlrt_buffer_alloc(ctx->dev, bytes, k->stream, &k->z);
  if (rc == DLRT_OK) rc = dlrt_buffer_alloc(ctx->dev, bytes, k->stream, &k->y);
  if (rc == DLRT_OK) rc = dlrt_buffer_alloc(ctx->dev, bytes / 1024 + 4, k->stream, &k->r);
  return rc;
}

static int kernel_fill(kernel_op *k, dlrt_buffer_t *buf, float value) {
  return dlrt_elementwise(k->stream, DLRT_EW_FILL, k->dtype, k->n, value, buf, 0, NULL, 0, NULL,
                          0);
}

/* 0, or -1 when the arrays could not be set up (reported once). */
static int kernel_prepare(bench_ctx *ctx, kernel_op *k, kernel_prep *p) {
  char size[32];
  size_t bytes = (size_t)k->n * dlrt_dtype_size(k->dtype);
  case_id id = {"ops", "GB/s", "", 2.0 * (double)bytes}; /* read and written */
  bench_row *row = NULL;
  int rc;
  if (p->prepared)
    return p->failed ? -1 : 0;
  p->prepared = 1;
  p->copy_gbs = NAN;
  size_name(bytes, size, sizeof size);
  snprintf(id.name, sizeof id.name, "copy-d2d/%s/%s", dlrt_dtype_name(k->dtype), size);
  if ((rc = kernel_buffers(ctx, k)) != DLRT_OK || (rc = kernel_fill(k, k->x, 1.5f)) != DLRT_OK ||
      (rc = kernel_fill(k, k->z, -0.5f)) != DLRT_OK || (rc = kernel_fill(k, k->y, 0)) != DLRT_OK) {
    bench_fail(ctx, "ops", id.name, "cannot set up the arrays", rc);
    p->failed = 1;
    return -1;
  }
  if (!ctx->opt->quiet)
    fprintf(stderr, "dlbench: %-5s %-9s %s\n", "ops", ctx->props.spec, id.name);
  measure_dlrt(ctx, &id, k->stream, queue_d2d, k, &row);
  if (row) {
    row->bytes = (double)bytes;
    row->copy_fraction = 1.0;
    snprintf(row->note, sizeof row->note, "the yardstick: GB/s counts bytes read plus written");
    p->copy_gbs = row->median;
  }
  return 0;
}

static int kernel_case(bench_ctx *ctx, kernel_op *k, const char *what, kernel_prep *p) {
  char size[32];
  case_id id = {"ops", "GB/s", "", kernel_traffic(k)};
  size_name((size_t)k->n * dlrt_dtype_size(k->dtype), size, sizeof size);
  snprintf(id.name, sizeof id.name, "%s/%s/%s", what, dlrt_dtype_name(k->dtype), size);
  if (!bench_wanted(ctx, "ops", id.name) || kernel_prepare(ctx, k, p) != 0)
    return DLRT_OK;
  bench_row *row;
  int rc = measure_dlrt(ctx, &id, k->stream, queue_kernel, k, &row);
  if (row) {
    row->bytes = (double)k->n * (double)dlrt_dtype_size(k->dtype);
    row->copy_fraction = row->median / p->copy_gbs;
    if (isnan(p->copy_gbs))
      snprintf(row->note, sizeof row->note, "no d2d copy figure to compare with");
  }
  return rc;
}

static void kernels_dtype(bench_ctx *ctx, kernel_op *k) {
  static const dlrt_ew_op ew[] = {DLRT_EW_ADD, DLRT_EW_MUL, DLRT_EW_AXPY, DLRT_EW_SCALE,
                                  DLRT_EW_RELU};
  kernel_prep p = {0};
  k->is_reduce = 0;
  for (size_t i = 0; i < sizeof ew / sizeof *ew; i++) {
    k->op = ew[i];
    kernel_case(ctx, k, dlrt_ew_op_name(ew[i]), &p);
  }
  /* Whole-array reductions, and rows of 1024 (a softmax or a loss over rows). */
  k->is_reduce = 1;
  for (int op = 0; op < DLRT_REDUCE_COUNT_; op++) {
    char what[48];
    k->op = op;
    k->rows = 1;
    snprintf(what, sizeof what, "reduce-%s", dlrt_reduce_op_name((dlrt_reduce_op)op));
    kernel_case(ctx, k, what, &p);
  }
  k->op = DLRT_REDUCE_SUM;
  k->rows = (int)(k->n / 1024);
  kernel_case(ctx, k, "reduce-sum-rows1024", &p);
}

/* conv2d on the shape of the cnn model's second convolution: batch x 32 x
 * 14 x 14 -> 64 channels, 3 x 3, padding 1; loss = sum of the output. */
typedef struct {
  dlrt_graph_t *g;
  dlrt_exec_t *e;
  dlrt_run_mode mode;
  int64_t n, c, h, w, o, k;
} conv_op;

static int queue_conv(void *p) {
  const conv_op *c = p;
  return dlrt_exec_run(c->e, c->mode);
}

static int conv_build(bench_ctx *ctx, conv_op *c) {
  int64_t xs[4] = {c->n, c->c, c->h, c->w}, ws[4] = {c->o, c->c, c->k, c->k}, bs[1] = {c->o};
  int64_t fan_in = c->c * c->k * c->k;
  int rc = dlrt_graph_create(&c->g);
  if (rc != DLRT_OK)
    return rc;
  dlrt_tensor_t *x = dlrt_input(c->g, "x", DLRT_F32, 4, xs);
  dlrt_tensor_t *w = dlrt_param(c->g, "w", 4, ws, DLRT_INIT_FAN_IN_UNIFORM, fan_in, c->o);
  dlrt_tensor_t *b = dlrt_param(c->g, "b", 1, bs, DLRT_INIT_FAN_IN_UNIFORM, fan_in, c->o);
  dlrt_tensor_t *loss = dlrt_sum(c->g, dlrt_conv2d(c->g, x, w, b, 1, (int)(c->k / 2), 1));
  if ((rc = dlrt_graph_status(c->g)) != DLRT_OK ||
      (rc = dlrt_graph_backward(c->g, loss)) != DLRT_OK ||
      (rc = dlrt_exec_create(c->g, ctx->dev, 1, &c->e)) != DLRT_OK)
    return rc;
  size_t count = (size_t)(c->n * c->c * c->h * c->w);
  float *host = malloc(count * sizeof *host);
  if (!host)
    return DLRT_ERR_OOM;
  fill_random(host, count, 777);
  rc = dlrt_exec_write(c->e, x, host, count * sizeof *host);
  free(host);
  return rc;
}

static void conv_name(const conv_op *c, int train, char *out, size_t size) {
  snprintf(out, size, "%s/%lldx%lldx%lldx%lld/o%lldk%lldp%lld",
           train ? "conv2d-train" : "conv2d-fwd", (long long)c->n, (long long)c->c,
           (long long)c->h, (long long)c->w, (long long)c->o, (long long)c->k,
           (long long)(c->k / 2));
}

static void suite_conv(bench_ctx *ctx) {
  conv_op c = {.n = ctx->opt->quick ? 8 : 32, .c = 32, .h = 14, .w = 14, .o = 64, .k = 3};
  /* Forward FLOP: 2 per multiply-add, output N x O x H x W (padding keeps
   * the size), each C x K x K deep; a training run adds the gradients of the
   * input and of the weights, as many again each. */
  double forward = 2.0 * (double)(c.n * c.o * c.h * c.w) * (double)(c.c * c.k * c.k);
  case_id ids[2] = {{"ops", "GFLOP/s", "", forward}, {"ops", "GFLOP/s", "", 3 * forward}};
  conv_name(&c, 0, ids[0].name, sizeof ids[0].name);
  conv_name(&c, 1, ids[1].name, sizeof ids[1].name);
  if (!bench_matches(ctx, ids[0].name) && !bench_matches(ctx, ids[1].name))
    return;
  int rc = conv_build(ctx, &c);
  if (rc != DLRT_OK)
    bench_fail(ctx, "ops", "conv2d", "cannot build the graph", rc);
  for (int m = 0; m < 2 && rc == DLRT_OK; m++) {
    bench_row *row;
    if (!bench_wanted(ctx, "ops", ids[m].name))
      continue;
    c.mode = m ? DLRT_RUN_TRAIN : DLRT_RUN_FORWARD;
    /* Timed by events on the executor's own stream, where its runs queue. */
    measure_dlrt(ctx, &ids[m], dlrt_exec_stream(c.e), queue_conv, &c, &row);
  }
  dlrt_exec_destroy(c.e);
  dlrt_graph_destroy(c.g);
}

static int suite_ops(bench_ctx *ctx) {
  static const dlrt_dtype dtypes[] = {DLRT_F32, DLRT_F16};
  /* 64 MiB of fp32 per array (16 Mi elements): past every cache, a GPU's L2
   * included (the three arrays of an add are 192 MiB); --quick: 4 MiB. */
  kernel_op k = {.n = ctx->opt->quick ? (int64_t)1 << 20 : (int64_t)1 << 24};
  int rc = dlrt_stream_create(ctx->dev, &k.stream);
  if (rc != DLRT_OK) {
    bench_fail(ctx, "ops", "setup", "cannot create a stream", rc);
    return STATUS_FAIL;
  }
  for (size_t t = 0; t < sizeof dtypes / sizeof *dtypes; t++) {
    k.dtype = dtypes[t];
    kernels_dtype(ctx, &k); /* a failed case is counted; the others still run */
  }
  dlrt_buffer_free(k.x);
  dlrt_buffer_free(k.z);
  dlrt_buffer_free(k.y);
  dlrt_buffer_free(k.r);
  dlrt_stream_destroy(k.stream);
  suite_conv(ctx);
  dlrt_mem_empty_cache(ctx->dev);
  return 0;
}

/* ---------------------------------------------------------------- the table */

const bench_suite bench_suites[] = {
    {"copy", suite_copy, "host<->device and device<->device copies (GB/s)"},
    {"gemm", suite_gemm, "GEMM beside the vendor library (GFLOP/s)"},
    {"ops", suite_ops, "elementwise, reduction and conv2d kernels"},
    {"train", suite_train, "training steps of the mlp and cnn models"},
    {"spill", suite_spill, "training under a device budget, spilling to the host"},
    {"loader", suite_loader, "the data loader's images/s against its workers"},
};
const int bench_suite_count = (int)(sizeof bench_suites / sizeof *bench_suites);
