/*
 * test-copy.c — host-to-device, device-to-host and device-to-device copies and
 * memset on every device and between every pair of devices, blocking and on a
 * stream, from malloc'd and pinned host memory, at sizes from 0 bytes to past
 * the bounce-buffer chunk, at unaligned offsets; strided rows to and from
 * packed device memory; then argument checking.
 *
 * Every destination is first filled with a background pattern and read back
 * whole, so a copy that writes a byte too many (or too few) is caught.
 * Points: computed at run time (done_testing), as they depend on the devices.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "tap.h"

#define MiB ((size_t)1 << 20)
/* Bytes after the copied range that must keep the background. */
#define GUARD 16
/* Larger than one bounce-buffer chunk, and odd, so that a cross-backend copy
 * needs several chunks and a short last one. */
#define LARGE (33 * MiB + 3)

typedef struct {
  size_t bytes, dst_off, src_off;
} copy_case;

static const copy_case copy_cases[] = {
    {0, 0, 0}, {1, 0, 0}, {7, 3, 5}, {4097, 64, 1}, {LARGE, 5, 3},
};
enum { COPY_CASES = sizeof copy_cases / sizeof copy_cases[0] };

/* Room for any case: the largest offset plus the largest copy plus the guard. */
#define SPAN (LARGE + 64 + GUARD)

/* Shared host data: what copies carry (source) and what every destination
 * holds before the copy (background). */
static uint8_t *source_data, *background;

typedef enum { HOST_MALLOC, HOST_PINNED } host_kind;
static const char *const host_kind_name[] = {"malloc", "pinned"};

static void *host_get(dlrt_device_t *dev, host_kind kind, size_t bytes) {
  if (bytes == 0)
    bytes = 1; /* a zero-byte copy still gets a valid pointer */
  if (kind == HOST_MALLOC)
    return malloc(bytes);
  void *p = NULL;
  return dlrt_host_alloc(dev, bytes, &p) == DLRT_OK ? p : NULL;
}

static void host_put(host_kind kind, void *p) {
  if (kind == HOST_MALLOC)
    free(p);
  else
    dlrt_host_free(p);
}

/* A buffer holding `bytes` of `content`, or NULL (after a failed point). */
static dlrt_buffer_t *buffer_with(dlrt_device_t *dev, const void *content, size_t bytes,
                                  const char *label) {
  dlrt_buffer_t *buf = upload_buffer(dev, content, bytes);
  if (!buf)
    ok(0, "%s: set up a %zu-byte buffer: %s", label, bytes, dlrt_last_error());
  return buf;
}

/* The expected destination: background with the case's source bytes at
 * dst_off. */
static uint8_t *expected_after(const copy_case *c, size_t size) {
  uint8_t *want = malloc(size);
  memcpy(want, background, size);
  memcpy(want + c->dst_off, source_data + c->src_off, c->bytes);
  return want;
}

/* One point: `status` (of the copy, the synchronize and the read-back) is OK
 * and `got` holds what `want` does. */
static void check_result(int status, const uint8_t *got, const uint8_t *want,
                         size_t size, const char *label) {
  if (status != DLRT_OK)
    tap_check(status, "%s", label);
  else
    is_mem(got, want, size, "%s", label);
}

static int finish(int status, dlrt_stream_t *stream) {
  if (status == DLRT_OK && stream)
    status = dlrt_stream_synchronize(stream);
  return status;
}

static void test_h2d(dlrt_device_t *dev, host_kind kind, dlrt_stream_t *stream,
                     const copy_case *c) {
  char label[160];
  snprintf(label, sizeof label, "%s: h2d %zu B to +%zu from %s+%zu, %s",
           dlrt_device_spec(dev), c->bytes, c->dst_off, host_kind_name[kind],
           c->src_off, stream ? "on a stream" : "blocking");
  size_t size = c->dst_off + c->bytes + GUARD;
  dlrt_buffer_t *buf = buffer_with(dev, background, size, label);
  uint8_t *src = host_get(dev, kind, c->src_off + c->bytes);
  uint8_t *got = malloc(size);
  if (!buf || !src || !got) {
    ok(0, "%s: allocations", label);
    goto done;
  }
  memcpy(src, source_data, c->src_off + c->bytes);
  int status = dlrt_copy_h2d(buf, c->dst_off, src + c->src_off, c->bytes, stream);
  status = finish(status, stream);
  if (status == DLRT_OK)
    status = dlrt_copy_d2h(got, buf, 0, size, NULL);
  uint8_t *want = expected_after(c, size);
  check_result(status, got, want, size, label);
  free(want);
done:
  free(got);
  if (src)
    host_put(kind, src);
  dlrt_buffer_free(buf);
}

static void test_d2h(dlrt_device_t *dev, host_kind kind, dlrt_stream_t *stream,
                     const copy_case *c) {
  char label[160];
  snprintf(label, sizeof label, "%s: d2h %zu B from +%zu to %s+%zu, %s",
           dlrt_device_spec(dev), c->bytes, c->src_off, host_kind_name[kind],
           c->dst_off, stream ? "on a stream" : "blocking");
  size_t size = c->dst_off + c->bytes + GUARD;
  dlrt_buffer_t *buf =
      buffer_with(dev, source_data, c->src_off + c->bytes + GUARD, label);
  uint8_t *dst = host_get(dev, kind, size);
  if (!buf || !dst) {
    ok(0, "%s: allocations", label);
    goto done;
  }
  memcpy(dst, background, size);
  int status = dlrt_copy_d2h(dst + c->dst_off, buf, c->src_off, c->bytes, stream);
  status = finish(status, stream);
  uint8_t *want = expected_after(c, size);
  check_result(status, dst, want, size, label);
  free(want);
done:
  if (dst)
    host_put(kind, dst);
  dlrt_buffer_free(buf);
}

static void test_d2d(dlrt_device_t *dst_dev, dlrt_device_t *src_dev,
                     dlrt_stream_t *stream, const char *stream_name,
                     const copy_case *c) {
  char label[160];
  snprintf(label, sizeof label, "d2d %s+%zu <- %s+%zu, %zu B, %s",
           dlrt_device_spec(dst_dev), c->dst_off, dlrt_device_spec(src_dev), c->src_off,
           c->bytes, stream_name);
  size_t size = c->dst_off + c->bytes + GUARD;
  dlrt_buffer_t *src =
      buffer_with(src_dev, source_data, c->src_off + c->bytes + GUARD, label);
  dlrt_buffer_t *dst = buffer_with(dst_dev, background, size, label);
  uint8_t *got = malloc(size);
  if (src && dst && got) {
    int status = dlrt_copy_d2d(dst, c->dst_off, src, c->src_off, c->bytes, stream);
    status = finish(status, stream);
    if (status == DLRT_OK)
      status = dlrt_copy_d2h(got, dst, 0, size, NULL);
    uint8_t *want = expected_after(c, size);
    check_result(status, got, want, size, label);
    free(want);
  }
  free(got);
  dlrt_buffer_free(src);
  dlrt_buffer_free(dst);
}

/* Two ranges of one buffer: a copy may stay inside a single allocation. */
static void test_d2d_same_buffer(dlrt_device_t *dev) {
  const char *label = "d2d between two ranges of one buffer";
  enum { SIZE = 4097 };
  dlrt_buffer_t *buf = buffer_with(dev, source_data, SIZE, label);
  uint8_t got[SIZE], want[SIZE];
  if (!buf)
    return;
  int status = dlrt_copy_d2d(buf, 2048, buf, 7, 1000, NULL);
  if (status == DLRT_OK)
    status = dlrt_copy_d2h(got, buf, 0, SIZE, NULL);
  memcpy(want, source_data, SIZE);
  memcpy(want + 2048, source_data + 7, 1000);
  char full[160];
  snprintf(full, sizeof full, "%s: %s (+7 -> +2048, 1000 B)", dlrt_device_spec(dev),
           label);
  check_result(status, got, want, SIZE, full);
  dlrt_buffer_free(buf);
}

typedef struct {
  size_t size, offset, bytes;
} memset_case;

static void test_memset(dlrt_device_t *dev, dlrt_stream_t *stream) {
  const memset_case cases[] = {
      {4097, 3, 1001},
      {4097, 4096, 1},
      {4097, 0, 0},
      {4097, 0, 4097},
      {LARGE + GUARD, 5, LARGE - 5},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const memset_case *c = &cases[i];
    char label[160];
    snprintf(label, sizeof label, "%s: memset 0xAB over %zu B at +%zu of %zu, %s",
             dlrt_device_spec(dev), c->bytes, c->offset, c->size,
             stream ? "on a stream" : "blocking");
    dlrt_buffer_t *buf = buffer_with(dev, background, c->size, label);
    uint8_t *got = malloc(c->size), *want = malloc(c->size);
    if (buf && got && want) {
      int status = dlrt_memset(buf, c->offset, 0xAB, c->bytes, stream);
      status = finish(status, stream);
      if (status == DLRT_OK)
        status = dlrt_copy_d2h(got, buf, 0, c->size, NULL);
      memcpy(want, background, c->size);
      memset(want + c->offset, 0xAB, c->bytes);
      check_result(status, got, want, c->size, label);
    }
    free(got);
    free(want);
    dlrt_buffer_free(buf);
  }
}

/* `other` is another device, or NULL when there is only one. */
static void test_bad_arguments(dlrt_device_t *dev, dlrt_device_t *other) {
  enum { SIZE = 4096 };
  const char *spec = dlrt_device_spec(dev);
  dlrt_buffer_t *buf = buffer_with(dev, background, SIZE, "bad arguments");
  dlrt_buffer_t *buf2 = buffer_with(dev, background, SIZE, "bad arguments");
  static uint8_t host[2 * SIZE];
  if (!buf || !buf2)
    goto done;

  is_status(dlrt_copy_h2d(NULL, 0, host, 1, NULL), DLRT_ERR_INVALID_ARG,
            "%s: h2d to a NULL buffer", spec);
  is_status(dlrt_copy_d2h(host, NULL, 0, 1, NULL), DLRT_ERR_INVALID_ARG,
            "%s: d2h from a NULL buffer", spec);
  is_status(dlrt_copy_d2d(NULL, 0, buf, 0, 1, NULL), DLRT_ERR_INVALID_ARG,
            "%s: d2d to a NULL buffer", spec);
  is_status(dlrt_copy_d2d(buf, 0, NULL, 0, 1, NULL), DLRT_ERR_INVALID_ARG,
            "%s: d2d from a NULL buffer", spec);
  is_status(dlrt_memset(NULL, 0, 0, 1, NULL), DLRT_ERR_INVALID_ARG,
            "%s: memset of a NULL buffer", spec);
  is_status(dlrt_copy_h2d(buf, 0, NULL, 16, NULL), DLRT_ERR_INVALID_ARG,
            "%s: h2d from a NULL host pointer", spec);
  is_status(dlrt_copy_d2h(NULL, buf, 0, 16, NULL), DLRT_ERR_INVALID_ARG,
            "%s: d2h to a NULL host pointer", spec);

  is_status(dlrt_copy_h2d(buf, SIZE - 6, host, 7, NULL), DLRT_ERR_OUT_OF_RANGE,
            "%s: h2d one byte past the end", spec);
  is_status(dlrt_copy_h2d(buf, 0, host, SIZE + 1, NULL), DLRT_ERR_OUT_OF_RANGE,
            "%s: h2d of size + 1 bytes", spec);
  is_status(dlrt_copy_h2d(buf, SIZE_MAX, host, 2, NULL), DLRT_ERR_OUT_OF_RANGE,
            "%s: h2d at offset SIZE_MAX (offset + bytes wraps)", spec);
  is_status(dlrt_copy_h2d(buf, 2, host, SIZE_MAX, NULL), DLRT_ERR_OUT_OF_RANGE,
            "%s: h2d of SIZE_MAX bytes", spec);
  is_status(dlrt_copy_d2h(host, buf, SIZE - 96, 97, NULL), DLRT_ERR_OUT_OF_RANGE,
            "%s: d2h one byte past the end", spec);
  is_status(dlrt_copy_d2h(host, buf, SIZE_MAX - 1, 4, NULL), DLRT_ERR_OUT_OF_RANGE,
            "%s: d2h at offset SIZE_MAX - 1", spec);
  is_status(dlrt_copy_d2d(buf2, 0, buf, SIZE - 99, 100, NULL), DLRT_ERR_OUT_OF_RANGE,
            "%s: d2d reading past the source's end", spec);
  is_status(dlrt_copy_d2d(buf2, SIZE - 99, buf, 0, 100, NULL), DLRT_ERR_OUT_OF_RANGE,
            "%s: d2d writing past the destination's end", spec);
  is_status(dlrt_copy_d2d(buf2, SIZE_MAX, buf, 0, 2, NULL), DLRT_ERR_OUT_OF_RANGE,
            "%s: d2d at destination offset SIZE_MAX", spec);
  is_status(dlrt_memset(buf, SIZE - 96, 0xAB, 97, NULL), DLRT_ERR_OUT_OF_RANGE,
            "%s: memset one byte past the end", spec);
  is_status(dlrt_memset(buf, SIZE_MAX, 0, 2, NULL), DLRT_ERR_OUT_OF_RANGE,
            "%s: memset at offset SIZE_MAX", spec);

  /* A refused copy writes nothing, not even its in-range part. */
  uint8_t got[2 * SIZE], want[2 * SIZE];
  int status = dlrt_copy_d2h(got, buf, 0, SIZE, NULL);
  if (status == DLRT_OK)
    status = dlrt_copy_d2h(got + SIZE, buf2, 0, SIZE, NULL);
  memcpy(want, background, SIZE);
  memcpy(want + SIZE, background, SIZE);
  check_result(status, got, want, 2 * SIZE,
               "refused copies and memsets left both buffers untouched");

  tap_check(dlrt_copy_h2d(buf, SIZE, host, 0, NULL),
            "%s: an empty copy at offset == size is a valid no-op", spec);

  if (!other) {
    skip(4, "one device only: no stream of another device to pass");
    goto done;
  }
  dlrt_stream_t *foreign = dlrt_device_default_stream(other);
  is_status(dlrt_copy_h2d(buf, 0, host, 16, foreign), DLRT_ERR_WRONG_DEVICE,
            "%s: h2d on a stream of %s", spec, dlrt_device_spec(other));
  is_status(dlrt_copy_d2h(host, buf, 0, 16, foreign), DLRT_ERR_WRONG_DEVICE,
            "%s: d2h on a stream of %s", spec, dlrt_device_spec(other));
  is_status(dlrt_memset(buf, 0, 0, 16, foreign), DLRT_ERR_WRONG_DEVICE,
            "%s: memset on a stream of %s", spec, dlrt_device_spec(other));
  is_status(dlrt_copy_d2d(buf2, 0, buf, 0, 16, foreign), DLRT_ERR_WRONG_DEVICE,
            "%s: d2d within it on a stream of %s (neither end's device)", spec,
            dlrt_device_spec(other));
done:
  dlrt_buffer_free(buf);
  dlrt_buffer_free(buf2);
}

/* Rows: `rows` of `width` bytes, `pitch` apart on the host, packed on the
 * device from `dev_off`; both directions, the background kept around them. */
typedef struct {
  size_t rows, width, pitch, dev_off;
} rows_case;

static const rows_case rows_cases[] = {
    {0, 16, 16, 0}, {1, 7, 7, 3}, {32, 100, 400, 5}, {5, 4097, 9000, 64}, {64, 676, 64 * 676, 0},
};
enum { ROWS_CASES = sizeof rows_cases / sizeof rows_cases[0] };

static void test_rows(dlrt_device_t *dev, host_kind kind, dlrt_stream_t *stream,
                      const rows_case *c) {
  const char *spec = dlrt_device_spec(dev);
  size_t packed = c->rows * c->width, host_span = c->rows ? (c->rows - 1) * c->pitch + c->width : 0;
  size_t dev_bytes = c->dev_off + packed + GUARD, host_bytes = host_span + GUARD;
  dlrt_buffer_t *buf = NULL;
  uint8_t *host = host_get(dev, kind, host_bytes), *got = malloc(dev_bytes > host_bytes ? dev_bytes : host_bytes);
  uint8_t *want = malloc(dev_bytes > host_bytes ? dev_bytes : host_bytes);
  int rc = host && got && want ? dlrt_buffer_alloc(dev, dev_bytes, NULL, &buf) : DLRT_ERR_OOM;
  if (rc < 0) {
    ok(0, "%s: rows %zu x %zu: setup: %s", spec, c->rows, c->width, dlrt_last_error());
    ok(0, "%s: rows %zu x %zu: setup", spec, c->rows, c->width);
    goto done;
  }
  /* Host to device: rows from a strided source, packed after the offset. */
  memcpy(host, source_data, host_bytes);
  rc = dlrt_copy_h2d(buf, 0, background, dev_bytes, NULL);
  if (rc == DLRT_OK) rc = dlrt_copy_h2d_rows(buf, c->dev_off, host, c->pitch, c->width, c->rows, stream);
  if (rc == DLRT_OK && stream) rc = dlrt_stream_synchronize(stream);
  if (rc == DLRT_OK) rc = dlrt_copy_d2h(got, buf, 0, dev_bytes, NULL);
  memcpy(want, background, dev_bytes);
  for (size_t r = 0; r < c->rows; r++)
    memcpy(want + c->dev_off + r * c->width, source_data + r * c->pitch, c->width);
  ok(rc == DLRT_OK && memcmp(got, want, dev_bytes) == 0,
     "%s: h2d_rows %s, %zu rows of %zu bytes %zu apart, to offset %zu%s", spec,
     host_kind_name[kind], c->rows, c->width, c->pitch, c->dev_off, stream ? ", on a stream" : "");
  /* Device to host: packed rows out to a strided destination. */
  memcpy(host, background, host_bytes);
  rc = dlrt_copy_h2d(buf, 0, source_data, dev_bytes, NULL);
  if (rc == DLRT_OK) rc = dlrt_copy_d2h_rows(host, c->pitch, buf, c->dev_off, c->width, c->rows, stream);
  if (rc == DLRT_OK && stream) rc = dlrt_stream_synchronize(stream);
  memcpy(want, background, host_bytes);
  for (size_t r = 0; r < c->rows; r++)
    memcpy(want + r * c->pitch, source_data + c->dev_off + r * c->width, c->width);
  ok(rc == DLRT_OK && memcmp(host, want, host_bytes) == 0,
     "%s: d2h_rows %s, %zu rows of %zu bytes %zu apart, from offset %zu%s", spec,
     host_kind_name[kind], c->rows, c->width, c->pitch, c->dev_off, stream ? ", on a stream" : "");
done:
  dlrt_buffer_free(buf);
  host_put(kind, host);
  free(got);
  free(want);
}

static void test_rows_arguments(dlrt_device_t *dev) {
  const char *spec = dlrt_device_spec(dev);
  dlrt_buffer_t *buf = NULL;
  if (dlrt_buffer_alloc(dev, 256, NULL, &buf) != DLRT_OK) {
    ok(0, "%s: rows arguments: setup: %s", spec, dlrt_last_error());
    return;
  }
  uint8_t host[1024];
  is_status(dlrt_copy_h2d_rows(buf, 0, host, 8, 16, 2, NULL), DLRT_ERR_INVALID_ARG,
            "%s: h2d_rows with a pitch shorter than a row", spec);
  is_status(dlrt_copy_d2h_rows(host, 64, buf, 0, 64, 5, NULL), DLRT_ERR_OUT_OF_RANGE,
            "%s: d2h_rows past the buffer's end", spec);
  is_status(dlrt_copy_h2d_rows(buf, 0, NULL, 16, 16, 2, NULL), DLRT_ERR_INVALID_ARG,
            "%s: h2d_rows from NULL", spec);
  dlrt_buffer_free(buf);
}

static void test_device(dlrt_device_t *dev, dlrt_stream_t *stream,
                        dlrt_device_t *other) {
  diag("device %s", dlrt_device_spec(dev));
  for (int kind = HOST_MALLOC; kind <= HOST_PINNED; kind++)
    for (int blocking = 1; blocking >= 0; blocking--)
      for (int i = 0; i < COPY_CASES; i++) {
        test_h2d(dev, kind, blocking ? NULL : stream, &copy_cases[i]);
        test_d2h(dev, kind, blocking ? NULL : stream, &copy_cases[i]);
      }
  for (int blocking = 1; blocking >= 0; blocking--)
    for (int i = 0; i < COPY_CASES; i++)
      test_d2d(dev, dev, blocking ? NULL : stream,
               blocking ? "blocking" : "on a stream", &copy_cases[i]);
  for (int kind = HOST_MALLOC; kind <= HOST_PINNED; kind++)
    for (int i = 0; i < ROWS_CASES; i++) test_rows(dev, kind, i % 2 ? stream : NULL, &rows_cases[i]);
  test_rows_arguments(dev);
  test_d2d_same_buffer(dev);
  test_memset(dev, NULL);
  test_memset(dev, stream);
  test_bad_arguments(dev, other);
}

int main(void) {
  source_data = malloc(SPAN);
  background = malloc(SPAN);
  if (!source_data || !background)
    bail_out("cannot allocate %zu bytes of host test data", 2 * (size_t)SPAN);
  fill_pattern(source_data, SPAN, 1);
  fill_pattern(background, SPAN, 2);

  int count = dlrt_device_count();
  if (count < 1)
    bail_out("no devices (dlrt_device_count() = %d): %s", count, dlrt_last_error());
  enum { MAX_DEVICES = 16 };
  if (count > MAX_DEVICES)
    count = MAX_DEVICES;
  dlrt_device_t *devs[MAX_DEVICES];
  dlrt_stream_t *streams[MAX_DEVICES];
  for (int i = 0; i < count; i++) {
    streams[i] = NULL;
    if (dlrt_device_get(i, &devs[i]) != DLRT_OK)
      bail_out("dlrt_device_get(%d): %s", i, dlrt_last_error());
    if (dlrt_stream_create(devs[i], &streams[i]) != DLRT_OK)
      bail_out("dlrt_stream_create(%s): %s", dlrt_device_spec(devs[i]),
               dlrt_last_error());
  }

  for (int i = 0; i < count; i++)
    test_device(devs[i], streams[i], count > 1 ? devs[(i + 1) % count] : NULL);

  /* Between devices: blocking, on the destination's stream, on the source's. */
  for (int d = 0; d < count; d++)
    for (int s = 0; s < count; s++) {
      if (d == s)
        continue;
      for (int i = 0; i < COPY_CASES; i++) {
        test_d2d(devs[d], devs[s], NULL, "blocking", &copy_cases[i]);
        test_d2d(devs[d], devs[s], streams[d], "destination's stream", &copy_cases[i]);
        test_d2d(devs[d], devs[s], streams[s], "source's stream", &copy_cases[i]);
      }
    }
  if (count == 1)
    skip(1, "one device only: no copies between devices");

  for (int i = 0; i < count; i++)
    dlrt_stream_destroy(streams[i]);
  free(source_data);
  free(background);
  dlrt_shutdown();
  return done_testing();
}
