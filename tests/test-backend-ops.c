/*
 * test-backend-ops.c — cross-backend conformance of the compute ops, in the spirit of
 * ggml's tests/test-backend-ops.cpp: every op of dlrt.h's kernels (elementwise, cast,
 * reduce, transpose) and dlrt_gemm, every storage type, shapes from empty through odd
 * sizes (not multiples of 32 or 256) to ~1M elements, at element-aligned byte offsets,
 * on every device, against a host reference computed from the same quantized inputs.
 * Then the bad arguments of the new ops. Inputs come from a fixed-seed xorshift.
 *
 * Error measure, printed for every case and device:
 *   err = max |out - ref| / max(max |ref|, TINY)
 * over the elements whose exact result is finite (non-finite ones must match exactly),
 * ref computed in double. Pass criteria, and why:
 *  - cast, transpose, fill: exact. The contract rounds one value once (to nearest even),
 *    so there is one right answer. NaN is compared as NaN-ness (the payload is not
 *    specified), except by transpose, which moves bits and must keep them all.
 *  - scale, axpy, add, mul, relu: exact against the host replaying the contract
 *    ("arithmetic is fp32, stores round to nearest even") in float on the dequantized
 *    inputs. alpha * x + y may be contracted into an FMA (OpenCL C allows it by
 *    default), so for AXPY the fused and the unfused result are both accepted, each
 *    exactly; a diag counts the fused ones. Also err vs the double reference <= 1e-6
 *    (f32), 1e-3 (f16), 8e-3 (bf16): the true bound is half an ulp of the output type
 *    relative to |ref| (2^-24 = 6e-8, 2^-11 = 4.9e-4, 2^-8 = 3.9e-3) plus at most two
 *    fp32 roundings (1.2e-7); these allow about one output ulp, so they guard the
 *    reference more than the device.
 *  - sum reductions and GEMM: err <= 2^-(p+1) + (2 sqrt(k) + 2) 2^-24 S / max |ref|,
 *    p the output type's fraction bits, k the terms of an output, S the largest sum of
 *    |terms| of an output: the output's rounding plus fp32 accumulation, whose error
 *    grows as sqrt(k) eps S for rounding errors of random sign and is at most
 *    depth * eps * S in any order; the library's blocked order has depth below
 *    2 sqrt(k) + 2 for these shapes.
 *  - max reductions: exact (the max of quantized values is one of them).
 *  - reductions across devices: bitwise identical to the CPU backend's result (NaN as
 *    NaN-ness), since dlrt_reduce fixes the order of operations by shape.
 * Every case also checks that the bytes of y's buffer outside the output range keep
 * their guard pattern. A device without a kernel reports SKIP with the library's
 * reason. Points: computed at run time (done_testing).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "tap.h"

#define GUARD 64      /* pattern bytes after each operand */
#define TINY 1e-30    /* floor of max |ref| in the normalised error */
#define EPS32 0x1p-24 /* unit roundoff of fp32 */
#define MAX_DEVICES 16
#define ALPHA (-1.3f) /* f16 and bf16 round it: fill rounds */

/* ---------------------------------------------------------------- host formats */

/* An IEEE-style binary format of `fbits` fraction and `ebits` exponent bits. Written
 * independently of the library: rounding goes through double. */
typedef struct { int fbits, ebits; } fp_format;
static const fp_format FMT_F16 = {10, 5}, FMT_BF16 = {7, 8};

static int fmt_bias(fp_format f) { return (1 << (f.ebits - 1)) - 1; }

/* v rounded to the format, ties to even, overflow to +-inf. Dividing by the quantum of
 * v's binade (of the lowest normal binade for subnormals) is exact, so nearbyint (to
 * nearest even in the default rounding mode) does the rounding. */
static double fmt_round(fp_format f, double v) {
  if (!isfinite(v) || v == 0.0)
    return v;
  int e = ilogb(v), emin = 1 - fmt_bias(f);
  double q = ldexp(1.0, (e < emin ? emin : e) - f.fbits), r = nearbyint(v / q) * q;
  return fabs(r) > ldexp(2.0 - ldexp(1.0, -f.fbits), fmt_bias(f)) ? copysign(INFINITY, v) : r;
}

/* Bits of r, a value of the format (NaN: a quiet NaN). */
static uint16_t fmt_encode(fp_format f, double r) {
  uint32_t sign = signbit(r) ? 0x8000u : 0, inf = ((1u << f.ebits) - 1) << f.fbits;
  double a = fabs(r);
  if (isnan(r))
    return (uint16_t)(inf | 1u << (f.fbits - 1));
  if (isinf(r) || a == 0.0)
    return (uint16_t)(sign | (isinf(r) ? inf : 0));
  int e = ilogb(a), emin = 1 - fmt_bias(f);
  if (e < emin) /* subnormal: a = m * 2^(emin - fbits) */
    return (uint16_t)(sign | (uint32_t)ldexp(a, f.fbits - emin));
  uint32_t m = (uint32_t)ldexp(a, f.fbits - e) & ((1u << f.fbits) - 1);
  return (uint16_t)(sign | (uint32_t)(e + fmt_bias(f)) << f.fbits | m);
}

static double fmt_decode(fp_format f, uint16_t h) {
  uint32_t emax = (1u << f.ebits) - 1, e = (h >> f.fbits) & emax, m = h & ((1u << f.fbits) - 1);
  int scale = (e ? (int)e : 1) - fmt_bias(f) - f.fbits;
  double a = e == emax ? (m ? NAN : INFINITY) : ldexp(e ? m + (1u << f.fbits) : m, scale);
  return h & 0x8000u ? -a : a;
}

/* Every f16 and bf16 value by bit pattern, filled by main(): decoding is in every
 * inner loop. */
static double f16_values[65536], bf16_values[65536];

static size_t esize(dlrt_dtype t) { return t == DLRT_F16 || t == DLRT_BF16 ? 2 : 4; }
static fp_format fmt_of(dlrt_dtype t) { return t == DLRT_F16 ? FMT_F16 : FMT_BF16; }
static int fbits_of(dlrt_dtype t) { return t == DLRT_F16 ? 10 : t == DLRT_BF16 ? 7 : 23; }

static uint32_t bits_at(dlrt_dtype t, const uint8_t *p, size_t i) {
  uint32_t u = 0;
  uint16_t h;
  if (esize(t) == 4)
    return memcpy(&u, p + 4 * i, 4), u;
  return memcpy(&h, p + 2 * i, 2), h;
}

/* Element i of an array of t, as a double. */
static double get(dlrt_dtype t, const uint8_t *p, size_t i) {
  uint32_t u = bits_at(t, p, i);
  float f;
  if (t == DLRT_F32)
    return memcpy(&f, &u, 4), f;
  if (t == DLRT_I32)
    return (int32_t)u;
  return t == DLRT_F16 ? f16_values[u] : bf16_values[u];
}

/* Stores v as element i of an array of t (f32, f16, bf16), rounded once to nearest even. */
static void put(dlrt_dtype t, uint8_t *p, size_t i, double v) {
  float f = (float)v;
  uint16_t h = t == DLRT_F32 ? 0 : fmt_encode(fmt_of(t), fmt_round(fmt_of(t), v));
  if (t == DLRT_F32)
    memcpy(p + 4 * i, &f, 4);
  else
    memcpy(p + 2 * i, &h, 2);
}

/* v rounded to t: the fp32 value a device loads back. */
static float quant(dlrt_dtype t, float v) {
  return t == DLRT_F32 ? v : (float)fmt_round(fmt_of(t), v);
}

/* ---------------------------------------------------------------- inputs and images */

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint64_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}
static float uniform(float lo, float hi) {
  return lo + (hi - lo) * ((float)(rng() >> 40) * 0x1p-24f);
}
/* Mixed signs and binades ([1/8, 4)) with full fp32 significands, so that sums and
 * products of two of them round. */
static float spread(void) {
  float m = ldexpf(uniform(1.0f, 2.0f), (int)(rng() % 5) - 3);
  return rng() & 1 ? -m : m;
}

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p)
    bail_out("out of host memory (%zu bytes)", bytes);
  return p;
}

/* Host image of a whole device buffer: `n` elements of t from element `off`, with a
 * pattern before them and GUARD bytes of it after. */
typedef struct { uint8_t *bytes; size_t size, off; /* bytes */ } image;

static image image_new(dlrt_dtype t, size_t n, size_t off, uint32_t seed) {
  image im = {NULL, (off + n) * esize(t) + GUARD, off * esize(t)};
  im.bytes = xmalloc(im.size);
  fill_pattern(im.bytes, im.size, seed);
  return im;
}
#define DATA(im) ((im).bytes + (im).off)

/* ---------------------------------------------------------------- devices */

typedef struct { dlrt_device_t *dev; dlrt_stream_t *stream; const char *spec; } device;
static device devs[MAX_DEVICES];
static int n_devs, cpu_dev = -1;

/* Largest error per (op, dtype of y, device), printed at the end. */
static struct {
  const char *op;
  dlrt_dtype t;
  int dev;
  double err;
} stats[256];
static int n_stats;

static void record(const char *op, dlrt_dtype t, int dev, double err) {
  int i = 0;
  while (i < n_stats && !(stats[i].t == t && stats[i].dev == dev && !strcmp(stats[i].op, op)))
    i++;
  if (i == n_stats && n_stats < (int)(sizeof stats / sizeof stats[0])) {
    stats[n_stats].op = op, stats[n_stats].t = t, stats[n_stats].dev = dev;
    stats[n_stats++].err = err;
  } else if (i < n_stats && !(err <= stats[i].err)) {
    stats[i].err = err;
  }
}

/* ---------------------------------------------------------------- one case */

/* The one API call a case makes. */
typedef struct {
  enum { EW, CAST, REDUCE, TRANSPOSE, GEMM } kind;
  int op;                    /* dlrt_ew_op or dlrt_reduce_op */
  dlrt_dtype t, xt;          /* of y; of x for a cast */
  int64_t batch, rows, cols; /* n of elementwise and cast: cols */
  dlrt_gemm_desc gemm;
} op_call;

/* y is the output, in[0..1] the inputs (NULL when unused); offsets in bytes. */
static int launch(dlrt_stream_t *s, const op_call *o, dlrt_buffer_t *y, size_t y_off,
                  dlrt_buffer_t *const *in, const size_t *io) {
  switch (o->kind) {
  case EW:
    return dlrt_elementwise(s, (dlrt_ew_op)o->op, o->t, o->cols, ALPHA, y, y_off, in[0], io[0],
                            in[1], io[1]);
  case CAST: return dlrt_cast(s, o->cols, y, y_off, o->t, in[0], io[0], o->xt);
  case REDUCE:
    return dlrt_reduce(s, (dlrt_reduce_op)o->op, o->t, o->rows, o->cols, y, y_off, in[0], io[0]);
  case TRANSPOSE:
    return dlrt_transpose(s, o->t, o->batch, o->rows, o->cols, y, y_off, in[0], io[0]);
  default: return dlrt_gemm(s, &o->gemm, in[0], io[0], in[1], io[1], y, y_off);
  }
}

typedef enum {
  BITS,         /* bit for bit */
  BITS_ANY_NAN, /* bit for bit; a NaN matches any NaN */
  VALUE,        /* equal as numbers (0 == -0), or both NaN */
  TOLERANCE     /* err <= tol only */
} match;

typedef struct {
  char what[160];        /* op, dtype, shape, offsets */
  const char *key;       /* op in the summary */
  dlrt_dtype t;          /* of y */
  size_t n;              /* elements of y the op writes */
  op_call call;
  image y, in[2];        /* in[i].bytes NULL when unused */
  uint8_t *want, *want2; /* exact results (want2: an alternative), or NULL */
  double *ref;           /* double reference, n elements */
  match how;
  double tol;
  int cross; /* every device must give the CPU backend's result */
} test_case;

static int same(dlrt_dtype t, const uint8_t *a, const uint8_t *b, size_t i, match how) {
  if (how != BITS && t != DLRT_I32) {
    double x = get(t, a, i), y = get(t, b, i);
    if (isnan(x) || isnan(y))
      return isnan(x) && isnan(y);
    if (how == VALUE)
      return x == y;
  }
  return bits_at(t, a, i) == bits_at(t, b, i);
}

/* Uploads the operands to `d`, runs the op and reads y's whole buffer back into `got`.
 * 1 when it did; 0 after one SKIP or failed point. */
static int run_on(const device *d, const test_case *c, uint8_t *got) {
  dlrt_buffer_t *y = upload_buffer(d->dev, c->y.bytes, c->y.size), *in[2] = {NULL, NULL};
  size_t in_off[2] = {c->in[0].off, c->in[1].off};
  int done = 0, missing = !y;
  for (int i = 0; i < 2; i++)
    if (c->in[i].bytes && !(in[i] = upload_buffer(d->dev, c->in[i].bytes, c->in[i].size)))
      missing = 1;
  if (missing) {
    ok(0, "%s: %s: upload operands: %s", d->spec, c->what, dlrt_last_error());
  } else if (tap_check_op(launch(d->stream, &c->call, y, c->y.off, in, in_off), "%s: %s",
                          d->spec, c->what)) {
    int status = dlrt_stream_synchronize(d->stream);
    if (status == DLRT_OK)
      status = dlrt_copy_d2h(got, y, 0, c->y.size, NULL);
    if (!(done = status == DLRT_OK))
      tap_check(status, "%s: %s: run and read back", d->spec, c->what);
  }
  dlrt_buffer_free(y);
  dlrt_buffer_free(in[0]);
  dlrt_buffer_free(in[1]);
  return done;
}

/* One point: device d's output against the case's expectations. */
static void evaluate(const test_case *c, int d, const uint8_t *got) {
  const uint8_t *out = got + c->y.off;
  const char *spec = devs[d].spec;
  size_t wrong = 0, first = 0, alternative = 0, worst = 0, end = c->y.off + c->n * esize(c->t);
  double err = 0.0, largest = 0.0;
  for (size_t i = 0; i < c->n; i++) {
    if (c->want && !same(c->t, out, c->want, i, c->how)) {
      if (c->want2 && same(c->t, out, c->want2, i, c->how))
        alternative++;
      else if (wrong++ == 0)
        first = i;
    }
    double r = c->ref[i], g = get(c->t, out, i), e = fabs(g - r);
    if (!isfinite(r) || (c->want && !isfinite(get(c->t, c->want, i)))) {
      if (!c->want && !(isnan(r) ? isnan(g) : g == r))
        err = INFINITY, worst = i; /* no exact result checks this element */
      continue;
    }
    largest = fmax(largest, fabs(r));
    if (!(e <= err))
      err = isnan(e) ? INFINITY : e, worst = i;
  }
  err /= fmax(largest, TINY);
  int kept = memcmp(got, c->y.bytes, c->y.off) == 0 &&
             memcmp(got + end, c->y.bytes + end, c->y.size - end) == 0;
  diag("%s: %s: err %.3g (tol %.3g)%s", spec, c->what, err, c->tol,
       c->want && !wrong ? ", exact" : "");
  if (!(err <= c->tol))
    diag("%s: %s: FAILED: worst [%zu]: got %.9g, reference %.9g, max |reference| %.9g", spec,
         c->what, worst, get(c->t, out, worst), c->ref[worst], largest);
  if (alternative)
    diag("%s: %s: %zu of %zu elements match only the fused (FMA) result", spec, c->what,
         alternative, c->n);
  if (wrong)
    diag("%s: %s: FAILED: %zu of %zu elements differ from the exact result; first [%zu]: got "
         "%.9g (0x%x), want %.9g (0x%x)",
         spec, c->what, wrong, c->n, first, get(c->t, out, first), bits_at(c->t, out, first),
         get(c->t, c->want, first), bits_at(c->t, c->want, first));
  if (!kept)
    diag("%s: %s: FAILED: bytes outside the output range changed", spec, c->what);
  record(c->key, c->t, d, err);
  ok(wrong == 0 && err <= c->tol && kept, "%s: %s", spec, c->what);
}

/* One point: device d's output is the CPU backend's, bit for bit (NaN as NaN-ness). */
static void cross_check(const test_case *c, int d, const uint8_t *got, const uint8_t *cpu) {
  size_t wrong = 0, first = 0;
  for (size_t i = 0; i < c->n; i++)
    if (!same(c->t, got + c->y.off, cpu + c->y.off, i, BITS_ANY_NAN) && wrong++ == 0)
      first = i;
  if (wrong)
    diag("%s: %s: FAILED: %zu of %zu elements differ from %s's; first [%zu]: %.9g vs %.9g",
         devs[d].spec, c->what, wrong, c->n, devs[cpu_dev].spec, first,
         get(c->t, got + c->y.off, first), get(c->t, cpu + c->y.off, first));
  ok(wrong == 0, "%s: %s: bitwise identical to %s", devs[d].spec, c->what, devs[cpu_dev].spec);
}

/* Runs the case on every device, compares across devices if asked, then frees it. */
static void run_case(test_case *c) {
  uint8_t *got[MAX_DEVICES] = {0};
  for (int d = 0; d < n_devs; d++) {
    got[d] = xmalloc(c->y.size);
    if (run_on(&devs[d], c, got[d])) {
      evaluate(c, d, got[d]);
    } else {
      free(got[d]);
      got[d] = NULL;
    }
  }
  for (int d = 0; d < n_devs; d++)
    if (c->cross && d != cpu_dev && cpu_dev >= 0 && got[d] && got[cpu_dev])
      cross_check(c, d, got[d], got[cpu_dev]);
  for (int d = 0; d < n_devs; d++)
    free(got[d]);
  free(c->y.bytes);
  free(c->in[0].bytes);
  free(c->in[1].bytes);
  free(c->want);
  free(c->want2);
  free(c->ref);
}

/* Tolerance of an output summing `terms` terms in fp32, rounded to t; `abs_sum` is the
 * largest sum of |terms| of an output (see the top comment). */
static double sum_tol(dlrt_dtype t, int64_t terms, double abs_sum, double largest) {
  return ldexp(1.0, -(fbits_of(t) + 1)) +
         (2.0 * sqrt((double)terms) + 2.0) * EPS32 * abs_sum / fmax(largest, TINY);
}

/* ---------------------------------------------------------------- elementwise */

/* The op in fp32, as the contract says a device computes it. The product goes through a
 * volatile so that the compiler cannot fuse it with the add. */
static float ew_f32(dlrt_ew_op op, float x, float y, float z, int fused) {
  volatile float product = ALPHA * x;
  switch (op) {
  case DLRT_EW_FILL: return ALPHA;
  case DLRT_EW_SCALE: return ALPHA * x;
  case DLRT_EW_AXPY: return fused ? fmaf(ALPHA, x, y) : product + y;
  case DLRT_EW_ADD: return x + z;
  case DLRT_EW_MUL: return x * z;
  default: return isnan(x) ? x : x > 0.0f ? x : 0.0f;
  }
}

static double ew_f64(dlrt_ew_op op, double x, double y, double z) {
  switch (op) {
  case DLRT_EW_FILL: return ALPHA;
  case DLRT_EW_SCALE: return ALPHA * x;
  case DLRT_EW_AXPY: return ALPHA * x + y;
  case DLRT_EW_ADD: return x + z;
  case DLRT_EW_MUL: return x * z;
  default: return isnan(x) ? x : x > 0.0 ? x : 0.0;
  }
}

/* n, then the element offsets of y, x and z. */
static const size_t ew_shapes[][4] = {{0, 1, 2, 3},   {1, 0, 0, 0},    {31, 3, 1, 0},
                                      {257, 0, 2, 1}, {1000, 1, 0, 5}, {(1 << 20) + 3, 2, 1, 0}};
enum { EW_SHAPES = sizeof ew_shapes / sizeof ew_shapes[0], EW_SPECIALS = 4 };

/* In x of shape EW_SPECIALS, every 50th element: NaN, infinities, -0, an f16 subnormal,
 * an f32 subnormal (bf16 keeps it), and a value past f16's range. Their results are
 * checked exactly and left out of err. */
static const float ew_specials[] = {NAN, INFINITY, -INFINITY, -0.0f, 3e-6f, 1e-40f, 1e30f};

static void test_elementwise(dlrt_ew_op op, dlrt_dtype t, int s) {
  size_t n = ew_shapes[s][0];
  int reads_x = op != DLRT_EW_FILL, reads_z = op == DLRT_EW_ADD || op == DLRT_EW_MUL;
  test_case c = {.t = t, .n = n, .key = dlrt_ew_op_name(op),
                 .call = {.kind = EW, .op = op, .t = t, .cols = (int64_t)n},
                 .how = op == DLRT_EW_FILL ? BITS : VALUE,
                 .tol = t == DLRT_F32 ? 1e-6 : t == DLRT_F16 ? 1e-3 : 8e-3};
  snprintf(c.what, sizeof c.what, "%s %s n=%zu (element offsets y %zu x %zu z %zu)%s",
           dlrt_ew_op_name(op), dlrt_dtype_name(t), n, ew_shapes[s][1],
           reads_x ? ew_shapes[s][2] : 0, reads_z ? ew_shapes[s][3] : 0,
           s == EW_SPECIALS && reads_x ? " with NaN, inf, -0, subnormals" : "");
  c.y = image_new(t, n, ew_shapes[s][1], 1);
  if (reads_x)
    c.in[0] = image_new(t, n, ew_shapes[s][2], 2);
  if (reads_z)
    c.in[1] = image_new(t, n, ew_shapes[s][3], 3);
  c.want = xmalloc(n * esize(t));
  c.want2 = op == DLRT_EW_AXPY ? xmalloc(n * esize(t)) : NULL;
  c.ref = xmalloc(n * sizeof(double));
  for (size_t i = 0; i < n; i++) {
    float x = spread(), y = quant(t, spread()), z = quant(t, spread());
    int special = s == EW_SPECIALS && i % 50 == 7;
    if (special)
      x = ew_specials[(i / 50) % (sizeof ew_specials / sizeof ew_specials[0])];
    x = quant(t, x);
    put(t, DATA(c.y), i, y);
    if (reads_x)
      put(t, DATA(c.in[0]), i, x);
    if (reads_z)
      put(t, DATA(c.in[1]), i, z);
    put(t, c.want, i, ew_f32(op, x, y, z, 0));
    if (c.want2)
      put(t, c.want2, i, ew_f32(op, x, y, z, 1));
    c.ref[i] = special ? NAN : ew_f64(op, x, y, z);
  }
  run_case(&c);
}

/* ---------------------------------------------------------------- cast */

/* f32 values that probe narrowing: zeros, infinities, NaN, f16's largest finite (65504),
 * just below its overflow threshold and at it (65520 ties to inf), f16 subnormals and
 * ties between them (2^-25 -> 0, 3 * 2^-25 and 5 * 2^-25 -> 2^-23), ties above 1 in f16
 * (1 + 2^-11 -> 1, 1 + 3 * 2^-11 -> 1 + 2^-9) and in bf16 (1 + 2^-8, 1 + 3 * 2^-8),
 * bf16's overflow tie, f32 extremes and subnormals. */
static const float cast_specials[] = {
    0.0f,       -0.0f,      INFINITY,   -INFINITY,  NAN,       -NAN,     1.0f,     -1.0f,
    65504.0f,   -65504.0f,  0x1.ffdffep+15f, 65520.0f, -65520.0f, 65536.0f, 1e10f, 0x1p-14f,
    0x1p-24f,   -0x1p-24f,  0x1p-25f,   0x3p-25f,   -0x3p-25f, 0x5p-25f, 0x1p-26f, 0x1.002p0f,
    0x1.006p0f, 0x1.01p0f,  0x1.03p0f,  0x1.ffp+127f, FLT_MAX, -FLT_MAX, FLT_MIN,  0x1p-149f,
    -0x1p-140f, 0.1f,       1.0f / 3.0f};

/* Source elements of type t, *n of them: every bit pattern for f16 and bf16; for f32 the
 * specials, ties between neighbouring f16 and between neighbouring bf16 values, random
 * values across f16's range and random bit patterns. */
static uint8_t *cast_source(dlrt_dtype t, size_t *n) {
  enum { SPECIALS = sizeof cast_specials / sizeof cast_specials[0], K = 32768 };
  if (t != DLRT_F32) {
    uint16_t *h = xmalloc(65536 * 2);
    for (uint32_t i = 0; i < 65536; i++)
      h[i] = (uint16_t)i;
    *n = 65536;
    return (uint8_t *)h;
  }
  *n = SPECIALS + 6 * K;
  float *f = xmalloc(*n * sizeof *f);
  memcpy(f, cast_specials, sizeof cast_specials);
  for (size_t i = 0; i < K; i++) {
    uint16_t h = (uint16_t)(rng() % 0x7BFF), b = (uint16_t)(rng() % 0x7F7F);
    float sign = rng() & 1 ? -1.0f : 1.0f, *at = f + SPECIALS + 6 * i;
    at[0] = sign * (float)((f16_values[h] + f16_values[h + 1]) / 2);
    at[1] = sign * (float)((bf16_values[b] + bf16_values[b + 1]) / 2);
    for (int j = 2; j < 4; j++)
      at[j] = sign * ldexpf(1.0f + (float)(rng() >> 41) * 0x1p-23f, (int)(rng() % 43) - 26);
    for (int j = 4; j < 6; j++) {
      uint32_t u = (uint32_t)rng();
      memcpy(&at[j], &u, 4);
    }
  }
  return (uint8_t *)f;
}

static void test_cast(dlrt_dtype yt, dlrt_dtype xt, const uint8_t *src, size_t n, size_t y_off,
                      size_t x_off) {
  test_case c = {.t = yt, .n = n, .key = "cast", .how = BITS_ANY_NAN,
                 .call = {.kind = CAST, .t = yt, .xt = xt, .cols = (int64_t)n}};
  snprintf(c.what, sizeof c.what, "cast %s -> %s n=%zu (element offsets y %zu x %zu)",
           dlrt_dtype_name(xt), dlrt_dtype_name(yt), n, y_off, x_off);
  c.y = image_new(yt, n, y_off, 4);
  c.in[0] = image_new(xt, n, x_off, 5);
  memcpy(DATA(c.in[0]), src, n * esize(xt));
  c.want = xmalloc(n * esize(yt));
  c.ref = xmalloc(n * sizeof(double));
  for (size_t i = 0; i < n; i++) {
    put(yt, c.want, i, get(xt, src, i));
    c.ref[i] = get(yt, c.want, i);
  }
  run_case(&c);
}

/* ---------------------------------------------------------------- reduce */

static const int64_t reduce_shapes[][2] = {{0, 5},    {3, 0},     {1, 1},   {1, 1000003},
                                           {7, 4097}, {300, 257}, {1024, 64}};
enum { REDUCE_SHAPES = sizeof reduce_shapes / sizeof reduce_shapes[0] };

/* Sums: values in [-0.5, 1.5) (mixed signs, positive mean, so max |ref| is near the sum
 * of |x|), scaled by a power of two so that a row's sum stays near 512, within f16.
 * Max: odd rows all negative; with 3 rows or more, a NaN in the middle row. */
static void test_reduce(dlrt_reduce_op op, dlrt_dtype t, int s) {
  int64_t rows = reduce_shapes[s][0], cols = reduce_shapes[s][1];
  size_t y_off = (size_t)s % 3, x_off = (size_t)(2 * s) % 5;
  int sum = op == DLRT_REDUCE_SUM;
  test_case c = {.t = t, .n = (size_t)rows, .key = sum ? "reduce sum" : "reduce max",
                 .call = {.kind = REDUCE, .op = op, .t = t, .rows = rows, .cols = cols},
                 .how = sum ? TOLERANCE : VALUE, .cross = 1};
  snprintf(c.what, sizeof c.what, "reduce %s %s %lld x %lld (element offsets y %zu x %zu)%s",
           dlrt_reduce_op_name(op), dlrt_dtype_name(t), (long long)rows, (long long)cols,
           y_off, x_off, !sum && rows >= 3 && cols > 1 ? " with a NaN" : "");
  c.y = image_new(t, (size_t)rows, y_off, 6);
  c.in[0] = image_new(t, (size_t)(rows * cols), x_off, 7);
  c.ref = xmalloc((size_t)rows * sizeof(double));
  float scale = 1.0f;
  while ((float)cols * scale > 1024.0f)
    scale /= 2.0f;
  double abs_sum = 0.0, largest = 0.0;
  for (int64_t r = 0; r < rows; r++) {
    double acc = sum ? 0.0 : -INFINITY, row_abs = 0.0;
    for (int64_t col = 0; col < cols; col++) {
      size_t at = (size_t)(r * cols + col);
      float v = sum ? uniform(-0.5f, 1.5f) * scale : uniform(-1.0f, 1.0f) - (r % 2 ? 3.0f : 0.0f);
      if (!sum && rows >= 3 && r == rows / 2 && col == cols * 2 / 3)
        v = NAN;
      put(t, DATA(c.in[0]), at, v);
      double x = get(t, DATA(c.in[0]), at);
      row_abs += fabs(x);
      acc = sum ? acc + x : isnan(acc) || acc > x ? acc : x;
    }
    c.ref[r] = acc;
    abs_sum = fmax(abs_sum, row_abs);
    if (isfinite(acc))
      largest = fmax(largest, fabs(acc));
  }
  if (sum) {
    c.tol = sum_tol(t, cols, abs_sum, largest);
  } else {
    c.want = xmalloc((size_t)rows * esize(t));
    for (int64_t r = 0; r < rows; r++)
      put(t, c.want, (size_t)r, c.ref[r]);
  }
  run_case(&c);
}

/* ---------------------------------------------------------------- transpose */

static const int64_t transpose_shapes[][3] = {{1, 1, 1},    {1, 33, 65},   {3, 32, 32},
                                              {2, 1, 1000}, {1, 1000, 1},  {5, 0, 7},
                                              {2, 257, 129}, {1, 1024, 1031}};
enum { TRANSPOSE_SHAPES = sizeof transpose_shapes / sizeof transpose_shapes[0] };

/* x holds random bits (NaNs with payloads, subnormals and all): they must arrive unchanged. */
static void test_transpose(dlrt_dtype t, int s) {
  int64_t b = transpose_shapes[s][0], rows = transpose_shapes[s][1], cols = transpose_shapes[s][2];
  size_t n = (size_t)(b * rows * cols), es = esize(t), y_off = (size_t)s % 4,
         x_off = (size_t)(3 * s) % 7;
  test_case c = {.t = t, .n = n, .key = "transpose", .how = BITS,
                 .call = {.kind = TRANSPOSE, .t = t, .batch = b, .rows = rows, .cols = cols}};
  snprintf(c.what, sizeof c.what, "transpose %s %lld x %lld x %lld (element offsets y %zu x %zu)",
           dlrt_dtype_name(t), (long long)b, (long long)rows, (long long)cols, y_off, x_off);
  c.y = image_new(t, n, y_off, 8);
  c.in[0] = image_new(t, n, x_off, 9);
  c.want = xmalloc(n * es);
  c.ref = xmalloc(n * sizeof(double));
  /* y[bi][j][i] = x[bi][i][j] */
  for (int64_t bi = 0; bi < b; bi++)
    for (int64_t i = 0; i < rows; i++)
      for (int64_t j = 0; j < cols; j++)
        memcpy(c.want + (size_t)((bi * cols + j) * rows + i) * es,
               DATA(c.in[0]) + (size_t)((bi * rows + i) * cols + j) * es, es);
  for (size_t i = 0; i < n; i++)
    c.ref[i] = get(t, c.want, i);
  run_case(&c);
}

/* ---------------------------------------------------------------- GEMM */

typedef struct {
  int ta, tb;
  int64_t m, n, k;
  float alpha, beta;
  size_t a_off, b_off, c_off; /* elements */
} gemm_shape;
static const gemm_shape gemm_shapes[] = {
    {0, 0, 1, 1, 1, 2.0f, 3.0f, 0, 0, 0},
    {0, 0, 64, 128, 96, 1.0f, 0.0f, 1, 2, 3},
    {1, 0, 33, 17, 65, 0.5f, -1.0f, 0, 3, 1},
    {0, 1, 33, 17, 65, 1.0f, 1.0f, 2, 0, 1},
    {1, 1, 33, 17, 65, -1.5f, 0.5f, 1, 1, 0},
    {0, 0, 64, 512, 784, 1.0f, 0.0f, 0, 0, 0}, /* an MLP layer's forward pass, batch 64 */
    {1, 0, 784, 512, 64, 1.0f, 1.0f, 0, 0, 0}, /* its weight gradient, accumulated */
};
enum { GEMM_SHAPES = sizeof gemm_shapes / sizeof gemm_shapes[0] };

/* A, B in [-1, 1); C in [-1, 1), or NaN when beta is 0 (then C must not be read). */
static void test_gemm(dlrt_dtype t, int s) {
  const gemm_shape *g = &gemm_shapes[s];
  int64_t m = g->m, n = g->n, k = g->k;
  test_case c = {
      .t = t, .n = (size_t)(m * n), .key = "gemm", .how = TOLERANCE,
      .call = {.kind = GEMM,
               .gemm = dlrt_gemm_desc_make(t, g->ta, g->tb, m, n, k, g->alpha, g->beta)}};
  snprintf(c.what, sizeof c.what,
           "gemm %s %c%c m %lld n %lld k %lld alpha %g beta %g (element offsets a %zu b %zu c %zu)",
           dlrt_dtype_name(t), g->ta ? 'T' : 'N', g->tb ? 'T' : 'N', (long long)m, (long long)n,
           (long long)k, g->alpha, g->beta, g->a_off, g->b_off, g->c_off);
  c.y = image_new(t, c.n, g->c_off, 10);
  c.in[0] = image_new(t, (size_t)(m * k), g->a_off, 11);
  c.in[1] = image_new(t, (size_t)(k * n), g->b_off, 12);
  double *a = xmalloc((size_t)(m * k) * sizeof *a), *b = xmalloc((size_t)(k * n) * sizeof *b);
  for (size_t i = 0; i < (size_t)(m * k); i++) {
    put(t, DATA(c.in[0]), i, uniform(-1, 1));
    a[i] = get(t, DATA(c.in[0]), i);
  }
  for (size_t i = 0; i < (size_t)(k * n); i++) {
    put(t, DATA(c.in[1]), i, uniform(-1, 1));
    b[i] = get(t, DATA(c.in[1]), i);
  }
  c.ref = xmalloc(c.n * sizeof(double));
  double abs_sum = 0.0, largest = 0.0;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      size_t at = (size_t)(i * n + j);
      put(t, DATA(c.y), at, g->beta == 0.0f ? NAN : uniform(-1, 1));
      double sum = 0.0, mag = 0.0, cv = g->beta == 0.0f ? 0.0 : get(t, DATA(c.y), at);
      for (int64_t p = 0; p < k; p++) { /* op(A)[i][p] * op(B)[p][j] */
        double prod = a[g->ta ? p * m + i : i * k + p] * b[g->tb ? j * k + p : p * n + j];
        sum += prod;
        mag += fabs(prod);
      }
      c.ref[at] = g->alpha * sum + g->beta * cv;
      abs_sum = fmax(abs_sum, fabs(g->alpha) * mag + fabs(g->beta * cv));
      largest = fmax(largest, fabs(c.ref[at]));
    }
  c.tol = sum_tol(t, k, abs_sum, largest);
  free(a);
  free(b);
  run_case(&c);
}

/* ---------------------------------------------------------------- bad arguments */

/* Two buffers of N f32 (a and b), offsets in bytes; refused calls must leave both. */
static void test_bad_arguments(const device *d) {
  enum { N = 1024 };
  static float initial[N], got[N];
  for (int i = 0; i < N; i++)
    initial[i] = (float)i;
  dlrt_stream_t *s = d->stream;
  dlrt_buffer_t *a = upload_buffer(d->dev, initial, sizeof initial),
                *b = upload_buffer(d->dev, initial, sizeof initial);
  if (!a || !b) {
    ok(0, "%s: set up operands: %s", d->spec, dlrt_last_error());
    goto done;
  }
  const dlrt_reduce_op sum = DLRT_REDUCE_SUM, max = DLRT_REDUCE_MAX;
#define BAD(want, what, call) is_status(call, DLRT_ERR_##want, "%s: %s", d->spec, what)
  BAD(INVALID_ARG, "cast to i32", dlrt_cast(s, 16, a, 0, DLRT_I32, b, 0, DLRT_F32));
  BAD(INVALID_ARG, "cast from u8", dlrt_cast(s, 16, a, 0, DLRT_F32, b, 0, DLRT_U8));
  BAD(INVALID_ARG, "cast n < 0", dlrt_cast(s, -1, a, 0, DLRT_F16, b, 0, DLRT_F32));
  BAD(INVALID_ARG, "cast f16 y offset 1", dlrt_cast(s, 16, a, 1, DLRT_F16, b, 0, DLRT_F32));
  BAD(INVALID_ARG, "cast f32 x offset 2", dlrt_cast(s, 16, a, 0, DLRT_F16, b, 2, DLRT_F32));
  BAD(OUT_OF_RANGE, "cast: y too small (N + 1 f32)",
      dlrt_cast(s, N + 1, a, 0, DLRT_F32, b, 0, DLRT_F16));
  BAD(OUT_OF_RANGE, "cast: buffers too small (2N + 1 f16)",
      dlrt_cast(s, 2 * N + 1, a, 0, DLRT_BF16, b, 0, DLRT_F16));
  BAD(OUT_OF_RANGE, "cast: y offset 4 runs past the end",
      dlrt_cast(s, N, a, 4, DLRT_F32, b, 0, DLRT_F32));
  BAD(INVALID_ARG, "reduce: y inside x", dlrt_reduce(s, sum, DLRT_F32, 2, 256, a, 400, a, 0));
  BAD(INVALID_ARG, "reduce: y at x", dlrt_reduce(s, max, DLRT_F32, 4, 256, a, 0, a, 0));
  BAD(INVALID_ARG, "reduce f32 y offset 2", dlrt_reduce(s, sum, DLRT_F32, 2, 256, b, 2, a, 0));
  BAD(INVALID_ARG, "reduce f16 x offset 1", dlrt_reduce(s, max, DLRT_F16, 2, 256, b, 0, a, 1));
  BAD(OUT_OF_RANGE, "reduce: x too small (2 x 513 f32)",
      dlrt_reduce(s, sum, DLRT_F32, 2, 513, b, 0, a, 0));
  BAD(OUT_OF_RANGE, "reduce: y too small (N + 1 rows)",
      dlrt_reduce(s, sum, DLRT_F32, N + 1, 0, b, 0, a, 0));
  BAD(INVALID_ARG, "reduce rows < 0", dlrt_reduce(s, sum, DLRT_F32, -1, 4, b, 0, a, 0));
  BAD(INVALID_ARG, "reduce cols < 0", dlrt_reduce(s, sum, DLRT_F32, 4, -1, b, 0, a, 0));
  BAD(INVALID_ARG, "reduce i32", dlrt_reduce(s, sum, DLRT_I32, 4, 4, b, 0, a, 0));
  BAD(INVALID_ARG, "reduce op DLRT_REDUCE_COUNT_",
      dlrt_reduce(s, DLRT_REDUCE_COUNT_, DLRT_F32, 4, 4, b, 0, a, 0));
  BAD(INVALID_ARG, "transpose u8", dlrt_transpose(s, DLRT_U8, 1, 4, 4, b, 0, a, 0));
  BAD(INVALID_ARG, "transpose batch < 0", dlrt_transpose(s, DLRT_F32, -1, 4, 4, b, 0, a, 0));
  BAD(INVALID_ARG, "transpose rows < 0", dlrt_transpose(s, DLRT_F32, 1, -4, 4, b, 0, a, 0));
  BAD(INVALID_ARG, "transpose f16 y offset 1", dlrt_transpose(s, DLRT_F16, 1, 4, 4, b, 1, a, 0));
  BAD(INVALID_ARG, "transpose i32 x offset 2", dlrt_transpose(s, DLRT_I32, 1, 4, 4, b, 0, a, 2));
  BAD(OUT_OF_RANGE, "transpose: buffers too small (32 x 33 f32)",
      dlrt_transpose(s, DLRT_F32, 1, 32, 33, b, 0, a, 0));
  BAD(INVALID_ARG, "transpose: y overlaps x", dlrt_transpose(s, DLRT_F32, 1, 16, 16, a, 512, a, 0));
  BAD(INVALID_ARG, "add bf16 x offset 1",
      dlrt_elementwise(s, DLRT_EW_ADD, DLRT_BF16, 16, 1.0f, b, 0, a, 1, a, 0));
  BAD(OUT_OF_RANGE, "fill f16: y too small (2N + 1)",
      dlrt_elementwise(s, DLRT_EW_FILL, DLRT_F16, 2 * N + 1, 1.0f, b, 0, NULL, 0, NULL, 0));
#undef BAD
  int status = dlrt_stream_synchronize(s), same_a = 0;
  if (status == DLRT_OK && (status = dlrt_copy_d2h(got, a, 0, sizeof got, NULL)) == DLRT_OK)
    same_a = memcmp(got, initial, sizeof got) == 0;
  if (status == DLRT_OK)
    status = dlrt_copy_d2h(got, b, 0, sizeof got, NULL);
  if (tap_check(status, "%s: read the operands back", d->spec))
    ok(same_a && memcmp(got, initial, sizeof got) == 0,
       "%s: refused calls left both buffers as they were", d->spec);
done:
  dlrt_buffer_free(a);
  dlrt_buffer_free(b);
}

/* ---------------------------------------------------------------- main */

int main(void) {
  static const dlrt_dtype floats[] = {DLRT_F32, DLRT_F16, DLRT_BF16},
                          transposable[] = {DLRT_F32, DLRT_F16, DLRT_BF16, DLRT_I32};
  for (uint32_t h = 0; h < 65536; h++) {
    f16_values[h] = fmt_decode(FMT_F16, (uint16_t)h);
    bf16_values[h] = fmt_decode(FMT_BF16, (uint16_t)h);
  }
  int count = dlrt_device_count();
  if (count < 1)
    bail_out("no devices: %s", dlrt_last_error());
  n_devs = count < MAX_DEVICES ? count : MAX_DEVICES;
  for (int i = 0; i < n_devs; i++) {
    dlrt_device_props props;
    if (dlrt_device_get(i, &devs[i].dev) != DLRT_OK ||
        dlrt_stream_create(devs[i].dev, &devs[i].stream) != DLRT_OK ||
        dlrt_device_props_get(devs[i].dev, &props) != DLRT_OK)
      bail_out("device %d: %s", i, dlrt_last_error());
    devs[i].spec = dlrt_device_spec(devs[i].dev);
    if (cpu_dev < 0 && strcmp(props.backend, "cpu") == 0)
      cpu_dev = i;
    diag("device %s: %s (%s)", devs[i].spec, props.name, props.driver);
  }
  if (cpu_dev < 0)
    diag("no cpu device: reductions are not compared across devices");

  for (int ti = 0; ti < 3; ti++)
    for (int op = 0; op < DLRT_EW_COUNT_; op++)
      for (int s = 0; s < EW_SHAPES; s++)
        test_elementwise((dlrt_ew_op)op, floats[ti], s);
  for (int xi = 0; xi < 3; xi++) {
    size_t n;
    uint8_t *src = cast_source(floats[xi], &n);
    for (int yi = 0; yi < 3; yi++) {
      test_cast(floats[yi], floats[xi], src, n, 1, 3);
      test_cast(floats[yi], floats[xi], src, 0, 2, 5);
    }
    free(src);
  }
  for (int ti = 0; ti < 3; ti++)
    for (int op = 0; op < DLRT_REDUCE_COUNT_; op++)
      for (int s = 0; s < REDUCE_SHAPES; s++)
        test_reduce((dlrt_reduce_op)op, floats[ti], s);
  for (int ti = 0; ti < 4; ti++)
    for (int s = 0; s < TRANSPOSE_SHAPES; s++)
      test_transpose(transposable[ti], s);
  for (int ti = 0; ti < 3; ti++)
    for (int s = 0; s < GEMM_SHAPES; s++)
      test_gemm(floats[ti], s);
  for (int i = 0; i < n_devs; i++)
    test_bad_arguments(&devs[i]);

  diag("largest normalised error per op, dtype of y and device:");
  for (int i = 0; i < n_stats; i++)
    diag("  %-11s %-5s %-10s %.3g", stats[i].op, dlrt_dtype_name(stats[i].t),
         devs[stats[i].dev].spec, stats[i].err);
  for (int i = 0; i < n_devs; i++)
    dlrt_stream_destroy(devs[i].stream);
  dlrt_shutdown();
  return done_testing();
}
