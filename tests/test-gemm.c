/*
 * test-gemm.c — dlrt_gemm on every device against a naive reference that
 * accumulates in double: all four transpose combinations, non-square shapes,
 * leading dimensions wider than the matrices, byte offsets into buffers,
 * strided batches with a broadcast operand, alpha and beta (beta != 0 reads
 * C; beta == 0 must not, so C starts as NaN there). fp16 and bf16 over the
 * same cases plus K spanning several of the CPU backend's K chunks and sizes
 * off its tiles (required on the CPU, elsewhere where a device has them), and
 * the CPU's fp16/bf16 result bit for bit the same with 1, 2 and 3 threads;
 * 16-bit A and B with an fp32 C (c_f32) summed over many GEMMs exactly.
 * Then the descriptor helper and argument checking.
 *
 * The error measure is max |got - ref| / max |ref| over the computed elements
 * (1e-4 for fp32); for fp16/bf16 each element against a bound derived for
 * fp32 accumulation and one 16-bit rounding (see half_bound). Elements of C
 * outside the product (padding between rows and batches, the bytes around
 * it) must keep their exact bits.
 * Points: computed at run time (done_testing).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "tap.h"

/* Bytes past each operand's last element, so a write past the end shows. */
#define GUARD 64
#define FP32_TOLERANCE 1e-4
/* fp16 keeps 11 significant bits, bf16 8: the product is rounded to them. */
#define HALF_TOLERANCE 1e-2

typedef struct {
  const char *name;
  dlrt_gemm_desc d;
  size_t a_off, b_off, c_off; /* bytes */
  int nan_in_c;               /* beta == 0: C starts as NaN and must not be read */
} gemm_case;

#define DESC(ta, tb, M, N, K, LDA, LDB, LDC, ALPHA, BETA, BATCH, SA, SB, SC)           \
  {                                                                                    \
    .dtype = DLRT_F32, .trans_a = (ta), .trans_b = (tb), .m = (M), .n = (N), .k = (K), \
    .alpha = (ALPHA), .beta = (BETA), .lda = (LDA), .ldb = (LDB), .ldc = (LDC),        \
    .stride_a = (SA), .stride_b = (SB), .stride_c = (SC), .batch = (BATCH)             \
  }

/* Shapes: op(A) m x k, op(B) k x n, C m x n; A stored (ta ? k x m : m x k),
 * B stored (tb ? n x k : k x n), all row-major with the given leading dims. */
/* clang-format off */
static const gemm_case cases[] = {
    {"NN 37x53x29, beta 0 over NaN",
     DESC(0, 0, 37, 53, 29, 29, 53, 53, 1.0f, 0.0f, 1, 0, 0, 0), 0, 0, 0, 1},
    {"NT 37x53x29",
     DESC(0, 1, 37, 53, 29, 29, 29, 53, 1.0f, 0.0f, 1, 0, 0, 0), 0, 0, 0, 0},
    {"TN 37x53x29",
     DESC(1, 0, 37, 53, 29, 37, 53, 53, 1.0f, 0.0f, 1, 0, 0, 0), 0, 0, 0, 0},
    {"TT 37x53x29",
     DESC(1, 1, 37, 53, 29, 37, 29, 53, 1.0f, 0.0f, 1, 0, 0, 0), 0, 0, 0, 0},
    {"NN wide lds, offsets, alpha 0.75 beta -0.5",
     DESC(0, 0, 37, 53, 29, 32, 58, 60, 0.75f, -0.5f, 1, 0, 0, 0), 12, 20, 44, 0},
    {"TT wide lds, offsets, alpha -1.5 beta 2",
     DESC(1, 1, 37, 53, 29, 38, 31, 54, -1.5f, 2.0f, 1, 0, 0, 0), 4, 8, 16, 0},
    {"NT wide lds, offsets, alpha 1 beta 1",
     DESC(0, 1, 19, 7, 41, 43, 44, 9, 1.0f, 1.0f, 1, 0, 0, 0), 28, 4, 8, 0},
    {"batch 3, A broadcast (stride 0), alpha 1.25 beta 0.5",
     DESC(0, 0, 17, 23, 19, 19, 25, 23, 1.25f, 0.5f, 3, 0, 19 * 25 + 7, 17 * 23 + 5),
     8, 4, 12, 0},
    {"batch 4 TN, B broadcast (stride 0), beta 0 over NaN",
     DESC(1, 0, 13, 21, 11, 15, 21, 22, 1.0f, 0.0f, 4, 11 * 15 + 3, 0, 13 * 22 + 1),
     4, 0, 4, 1},
    {"batch 2 NT, packed strides",
     DESC(0, 1, 16, 16, 16, 16, 16, 16, 1.0f, 0.0f, 2, 256, 256, 256), 0, 0, 0, 0},
    {"1x1x1, alpha 2 beta 3",
     DESC(0, 0, 1, 1, 1, 1, 1, 1, 2.0f, 3.0f, 1, 0, 0, 0), 0, 0, 0, 0},
    {"outer product 64x64x1",
     DESC(0, 0, 64, 64, 1, 1, 64, 64, 1.0f, 0.0f, 1, 0, 0, 0), 0, 0, 0, 0},
    {"NN 128x96x200",
     DESC(0, 0, 128, 96, 200, 200, 96, 96, 1.0f, 0.0f, 1, 0, 0, 0), 0, 0, 0, 0},
    /* A small C over a long k (a convolution's weight gradient): OpenCL's
     * tiled kernel splits k into slices and sums them in a second pass. */
    {"NT 32x9x9000 (k in slices), alpha 0.5 beta 1",
     DESC(0, 1, 32, 9, 9000, 9000, 9001, 11, 0.5f, 1.0f, 1, 0, 0, 0), 8, 4, 12, 0},
    {"batch 2 TN 20x30x5000 (k in slices), beta 0 over NaN",
     DESC(1, 0, 20, 30, 5000, 21, 30, 31, 1.0f, 0.0f, 2, 5000 * 21, 5000 * 30 + 2, 20 * 31),
     0, 0, 4, 1},
};
/* fp16/bf16 only (besides all of cases[]): K over several chunks of 256,
 * sizes that are not multiples of the CPU backend's tiles (64..256), leading
 * dimensions wider than the matrices. */
static const gemm_case half_cases[] = {
    {"NN 67x301x520, wide lds, alpha 0.5 beta -1",
     DESC(0, 0, 67, 301, 520, 530, 310, 305, 0.5f, -1.0f, 1, 0, 0, 0), 4, 8, 12, 0},
    {"TT 300x70x600, wide lds, alpha -1.25 beta 0.75",
     DESC(1, 1, 300, 70, 600, 303, 610, 75, -1.25f, 0.75f, 1, 0, 0, 0), 0, 4, 2, 0},
    {"TN 129x257x300, beta 0 over NaN",
     DESC(1, 0, 129, 257, 300, 131, 260, 259, 1.0f, 0.0f, 1, 0, 0, 0), 2, 0, 6, 1},
    {"NT 200x66x513, alpha 1 beta 1",
     DESC(0, 1, 200, 66, 513, 513, 520, 66, 1.0f, 1.0f, 1, 0, 0, 0), 0, 0, 0, 0},
    {"batch 3 NT, A broadcast (stride 0), K 400, alpha 2 beta 0.5",
     DESC(0, 1, 40, 90, 400, 410, 401, 93, 2.0f, 0.5f, 3, 0, 90 * 401 + 3, 40 * 93 + 1),
     6, 2, 4, 0},
};
/* clang-format on */
enum { CASES = sizeof cases / sizeof cases[0] };
enum { HALF_CASES = sizeof half_cases / sizeof half_cases[0] };

/* Elements a matrix of `rows` x `cols` (leading dim `ld`) spans over `batch`
 * matrices `stride` apart. */
static size_t span(int64_t rows, int64_t cols, int64_t ld, int64_t stride,
                   int64_t batch) {
  if (rows <= 0 || cols <= 0)
    return 0;
  return (size_t)((batch - 1) * stride + (rows - 1) * ld + cols);
}

typedef struct {
  size_t a_bytes, b_bytes, c_bytes; /* whole buffers: offset + span + guard */
} layout;

static layout layout_of(const gemm_case *c, size_t element) {
  const dlrt_gemm_desc *d = &c->d;
  layout l;
  l.a_bytes = c->a_off +
              element * span(d->trans_a ? d->k : d->m, d->trans_a ? d->m : d->k, d->lda,
                             d->stride_a, d->batch) +
              GUARD;
  l.b_bytes = c->b_off +
              element * span(d->trans_b ? d->n : d->k, d->trans_b ? d->k : d->n, d->ldb,
                             d->stride_b, d->batch) +
              GUARD;
  l.c_bytes =
      c->c_off + element * span(d->m, d->n, d->ldc, d->stride_c, d->batch) + GUARD;
  return l;
}

/* Values in [-1, 1] from a fixed sequence. */
static void fill_values(float *v, size_t count, uint32_t seed) {
  uint32_t x = seed;
  for (size_t i = 0; i < count; i++) {
    x = x * 1664525u + 1013904223u;
    v[i] = (float)((int)((x >> 8) % 2001) - 1000) / 1000.0f;
  }
}

/* Element index of op(A)[i][p] etc. inside matrix `batch` of each operand. */
static size_t index_a(const dlrt_gemm_desc *d, int64_t b, int64_t i, int64_t p) {
  return (size_t)(b * d->stride_a + (d->trans_a ? p * d->lda + i : i * d->lda + p));
}
static size_t index_b(const dlrt_gemm_desc *d, int64_t b, int64_t p, int64_t j) {
  return (size_t)(b * d->stride_b + (d->trans_b ? j * d->ldb + p : p * d->ldb + j));
}
static size_t index_c(const dlrt_gemm_desc *d, int64_t b, int64_t i, int64_t j) {
  return (size_t)(b * d->stride_c + i * d->ldc + j);
}

/* want[] starts as a copy of C; the product's elements are replaced by the
 * reference and marked in `computed`. Returns max |reference|. */
static double reference_gemm(const dlrt_gemm_desc *d, const float *a, const float *b,
                             float *want, uint8_t *computed) {
  double largest = 0.0;
  for (int64_t bt = 0; bt < d->batch; bt++)
    for (int64_t i = 0; i < d->m; i++)
      for (int64_t j = 0; j < d->n; j++) {
        double sum = 0.0;
        for (int64_t p = 0; p < d->k; p++)
          sum += (double)a[index_a(d, bt, i, p)] * (double)b[index_b(d, bt, p, j)];
        size_t at = index_c(d, bt, i, j);
        double value = (double)d->alpha * sum;
        if (d->beta != 0.0f)
          value += (double)d->beta * (double)want[at];
        want[at] = (float)value;
        computed[at] = 1;
        if (fabs(value) > largest)
          largest = fabs(value);
      }
  return largest;
}

/* Returns 0 when the device has no fp32 GEMM (after a SKIP point). */
static int test_case(dlrt_device_t *dev, dlrt_stream_t *stream, const gemm_case *c) {
  const char *spec = dlrt_device_spec(dev);
  const dlrt_gemm_desc *d = &c->d;
  layout l = layout_of(c, sizeof(float));
  uint8_t *a_host = malloc(l.a_bytes), *b_host = malloc(l.b_bytes);
  uint8_t *c_host = malloc(l.c_bytes), *got = malloc(l.c_bytes);
  float *want = malloc(l.c_bytes);
  uint8_t *computed = calloc(l.c_bytes / sizeof(float) + 1, 1);
  dlrt_buffer_t *a = NULL, *b = NULL, *cbuf = NULL;
  int supported = 1;
  if (!a_host || !b_host || !c_host || !got || !want || !computed)
    bail_out("out of host memory");

  /* Guards and padding get a pattern too: the GEMM must leave them alone. */
  fill_pattern(a_host, l.a_bytes, 1);
  fill_pattern(b_host, l.b_bytes, 2);
  fill_pattern(c_host, l.c_bytes, 3);
  float *a_vals = (float *)(a_host + c->a_off);
  float *b_vals = (float *)(b_host + c->b_off);
  float *c_vals = (float *)(c_host + c->c_off);
  fill_values(a_vals, (l.a_bytes - c->a_off - GUARD) / sizeof(float), 11);
  fill_values(b_vals, (l.b_bytes - c->b_off - GUARD) / sizeof(float), 12);
  size_t c_count = (l.c_bytes - c->c_off - GUARD) / sizeof(float);
  if (c->nan_in_c)
    for (size_t i = 0; i < c_count; i++)
      c_vals[i] = NAN;
  else
    fill_values(c_vals, c_count, 13);

  memcpy(want, c_host, l.c_bytes);
  double largest = reference_gemm(d, a_vals, b_vals,
                                  (float *)((uint8_t *)want + c->c_off), computed);

  a = upload_buffer(dev, a_host, l.a_bytes);
  b = upload_buffer(dev, b_host, l.b_bytes);
  cbuf = upload_buffer(dev, c_host, l.c_bytes);
  if (!a || !b || !cbuf) {
    ok(0, "%s: %s: upload operands: %s", spec, c->name, dlrt_last_error());
    goto done;
  }
  int status = dlrt_gemm(stream, d, a, c->a_off, b, c->b_off, cbuf, c->c_off);
  if (status == DLRT_ERR_UNSUPPORTED)
    supported = 0;
  if (!tap_check_op(status, "%s: gemm %s", spec, c->name))
    goto done;
  status = dlrt_stream_synchronize(stream);
  if (status == DLRT_OK)
    status = dlrt_copy_d2h(got, cbuf, 0, l.c_bytes, NULL);
  if (!tap_check(status, "%s: %s: run and read back", spec, c->name))
    goto done;

  /* Computed elements within tolerance; everything else bit for bit. */
  const float *got_vals = (const float *)(got + c->c_off);
  const float *want_vals = (const float *)((uint8_t *)want + c->c_off);
  double max_error = 0.0;
  size_t untouched_wrong = 0;
  for (size_t i = 0; i < c_count; i++) {
    if (computed[i]) {
      double err = fabs((double)got_vals[i] - (double)want_vals[i]);
      if (!(err <= max_error)) /* NaN counts as the largest error */
        max_error = isnan(err) ? INFINITY : err;
    } else if (memcmp(&got_vals[i], &want_vals[i], sizeof(float)) != 0) {
      untouched_wrong++;
    }
  }
  if (memcmp(got, want, c->c_off) != 0 ||
      memcmp(got + l.c_bytes - GUARD, (uint8_t *)want + l.c_bytes - GUARD, GUARD) != 0)
    untouched_wrong++;
  double relative = max_error / (largest > 0.0 ? largest : 1.0);
  diag("%s: %s: max |err| %.3g, max |ref| %.3g, relative %.3g", spec, c->name,
       max_error, largest, relative);
  ok(relative <= FP32_TOLERANCE, "%s: %s: relative error %.3g <= %g", spec, c->name,
     relative, FP32_TOLERANCE);
  is_u64(untouched_wrong, 0,
         "%s: %s: C outside the product unchanged (elements changed)", spec, c->name);
done:
  dlrt_buffer_free(a);
  dlrt_buffer_free(b);
  dlrt_buffer_free(cbuf);
  free(a_host);
  free(b_host);
  free(c_host);
  free(got);
  free(want);
  free(computed);
  return supported;
}

/* IEEE binary16 and bfloat16, round to nearest even. */
static uint16_t float_to_half(float value) {
  uint32_t x;
  memcpy(&x, &value, sizeof x);
  uint32_t sign = (x >> 16) & 0x8000u, mant = x & 0x7FFFFFu;
  int exp = (int)((x >> 23) & 0xFF);
  if (exp == 0xFF)
    return (uint16_t)(sign | 0x7C00u | (mant ? 0x200u : 0));
  exp = exp - 127 + 15;
  if (exp >= 31)
    return (uint16_t)(sign | 0x7C00u);
  if (exp <= 0) {
    if (exp < -10)
      return (uint16_t)sign;
    mant |= 0x800000u;
    unsigned shift = (unsigned)(14 - exp);
    uint32_t h = mant >> shift, rest = mant & ((1u << shift) - 1),
             mid = 1u << (shift - 1);
    if (rest > mid || (rest == mid && (h & 1)))
      h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = sign | ((uint32_t)exp << 10) | (mant >> 13), rest = mant & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1)))
    h++; /* a carry into the exponent is the right rounding too */
  return (uint16_t)h;
}

static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu,
           mant = h & 0x3FFu, x;
  if (exp == 0) {
    float f = ldexpf((float)mant, -24);
    return sign ? -f : f;
  }
  if (exp == 31)
    x = sign | 0x7F800000u | (mant << 13);
  else
    x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

static uint16_t float_to_bf16(float value) {
  uint32_t x;
  memcpy(&x, &value, sizeof x);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u)
    return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
  return (uint16_t)((x + 0x7FFFu + ((x >> 16) & 1)) >> 16);
}

static float bf16_to_float(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

static int is_cpu(dlrt_device_t *dev) {
  return strncmp(dlrt_device_spec(dev), "cpu", 3) == 0;
}

/* ulp of the 16-bit type at |x|: 2^(e - p + 1) for x in [2^e, 2^(e+1)), p
 * significant bits (fp16 11, bf16 8), never below the smallest subnormal
 * (fp16 2^-24, bf16 2^-133). Non-decreasing in |x|. */
static double ulp16(dlrt_dtype dtype, double x) {
  int bits = dtype == DLRT_F16 ? 11 : 8, e;
  double smallest = dtype == DLRT_F16 ? ldexp(1.0, -24) : ldexp(1.0, -133);
  if (x == 0.0)
    return smallest;
  frexp(fabs(x), &e); /* |x| in [2^(e-1), 2^e) */
  double u = ldexp(1.0, e - bits);
  return u > smallest ? u : smallest;
}

/* Largest |got - ref| allowed for one element of C, ref = alpha*S + beta*c0
 * with S = sum of a_p*b_p over K (exact, on the 16-bit inputs), from
 *   fp32: sum: |acc - S| <= g_K * P, P = sum |a_p*b_p| (any order, products
 *         exact or not, FMA or not), then alpha*acc, beta*c0 and their sum,
 *         three more roundings: together within g_{K+3} * (|alpha|*P +
 *         |beta*c0|) =: E32, g_n = n*u / (1 - n*u), u = 2^-24 (2^-23 for
 *         devices other than the CPU: an accumulator that truncates);
 *   16-bit: one rounding to nearest of v, |v - ref| <= E32: at most half an
 *         ulp of the 16-bit type at |ref| + E32.
 * So |got - ref| <= ulp16(|ref| + E32) / 2 + E32. With no cancellation E32
 * is ~1e-4 of an fp16 ulp for K = 600: the bound is essentially half an ulp. */
static double half_bound(dlrt_dtype dtype, int strict, const dlrt_gemm_desc *d, double ref,
                         double abs_sum, double c0) {
  double u = strict ? ldexp(1.0, -24) : ldexp(1.0, -23), n = (double)d->k + 3.0;
  double gamma = n * u / (1.0 - n * u);
  double e32 = gamma * (fabs((double)d->alpha) * abs_sum +
                        (d->beta != 0.0f ? fabs((double)d->beta * c0) : 0.0));
  return 0.5 * ulp16(dtype, fabs(ref) + e32) + e32;
}

/* One case of cases[] or half_cases[] in fp16 or bf16: the operands are the
 * case's values rounded to the type, the reference is computed in double on
 * those. Required on the CPU; elsewhere DLRT_ERR_UNSUPPORTED is a SKIP. */
static void test_half_case(dlrt_device_t *dev, dlrt_stream_t *stream, const gemm_case *c,
                           dlrt_dtype dtype) {
  const char *spec = dlrt_device_spec(dev), *type = dlrt_dtype_name(dtype);
  uint16_t (*to16)(float) = dtype == DLRT_F16 ? float_to_half : float_to_bf16;
  float (*from16)(uint16_t) = dtype == DLRT_F16 ? half_to_float : bf16_to_float;
  dlrt_gemm_desc d = c->d;
  d.dtype = dtype;
  layout l = layout_of(c, 2);
  size_t na = (l.a_bytes - c->a_off - GUARD) / 2, nb = (l.b_bytes - c->b_off - GUARD) / 2;
  size_t nc = (l.c_bytes - c->c_off - GUARD) / 2;
  uint8_t *a_host = malloc(l.a_bytes), *b_host = malloc(l.b_bytes);
  uint8_t *c_host = malloc(l.c_bytes), *got = malloc(l.c_bytes);
  float *values = malloc((na > nb ? (na > nc ? na : nc) : (nb > nc ? nb : nc)) * sizeof(float));
  float *a_f = malloc(na * sizeof(float)), *b_f = malloc(nb * sizeof(float));
  uint8_t *computed = calloc(nc + 1, 1);
  dlrt_buffer_t *a = NULL, *b = NULL, *cbuf = NULL;
  if (!a_host || !b_host || !c_host || !got || !values || !a_f || !b_f || !computed)
    bail_out("out of host memory");
  fill_pattern(a_host, l.a_bytes, 4);
  fill_pattern(b_host, l.b_bytes, 5);
  fill_pattern(c_host, l.c_bytes, 6);
  uint16_t *a16 = (uint16_t *)(a_host + c->a_off), *b16 = (uint16_t *)(b_host + c->b_off);
  uint16_t *c16 = (uint16_t *)(c_host + c->c_off);
  fill_values(values, na, 21);
  for (size_t i = 0; i < na; i++) {
    a16[i] = to16(values[i]);
    a_f[i] = from16(a16[i]);
  }
  fill_values(values, nb, 22);
  for (size_t i = 0; i < nb; i++) {
    b16[i] = to16(values[i]);
    b_f[i] = from16(b16[i]);
  }
  /* beta == 0: the product's elements start as NaN (they must not be read),
   * and on the CPU the padding too. Elsewhere the fp32 fallback of
   * lib/device/compute.c widens and narrows the padding, which keeps values
   * but not every NaN's bits (PoCL's vstore_half_rte writes NaN as 0x7fff). */
  for (int64_t bt = 0; bt < d.batch; bt++)
    for (int64_t i = 0; i < d.m; i++)
      for (int64_t j = 0; j < d.n; j++)
        computed[index_c(&d, bt, i, j)] = 1;
  fill_values(values, nc, 23);
  for (size_t i = 0; i < nc; i++)
    c16[i] = c->nan_in_c && (computed[i] || is_cpu(dev)) ? to16(NAN) : to16(values[i]);

  a = upload_buffer(dev, a_host, l.a_bytes);
  b = upload_buffer(dev, b_host, l.b_bytes);
  cbuf = upload_buffer(dev, c_host, l.c_bytes);
  if (!a || !b || !cbuf) {
    ok(0, "%s: %s %s: upload operands: %s", spec, type, c->name, dlrt_last_error());
    goto done;
  }
  int status = dlrt_gemm(stream, &d, a, c->a_off, b, c->b_off, cbuf, c->c_off);
  if (is_cpu(dev) ? !tap_check(status, "%s: %s gemm %s", spec, type, c->name)
                  : !tap_check_op(status, "%s: %s gemm %s", spec, type, c->name))
    goto done;
  status = dlrt_stream_synchronize(stream);
  if (status == DLRT_OK)
    status = dlrt_copy_d2h(got, cbuf, 0, l.c_bytes, NULL);
  if (!tap_check(status, "%s: %s %s: run and read back", spec, type, c->name))
    goto done;

  const uint16_t *got16 = (const uint16_t *)(got + c->c_off);
  double worst = 0.0, worst_ulps = 0.0; /* max |err| / bound, max |err| / ulp16(ref) */
  for (int64_t bt = 0; bt < d.batch; bt++)
    for (int64_t i = 0; i < d.m; i++)
      for (int64_t j = 0; j < d.n; j++) {
        double sum = 0.0, abs_sum = 0.0;
        for (int64_t p = 0; p < d.k; p++) {
          double term = (double)a_f[index_a(&d, bt, i, p)] * (double)b_f[index_b(&d, bt, p, j)];
          sum += term;
          abs_sum += fabs(term);
        }
        size_t at = index_c(&d, bt, i, j);
        double c0 = d.beta != 0.0f ? (double)from16(c16[at]) : 0.0;
        double ref = (double)d.alpha * sum + (double)d.beta * c0;
        double err = fabs((double)from16(got16[at]) - ref);
        double ratio = err / half_bound(dtype, is_cpu(dev), &d, ref, abs_sum, c0);
        if (!(ratio <= worst)) /* NaN counts as the largest error */
          worst = isnan(ratio) ? INFINITY : ratio;
        if (err / ulp16(dtype, ref) > worst_ulps)
          worst_ulps = err / ulp16(dtype, ref);
      }
  /* Everything but the product keeps its bits: padding, guards, offsets. */
  size_t untouched_wrong = 0;
  for (size_t i = 0; i < nc; i++)
    if (!computed[i] && got16[i] != c16[i])
      untouched_wrong++;
  if (memcmp(got, c_host, c->c_off) != 0 ||
      memcmp(got + l.c_bytes - GUARD, c_host + l.c_bytes - GUARD, GUARD) != 0)
    untouched_wrong++;
  diag("%s: %s %s: max |err| %.3g ulp of %s, %.3g of the bound", spec, type, c->name,
       worst_ulps, type, worst);
  ok(worst <= 1.0, "%s: %s %s: every element within its bound (worst %.3g of it)", spec,
     type, c->name, worst);
  is_u64(untouched_wrong, 0, "%s: %s %s: C outside the product unchanged", spec, type,
         c->name);
done:
  dlrt_buffer_free(a);
  dlrt_buffer_free(b);
  dlrt_buffer_free(cbuf);
  free(a_host);
  free(b_host);
  free(c_host);
  free(got);
  free(values);
  free(a_f);
  free(b_f);
  free(computed);
}

/* The CPU's fp16/bf16 GEMM gives the same bits with 1, 2 and 3 threads: a
 * batch of 2 with B broadcast, 40 MFLOP (enough to use the pool) over 24
 * tiles, K in two chunks. Leaves the default thread count (0) behind. */
static void test_half_threads(dlrt_device_t *dev, dlrt_stream_t *stream, dlrt_dtype dtype) {
  const char *spec = dlrt_device_spec(dev), *type = dlrt_dtype_name(dtype);
  uint16_t (*to16)(float) = dtype == DLRT_F16 ? float_to_half : float_to_bf16;
  const int64_t m = 150, n = 200, k = 333, batch = 2;
  dlrt_gemm_desc d = dlrt_gemm_desc_make(dtype, 0, 1, m, n, k, 1.5f, 0.25f);
  d.batch = batch;
  d.stride_a = m * k;
  d.stride_b = 0;
  d.stride_c = m * n;
  size_t na = (size_t)(batch * m * k), nb = (size_t)(n * k), nc = (size_t)(batch * m * n);
  float *values = malloc(na * sizeof(float));
  uint16_t *a16 = malloc(na * 2), *b16 = malloc(nb * 2), *c16 = malloc(nc * 2);
  uint16_t *got[3] = {malloc(nc * 2), malloc(nc * 2), malloc(nc * 2)};
  dlrt_buffer_t *a = NULL, *b = NULL, *cbuf = NULL;
  if (!values || !a16 || !b16 || !c16 || !got[0] || !got[1] || !got[2])
    bail_out("out of host memory");
  fill_values(values, na, 31);
  for (size_t i = 0; i < na; i++)
    a16[i] = to16(values[i]);
  fill_values(values, nb, 32);
  for (size_t i = 0; i < nb; i++)
    b16[i] = to16(values[i]);
  fill_values(values, nc, 33);
  for (size_t i = 0; i < nc; i++)
    c16[i] = to16(values[i]);
  a = upload_buffer(dev, a16, na * 2);
  b = upload_buffer(dev, b16, nb * 2);
  cbuf = upload_buffer(dev, c16, nc * 2);
  if (!a || !b || !cbuf) {
    ok(0, "%s: %s: upload operands: %s", spec, type, dlrt_last_error());
    goto done;
  }
  for (int t = 0; t < 3; t++) {
    int status = dlrt_set_cpu_threads(t + 1);
    if (status == DLRT_OK) /* C afresh: beta reads it */
      status = dlrt_copy_h2d(cbuf, 0, c16, nc * 2, NULL);
    if (status == DLRT_OK)
      status = dlrt_gemm(stream, &d, a, 0, b, 0, cbuf, 0);
    if (status == DLRT_OK)
      status = dlrt_stream_synchronize(stream);
    if (status == DLRT_OK)
      status = dlrt_copy_d2h(got[t], cbuf, 0, nc * 2, NULL);
    if (!tap_check(status, "%s: %s 150x200x333 batch 2 on %d thread(s)", spec, type, t + 1))
      goto done;
  }
  ok(memcmp(got[0], c16, nc * 2) != 0, "%s: %s: the GEMM changed C", spec, type);
  is_mem(got[1], got[0], nc * 2, "%s: %s: 2 threads give the bits of 1", spec, type);
  is_mem(got[2], got[0], nc * 2, "%s: %s: 3 threads give the bits of 1", spec, type);
done:
  dlrt_set_cpu_threads(0);
  dlrt_buffer_free(a);
  dlrt_buffer_free(b);
  dlrt_buffer_free(cbuf);
  free(values);
  free(a16);
  free(b16);
  free(c16);
  for (int t = 0; t < 3; t++)
    free(got[t]);
}

/* fp16/bf16 GEMM (fp32 accumulation): DLRT_OK with a correct product (on
 * the CPU), or DLRT_ERR_UNSUPPORTED (elsewhere). Small integers keep the
 * inputs exact in both. */
static void test_half(dlrt_device_t *dev, dlrt_stream_t *stream, dlrt_dtype dtype) {
  const char *spec = dlrt_device_spec(dev);
  const int64_t m = 37, n = 53, k = 29;
  uint16_t (*to16)(float) = dtype == DLRT_F16 ? float_to_half : float_to_bf16;
  float (*from16)(uint16_t) = dtype == DLRT_F16 ? half_to_float : bf16_to_float;
  float *a = malloc((size_t)(m * k) * sizeof *a),
        *b = malloc((size_t)(k * n) * sizeof *b);
  uint16_t *a16 = malloc((size_t)(m * k) * 2), *b16 = malloc((size_t)(k * n) * 2);
  uint16_t *c16 = malloc((size_t)(m * n) * 2);
  dlrt_buffer_t *abuf = NULL, *bbuf = NULL, *cbuf = NULL;
  for (int64_t i = 0; i < m * k; i++) {
    a[i] = (float)((i * 7) % 9 - 4);
    a16[i] = to16(a[i]);
  }
  for (int64_t i = 0; i < k * n; i++) {
    b[i] = (float)((i * 5) % 9 - 4);
    b16[i] = to16(b[i]);
  }
  abuf = upload_buffer(dev, a16, (size_t)(m * k) * 2);
  bbuf = upload_buffer(dev, b16, (size_t)(k * n) * 2);
  if (dlrt_buffer_alloc(dev, (size_t)(m * n) * 2, NULL, &cbuf) != DLRT_OK || !abuf ||
      !bbuf) {
    ok(0, "%s: %s operands: %s", spec, dlrt_dtype_name(dtype), dlrt_last_error());
    goto done;
  }
  dlrt_gemm_desc d = dlrt_gemm_desc_make(dtype, 0, 0, m, n, k, 1.0f, 0.0f);
  int status = dlrt_gemm(stream, &d, abuf, 0, bbuf, 0, cbuf, 0);
  if (is_cpu(dev))
    is_status(status, DLRT_OK, "%s: %s GEMM", spec, dlrt_dtype_name(dtype));
  else
    ok(status == DLRT_OK || status == DLRT_ERR_UNSUPPORTED,
       "%s: %s GEMM is DLRT_OK or DLRT_ERR_UNSUPPORTED (got %s)", spec,
       dlrt_dtype_name(dtype), dlrt_err_name(status));
  if (!tap_check_op(status, "%s: %s GEMM 37x53x29", spec, dlrt_dtype_name(dtype)))
    goto done;
  status = dlrt_stream_synchronize(stream);
  if (status == DLRT_OK)
    status = dlrt_copy_d2h(c16, cbuf, 0, (size_t)(m * n) * 2, NULL);
  if (!tap_check(status, "%s: %s: run and read back", spec, dlrt_dtype_name(dtype)))
    goto done;
  double max_error = 0.0, largest = 0.0;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double sum = 0.0;
      for (int64_t p = 0; p < k; p++)
        sum += (double)a[i * k + p] * (double)b[p * n + j];
      double err = fabs((double)from16(c16[i * n + j]) - sum);
      if (!(err <= max_error))
        max_error = isnan(err) ? INFINITY : err;
      if (fabs(sum) > largest)
        largest = fabs(sum);
    }
  double relative = max_error / (largest > 0.0 ? largest : 1.0);
  diag("%s: %s: max |err| %.3g, max |ref| %.3g", spec, dlrt_dtype_name(dtype),
       max_error, largest);
  ok(relative <= HALF_TOLERANCE, "%s: %s: relative error %.3g <= %g", spec,
     dlrt_dtype_name(dtype), relative, HALF_TOLERANCE);
done:
  dlrt_buffer_free(abuf);
  dlrt_buffer_free(bbuf);
  dlrt_buffer_free(cbuf);
  free(a);
  free(b);
  free(a16);
  free(b16);
  free(c16);
}

/* 16-bit A and B with an fp32 C (c_f32), as a convolution's weight gradient
 * sums its pieces: C (m x n, ld n + 3, at an offset) = the sum over `pieces`
 * GEMMs of k / pieces columns each of A (m x k) times B^T (B n x k), beta 1
 * after the first. The values are multiples of 1/8 that fp16 and bf16 hold
 * exactly and the sums stay within fp32's 24 bits, so an fp32 C is the
 * exact sum; a 16-bit C, rounded after every piece, is not. `again`: then
 * once more with beta 1 (C twice the sum). */
static void test_c_f32(dlrt_device_t *dev, dlrt_stream_t *stream, dlrt_dtype dtype, int64_t m,
                       int64_t n, int64_t k, int pieces, int again) {
  const char *spec = dlrt_device_spec(dev), *type = dlrt_dtype_name(dtype);
  uint16_t (*to16)(float) = dtype == DLRT_F16 ? float_to_half : float_to_bf16;
  const int64_t ldc = n + 3, c_at = 5, c_count = c_at + m * ldc;
  const float sentinel = 1234.5f;
  uint16_t *a16 = malloc((size_t)(m * k) * 2), *b16 = malloc((size_t)(n * k) * 2);
  float *a = malloc((size_t)(m * k) * sizeof *a), *b = malloc((size_t)(n * k) * sizeof *b);
  float *c = malloc((size_t)c_count * sizeof *c);
  dlrt_buffer_t *abuf = NULL, *bbuf = NULL, *cbuf = NULL;
  for (int64_t i = 0; i < m * k; i++) a16[i] = to16(a[i] = (float)((i * 7) % 9 - 4) / 8.0f);
  for (int64_t i = 0; i < n * k; i++) b16[i] = to16(b[i] = (float)((i * 5) % 11 - 5) / 8.0f);
  for (int64_t i = 0; i < c_count; i++) c[i] = sentinel;
  abuf = upload_buffer(dev, a16, (size_t)(m * k) * 2);
  bbuf = upload_buffer(dev, b16, (size_t)(n * k) * 2);
  cbuf = upload_buffer(dev, c, (size_t)c_count * sizeof *c);
  int status = abuf && bbuf && cbuf ? DLRT_OK : DLRT_ERR_OOM;
  const int64_t kp = k / pieces;
  for (int q = 0; q < pieces + (again ? 1 : 0) && status == DLRT_OK; q++) {
    int piece = q % pieces;
    dlrt_gemm_desc d = dlrt_gemm_desc_make(dtype, 0, 1, m, n, kp, 1.0f, q ? 1.0f : 0.0f);
    d.lda = k, d.ldb = k, d.ldc = ldc;
    d.c_f32 = 1;
    status = dlrt_gemm(stream, &d, abuf, (size_t)(piece * kp) * 2, bbuf,
                       (size_t)(piece * kp) * 2, cbuf, (size_t)c_at * sizeof(float));
  }
  if (!tap_check_op(status, "%s: %s A and B, fp32 C: %d GEMM%s summing %lld x %lld x %lld",
                    spec, type, pieces + again, pieces + again > 1 ? "s" : "", (long long)m,
                    (long long)n, (long long)k))
    goto done;
  status = dlrt_stream_synchronize(stream);
  if (status == DLRT_OK) status = dlrt_copy_d2h(c, cbuf, 0, (size_t)c_count * sizeof *c, NULL);
  if (!tap_check(status, "%s: %s, fp32 C: run and read back", spec, type)) goto done;
  int64_t wrong = 0, touched = 0;
  for (int64_t i = 0; i < c_at; i++) touched += c[i] != sentinel;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < ldc; j++) {
      float got = c[c_at + i * ldc + j];
      if (j >= n) {
        touched += got != sentinel;
        continue;
      }
      double sum = 0.0;
      for (int64_t p = 0; p < k; p++) sum += (double)a[i * k + p] * (double)b[j * k + p];
      if ((double)got != (again ? 2.0 : 1.0) * sum) wrong++;
    }
  ok(wrong == 0 && touched == 0, "%s: %s, fp32 C: the exact sum in every element (%lld "
     "differ), nothing else written (%lld)", spec, type, (long long)wrong, (long long)touched);
done:
  dlrt_buffer_free(abuf);
  dlrt_buffer_free(bbuf);
  dlrt_buffer_free(cbuf);
  free(a16);
  free(b16);
  free(a);
  free(b);
  free(c);
}

/* `other`: another device, or NULL. */
static void test_bad_arguments(dlrt_device_t *dev, dlrt_stream_t *stream,
                               dlrt_device_t *other) {
  const char *spec = dlrt_device_spec(dev);
  enum { N = 8, BYTES = N * N * sizeof(float) };
  float ones[N * N], got[N * N];
  for (int i = 0; i < N * N; i++)
    ones[i] = 1.0f;
  dlrt_buffer_t *a = upload_buffer(dev, ones, BYTES),
                *b = upload_buffer(dev, ones, BYTES);
  dlrt_buffer_t *c = upload_buffer(dev, ones, BYTES);
  dlrt_buffer_t *c_short = upload_buffer(dev, ones, BYTES - sizeof(float));
  dlrt_buffer_t *foreign = other ? upload_buffer(other, ones, BYTES) : NULL;
  if (!a || !b || !c || !c_short) {
    ok(0, "%s: set up 8x8 operands: %s", spec, dlrt_last_error());
    goto done;
  }
  const dlrt_gemm_desc good = dlrt_gemm_desc_make(DLRT_F32, 0, 0, N, N, N, 2.0f, 0.0f);
  dlrt_gemm_desc d;
#define BAD(field_change, want, what)                                                  \
  do {                                                                                 \
    d = good;                                                                          \
    field_change;                                                                      \
    is_status(dlrt_gemm(stream, &d, a, 0, b, 0, c, 0), want, "%s: %s", spec, what);    \
  } while (0)
  BAD(d.m = -1, DLRT_ERR_INVALID_ARG, "m < 0");
  BAD(d.k = -1, DLRT_ERR_INVALID_ARG, "k < 0");
  BAD(d.batch = 0, DLRT_ERR_INVALID_ARG, "batch 0");
  BAD(d.lda = N - 1, DLRT_ERR_INVALID_ARG, "lda < k");
  BAD(d.ldb = N - 1, DLRT_ERR_INVALID_ARG, "ldb < n");
  BAD(d.ldc = N - 1, DLRT_ERR_INVALID_ARG, "ldc < n");
  BAD(d.c_f32 = 1, DLRT_ERR_INVALID_ARG, "an fp32 C (c_f32) beside fp32 A and B");
  BAD((d.batch = 2, d.stride_c = 0), DLRT_ERR_INVALID_ARG,
      "batch 2 writing one C (stride_c 0)");
  BAD((d.batch = 2, d.stride_c = N * N), DLRT_ERR_OUT_OF_RANGE,
      "batch 2: the second C is past the buffer");
#undef BAD
  is_status(dlrt_gemm(stream, &good, a, 0, b, 0, c_short, 0), DLRT_ERR_OUT_OF_RANGE,
            "%s: C buffer 4 bytes too small", spec);
  is_status(dlrt_gemm(stream, &good, a, 0, b, 0, c, 4), DLRT_ERR_OUT_OF_RANGE,
            "%s: C offset 4 runs past the end", spec);
  is_status(dlrt_gemm(stream, &good, a, 4, b, 0, c, 0), DLRT_ERR_OUT_OF_RANGE,
            "%s: A offset 4 runs past the end", spec);
  /* Room to spare, so that only the misalignment is wrong. */
  dlrt_buffer_t *a_roomy = NULL;
  int status = dlrt_buffer_alloc(dev, BYTES + 64, NULL, &a_roomy);
  if (status == DLRT_OK)
    is_status(dlrt_gemm(stream, &good, a_roomy, 2, b, 0, c, 0), DLRT_ERR_INVALID_ARG,
              "%s: A offset 2 is not a multiple of the element size", spec);
  else
    tap_check(status, "%s: allocate %d bytes", spec, BYTES + 64);
  dlrt_buffer_free(a_roomy);
  is_status(dlrt_gemm(stream, NULL, a, 0, b, 0, c, 0), DLRT_ERR_INVALID_ARG,
            "%s: NULL descriptor", spec);
  is_status(dlrt_gemm(stream, &good, NULL, 0, b, 0, c, 0), DLRT_ERR_INVALID_ARG,
            "%s: NULL A", spec);
  is_status(dlrt_gemm(stream, &good, a, 0, b, 0, NULL, 0), DLRT_ERR_INVALID_ARG,
            "%s: NULL C", spec);
  if (foreign) {
    is_status(dlrt_gemm(stream, &good, foreign, 0, b, 0, c, 0), DLRT_ERR_WRONG_DEVICE,
              "%s: A on %s", spec, dlrt_device_spec(other));
    is_status(dlrt_gemm(dlrt_device_default_stream(other), &good, a, 0, b, 0, c, 0),
              DLRT_ERR_WRONG_DEVICE, "%s: on a stream of %s", spec,
              dlrt_device_spec(other));
  } else {
    skip(2, "one device only: no operands elsewhere");
  }
  /* None of the refused calls may have touched C. */
  status = dlrt_stream_synchronize(stream);
  if (status == DLRT_OK)
    status = dlrt_copy_d2h(got, c, 0, BYTES, NULL);
  if (tap_check(status, "%s: read C back", spec))
    is_mem(got, ones, BYTES, "%s: refused calls left C as it was", spec);
done:
  dlrt_buffer_free(a);
  dlrt_buffer_free(b);
  dlrt_buffer_free(c);
  dlrt_buffer_free(c_short);
  dlrt_buffer_free(foreign);
}

static void test_desc_make(void) {
  for (int ta = 0; ta <= 1; ta++)
    for (int tb = 0; tb <= 1; tb++) {
      dlrt_gemm_desc d = dlrt_gemm_desc_make(DLRT_F32, ta, tb, 3, 5, 7, 0.5f, 2.0f);
      is_int(d.lda, ta ? 3 : 7, "desc_make(trans %d %d): lda = trans_a ? m : k", ta,
             tb);
      is_int(d.ldb, tb ? 7 : 5, "desc_make(trans %d %d): ldb = trans_b ? k : n", ta,
             tb);
      is_int(d.ldc, 5, "desc_make(trans %d %d): ldc = n", ta, tb);
      ok(d.dtype == DLRT_F32 && d.trans_a == ta && d.trans_b == tb && d.m == 3 &&
             d.n == 5 && d.k == 7 && d.alpha == 0.5f && d.beta == 2.0f &&
             d.batch == 1 && d.stride_a == 0 && d.stride_b == 0 && d.stride_c == 0,
         "desc_make(trans %d %d): shape, scalars, batch 1, strides 0", ta, tb);
    }
}

static void test_dtypes(void) {
  const struct {
    dlrt_dtype dtype;
    size_t size;
  } types[] = {
      {DLRT_F32, 4}, {DLRT_F16, 2}, {DLRT_BF16, 2}, {DLRT_I32, 4}, {DLRT_U8, 1}};
  enum { N = sizeof types / sizeof types[0] };
  int names_ok = 1;
  for (int i = 0; i < N; i++) {
    is_size(dlrt_dtype_size(types[i].dtype), types[i].size, "dlrt_dtype_size(%d)",
            (int)types[i].dtype);
    const char *name = dlrt_dtype_name(types[i].dtype);
    if (!name || !name[0])
      names_ok = 0;
    for (int j = 0; j < i && name; j++) {
      const char *other = dlrt_dtype_name(types[j].dtype);
      if (other && strcmp(name, other) == 0)
        names_ok = 0;
    }
  }
  ok(names_ok, "dlrt_dtype_name gives distinct non-empty names");
}

int main(void) {
  test_desc_make();
  test_dtypes();
  int count = dlrt_device_count();
  if (count < 1)
    bail_out("no devices: %s", dlrt_last_error());
  for (int i = 0; i < count; i++) {
    dlrt_device_t *dev = NULL, *other = NULL;
    dlrt_stream_t *stream = NULL;
    if (dlrt_device_get(i, &dev) != DLRT_OK ||
        dlrt_stream_create(dev, &stream) != DLRT_OK)
      bail_out("device %d: %s", i, dlrt_last_error());
    if (count > 1)
      dlrt_device_get((i + 1) % count, &other);
    diag("device %s", dlrt_device_spec(dev));
    int supported = 1;
    for (int c = 0; c < CASES && supported; c++)
      supported = test_case(dev, stream, &cases[c]);
    if (supported) {
      const dlrt_dtype halves[] = {DLRT_F16, DLRT_BF16};
      for (int h = 0; h < 2; h++) {
        test_half(dev, stream, halves[h]);
        test_c_f32(dev, stream, halves[h], 24, 40, 1024, 64, 0);
        test_c_f32(dev, stream, halves[h], 16, 16, 8192, 1, 1); /* OpenCL splits k */
        for (int c = 0; c < CASES; c++)
          test_half_case(dev, stream, &cases[c], halves[h]);
        for (int c = 0; c < HALF_CASES; c++)
          test_half_case(dev, stream, &half_cases[c], halves[h]);
        if (is_cpu(dev))
          test_half_threads(dev, stream, halves[h]);
      }
      test_bad_arguments(dev, stream, other);
    } else {
      skip(CASES - 1, "%s: no fp32 GEMM", dlrt_device_spec(dev));
    }
    dlrt_stream_destroy(stream);
  }
  dlrt_shutdown();
  return done_testing();
}
