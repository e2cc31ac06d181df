/*
 * test-elementwise.c — every dlrt_ew_op on every device against a host
 * reference: n = 0, 1, 1000 and 2^20 + 3 at distinct byte offsets, in place
 * (y aliasing x, and x and z), RELU's handling of negatives, infinities and
 * NaN, then argument checking.
 *
 * The inputs are small multiples of powers of two, so every op's exact result
 * is representable and the comparison is exact (whether or not a device fuses
 * the multiply-add). Bytes of y outside [y_off, y_off + 4n) must not change.
 * A device without a kernel reports SKIP. Points: computed at run time
 * (done_testing).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "tap.h"

#define GUARD 64
#define ALPHA 1.5f

typedef struct {
  int64_t n;
  size_t y_off, x_off, z_off; /* bytes, multiples of 4 */
} ew_shape;

static const ew_shape shapes[] = {
    {0, 4, 8, 12},
    {1, 0, 4, 8},
    {1000, 12, 28, 4},
    {(1 << 20) + 3, 4, 0, 8},
};
enum { SHAPES = sizeof shapes / sizeof shapes[0], IN_PLACE_SHAPE = 2 };

static int reads_x(dlrt_ew_op op) { return op != DLRT_EW_FILL; }
static int reads_z(dlrt_ew_op op) { return op == DLRT_EW_ADD || op == DLRT_EW_MUL; }

/* Exact in fp32: |x| <= 100/16, |z| <= 48/8, |y| <= 44/4. */
static float x_value(size_t i) { return (float)((int)(i * 37 % 201) - 100) / 16.0f; }
static float z_value(size_t i) { return (float)((int)(i * 53 % 97) - 48) / 8.0f; }
static float y_value(size_t i) { return (float)((int)(i * 11 % 89) - 44) / 4.0f; }

/* RELU keeps NaN: a NaN activation must reach the loss, where the
 * mixed-precision loss scaler looks for it. */
static float reference(dlrt_ew_op op, float alpha, float x, float y, float z) {
  switch (op) {
  case DLRT_EW_FILL:
    return alpha;
  case DLRT_EW_SCALE:
    return alpha * x;
  case DLRT_EW_AXPY:
    return alpha * x + y;
  case DLRT_EW_ADD:
    return x + z;
  case DLRT_EW_MUL:
    return x * z;
  case DLRT_EW_RELU:
    return isnan(x) ? x : x > 0.0f ? x : 0.0f;
  default:
    return NAN;
  }
}

/* Equal as numbers (0 == -0), or both NaN. */
static int same_value(float got, float want) {
  return got == want || (isnan(got) && isnan(want));
}

/* Host image of an operand buffer: a pattern around `count` values at `off`. */
static uint8_t *operand_image(size_t off, int64_t count, float (*value)(size_t),
                              uint32_t seed, size_t *bytes) {
  *bytes = off + (size_t)count * sizeof(float) + GUARD;
  uint8_t *image = malloc(*bytes);
  if (!image)
    bail_out("out of host memory");
  fill_pattern(image, *bytes, seed);
  for (int64_t i = 0; i < count; i++) {
    float v = value((size_t)i);
    memcpy(image + off + (size_t)i * sizeof v, &v, sizeof v);
  }
  return image;
}

static float load(const uint8_t *image, size_t off, int64_t i) {
  float v;
  memcpy(&v, image + off + (size_t)i * sizeof v, sizeof v);
  return v;
}

typedef enum { SEPARATE, Y_IS_X, Y_IS_X_IS_Z } aliasing;

/* The reference for element i, from y's image before the op; in place, x
 * (and z) are y's old values. */
static float expected_at(dlrt_ew_op op, aliasing alias, const uint8_t *y_img,
                         size_t y_off, int64_t i) {
  float yv = load(y_img, y_off, i);
  float xv = alias != SEPARATE ? yv : x_value((size_t)i);
  float zv = alias == Y_IS_X_IS_Z ? yv : z_value((size_t)i);
  return reference(op, ALPHA, xv, yv, zv);
}

/* One point: op over `shape` on `dev` matches the reference. */
static void test_op(dlrt_device_t *dev, dlrt_stream_t *stream, dlrt_ew_op op,
                    const ew_shape *shape, aliasing alias) {
  const char *spec = dlrt_device_spec(dev);
  const int64_t n = shape->n;
  char label[160];
  snprintf(label, sizeof label, "%s: %s, n = %lld, offsets y %zu x %zu z %zu%s", spec,
           dlrt_ew_op_name(op), (long long)n, shape->y_off, shape->x_off, shape->z_off,
           alias == Y_IS_X        ? ", in place (y is x)"
           : alias == Y_IS_X_IS_Z ? ", in place (y is x is z)"
                                  : "");
  size_t y_bytes = 0, x_bytes = 0, z_bytes = 0;
  /* In place, x's values are y's: y = op(y, ...). */
  uint8_t *y_img = operand_image(shape->y_off, n, alias != SEPARATE ? x_value : y_value,
                                 5, &y_bytes);
  uint8_t *x_img = NULL, *z_img = NULL, *got = malloc(y_bytes);
  dlrt_buffer_t *y = upload_buffer(dev, y_img, y_bytes), *x = NULL, *z = NULL;
  size_t x_off = shape->x_off, z_off = shape->z_off;
  if (alias != SEPARATE) {
    x = y;
    x_off = shape->y_off;
  } else if (reads_x(op)) {
    x_img = operand_image(shape->x_off, n, x_value, 6, &x_bytes);
    x = upload_buffer(dev, x_img, x_bytes);
  }
  if (alias == Y_IS_X_IS_Z) {
    z = y;
    z_off = shape->y_off;
  } else if (reads_z(op)) {
    z_img = operand_image(shape->z_off, n, z_value, 7, &z_bytes);
    z = upload_buffer(dev, z_img, z_bytes);
  }
  if (!y || !got || (reads_x(op) && !x) || (reads_z(op) && !z)) {
    ok(0, "%s: set up operands: %s", label, dlrt_last_error());
    goto done;
  }

  int status =
      dlrt_elementwise(stream, op, DLRT_F32, n, ALPHA, y, shape->y_off, x, x_off, z, z_off);
  if (!tap_check_op(status, "%s", label))
    goto done;
  status = dlrt_stream_synchronize(stream);
  if (status == DLRT_OK)
    status = dlrt_copy_d2h(got, y, 0, y_bytes, NULL);
  if (!tap_check(status, "%s: run and read back", label))
    goto done;

  size_t wrong = 0, first = 0;
  for (int64_t i = 0; i < n; i++)
    if (!same_value(load(got, shape->y_off, i),
                    expected_at(op, alias, y_img, shape->y_off, i)) &&
        wrong++ == 0)
      first = (size_t)i;
  if (wrong)
    diag("%s: %zu elements wrong; first [%zu] = %g, want %g", label, wrong, first,
         load(got, shape->y_off, (int64_t)first),
         expected_at(op, alias, y_img, shape->y_off, (int64_t)first));
  size_t end = shape->y_off + (size_t)n * sizeof(float);
  int outside_kept = memcmp(got, y_img, shape->y_off) == 0 &&
                     memcmp(got + end, y_img + end, GUARD) == 0;
  ok(wrong == 0 && outside_kept, "%s: matches the reference%s", label,
     outside_kept ? "" : " (bytes outside y's range changed)");
done:
  if (x != y)
    dlrt_buffer_free(x);
  if (z != y)
    dlrt_buffer_free(z);
  dlrt_buffer_free(y);
  free(y_img);
  free(x_img);
  free(z_img);
  free(got);
}

static void test_relu_specials(dlrt_device_t *dev, dlrt_stream_t *stream) {
  const char *spec = dlrt_device_spec(dev);
  const float in[] = {-INFINITY, INFINITY, -1.0f,  -0.0f,   0.0f, FLT_MAX,
                      -FLT_MAX,  3.0f,     1e-30f, -1e-30f, NAN};
  enum { N = sizeof in / sizeof in[0], NAN_AT = N - 1 };
  float out[N];
  dlrt_buffer_t *x = upload_buffer(dev, in, sizeof in), *y = NULL;
  if (!x || dlrt_buffer_alloc(dev, sizeof in, NULL, &y) != DLRT_OK) {
    ok(0, "%s: RELU specials: set up: %s", spec, dlrt_last_error());
    goto done;
  }
  int status = dlrt_elementwise(stream, DLRT_EW_RELU, DLRT_F32, N, 0.0f, y, 0, x, 0, NULL, 0);
  if (!tap_check_op(status,
                    "%s: RELU of -inf, inf, -1, -0, 0, +-FLT_MAX, 3, "
                    "+-1e-30, NaN",
                    spec))
    goto done;
  status = dlrt_stream_synchronize(stream);
  if (status == DLRT_OK)
    status = dlrt_copy_d2h(out, y, 0, sizeof out, NULL);
  if (!tap_check(status, "%s: RELU specials: run and read back", spec))
    goto done;
  int numbers_ok = 1;
  for (int i = 0; i < NAN_AT; i++) {
    float want = reference(DLRT_EW_RELU, 0.0f, in[i], 0.0f, 0.0f);
    if (!same_value(out[i], want)) {
      diag("%s: relu(%g) = %g, want %g", spec, in[i], out[i], want);
      numbers_ok = 0;
    }
  }
  ok(numbers_ok, "%s: RELU zeroes negatives and -inf, keeps the rest", spec);
  ok(isnan(out[NAN_AT]), "%s: RELU(NaN) is NaN (got %g)", spec, out[NAN_AT]);
done:
  dlrt_buffer_free(x);
  dlrt_buffer_free(y);
}

/* `other`: another device, or NULL. */
static void test_bad_arguments(dlrt_device_t *dev, dlrt_stream_t *stream,
                               dlrt_device_t *other) {
  const char *spec = dlrt_device_spec(dev);
  enum { N = 1024, BYTES = N * sizeof(float) };
  static float initial[N], got[N];
  for (int i = 0; i < N; i++)
    initial[i] = x_value((size_t)i);
  dlrt_buffer_t *y = upload_buffer(dev, initial, BYTES),
                *x = upload_buffer(dev, initial, BYTES);
  dlrt_buffer_t *z = upload_buffer(dev, initial, BYTES);
  dlrt_buffer_t *foreign = other ? upload_buffer(other, initial, BYTES) : NULL;
  if (!y || !x || !z) {
    ok(0, "%s: set up operands: %s", spec, dlrt_last_error());
    goto done;
  }
#define BAD(call, want, what)                                                          \
  is_status(dlrt_elementwise call, want, "%s: %s", spec, what)
  BAD((stream, DLRT_EW_SCALE, DLRT_F32, N, 2.0f, y, 0, NULL, 0, NULL, 0), DLRT_ERR_INVALID_ARG,
      "SCALE without x");
  BAD((stream, DLRT_EW_ADD, DLRT_F32, N, 2.0f, y, 0, x, 0, NULL, 0), DLRT_ERR_INVALID_ARG,
      "ADD without z");
  BAD((stream, DLRT_EW_MUL, DLRT_F32, N, 2.0f, y, 0, NULL, 0, z, 0), DLRT_ERR_INVALID_ARG,
      "MUL without x");
  BAD((stream, DLRT_EW_FILL, DLRT_F32, N, 2.0f, NULL, 0, NULL, 0, NULL, 0), DLRT_ERR_INVALID_ARG,
      "FILL without y");
  BAD((stream, DLRT_EW_FILL, DLRT_F32, N - 1, 2.0f, y, 2, NULL, 0, NULL, 0), DLRT_ERR_INVALID_ARG,
      "y offset 2: not a multiple of 4");
  BAD((stream, DLRT_EW_SCALE, DLRT_F32, N - 2, 2.0f, y, 0, x, 6, NULL, 0), DLRT_ERR_INVALID_ARG,
      "x offset 6: not a multiple of 4");
  BAD((stream, DLRT_EW_ADD, DLRT_F32, N - 1, 2.0f, y, 0, x, 0, z, 1), DLRT_ERR_INVALID_ARG,
      "z offset 1: not a multiple of 4");
  BAD((stream, DLRT_EW_FILL, DLRT_F32, N + 1, 2.0f, y, 0, NULL, 0, NULL, 0),
      DLRT_ERR_OUT_OF_RANGE, "n one past y's end");
  BAD((stream, DLRT_EW_SCALE, DLRT_F32, N, 2.0f, y, 0, x, 4, NULL, 0), DLRT_ERR_OUT_OF_RANGE,
      "x offset 4 runs past x's end");
  BAD((stream, DLRT_EW_ADD, DLRT_F32, N, 2.0f, y, 0, x, 0, z, 8), DLRT_ERR_OUT_OF_RANGE,
      "z offset 8 runs past z's end");
  BAD((stream, DLRT_EW_FILL, DLRT_F32, 1, 2.0f, y, SIZE_MAX - 3, NULL, 0, NULL, 0),
      DLRT_ERR_OUT_OF_RANGE, "y offset SIZE_MAX - 3 (offset + 4n wraps)");
  BAD((stream, DLRT_EW_FILL, DLRT_F32, INT64_MAX / 2, 2.0f, y, 0, NULL, 0, NULL, 0),
      DLRT_ERR_OUT_OF_RANGE, "n = INT64_MAX / 2 (4n overflows)");
  BAD((stream, DLRT_EW_FILL, DLRT_F32, -1, 2.0f, y, 0, NULL, 0, NULL, 0), DLRT_ERR_INVALID_ARG,
      "n < 0");
  BAD((stream, DLRT_EW_COUNT_, DLRT_F32, N, 2.0f, y, 0, x, 0, z, 0), DLRT_ERR_INVALID_ARG,
      "op DLRT_EW_COUNT_");
  BAD((stream, (dlrt_ew_op)-1, DLRT_F32, N, 2.0f, y, 0, x, 0, z, 0), DLRT_ERR_INVALID_ARG,
      "op -1");
  if (foreign) {
    BAD((stream, DLRT_EW_SCALE, DLRT_F32, N, 2.0f, y, 0, foreign, 0, NULL, 0),
        DLRT_ERR_WRONG_DEVICE, "x on another device");
    BAD((dlrt_device_default_stream(other), DLRT_EW_FILL, DLRT_F32, N, 2.0f, y, 0, NULL, 0, NULL,
         0),
        DLRT_ERR_WRONG_DEVICE, "on another device's stream");
  } else {
    skip(2, "one device only: no operands elsewhere");
  }
#undef BAD
  int status = dlrt_stream_synchronize(stream);
  if (status == DLRT_OK)
    status = dlrt_copy_d2h(got, y, 0, BYTES, NULL);
  if (tap_check(status, "%s: read y back", spec))
    is_mem(got, initial, BYTES, "%s: refused calls left y as it was", spec);
done:
  dlrt_buffer_free(y);
  dlrt_buffer_free(x);
  dlrt_buffer_free(z);
  dlrt_buffer_free(foreign);
}

static void test_names(void) {
  int distinct = 1;
  for (int op = 0; op < DLRT_EW_COUNT_; op++) {
    const char *name = dlrt_ew_op_name((dlrt_ew_op)op);
    ok(name != NULL && name[0] != '\0', "dlrt_ew_op_name(%d) = \"%s\"", op,
       name ? name : "(NULL)");
    for (int other = 0; other < op && name; other++) {
      const char *b = dlrt_ew_op_name((dlrt_ew_op)other);
      if (b && strcmp(name, b) == 0)
        distinct = 0;
    }
  }
  ok(distinct, "the op names are distinct");
}

int main(void) {
  test_names();
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
    for (int op = 0; op < DLRT_EW_COUNT_; op++) {
      for (int s = 0; s < SHAPES; s++)
        test_op(dev, stream, (dlrt_ew_op)op, &shapes[s], SEPARATE);
      if (reads_x((dlrt_ew_op)op))
        test_op(dev, stream, (dlrt_ew_op)op, &shapes[IN_PLACE_SHAPE], Y_IS_X);
      if (reads_z((dlrt_ew_op)op))
        test_op(dev, stream, (dlrt_ew_op)op, &shapes[IN_PLACE_SHAPE], Y_IS_X_IS_Z);
    }
    test_relu_specials(dev, stream);
    test_bad_arguments(dev, stream, other);
    dlrt_stream_destroy(stream);
  }
  dlrt_shutdown();
  return done_testing();
}
