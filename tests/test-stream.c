/*
 * test-stream.c — streams and events: in-order execution on one stream,
 * ordering between streams and devices with events, event timing, and the
 * caching allocator's stream safety (memory freed while a stream still writes
 * it must not be handed to another stream before that work ends).
 *
 * The ordering tests need work that takes long enough for a missing wait to
 * show: a GEMM of two n x n all-ones matrices (every element of the product
 * is exactly n), n = 1024 (tens of milliseconds on a CPU), 4096 on a discrete
 * GPU. Where a device has no fp32 GEMM those tests are skipped.
 * Points: computed at run time (done_testing).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "tap.h"

typedef struct {
  dlrt_device_t *dev;
  const char *spec;
  int host_addressable;
  int64_t n;
  size_t bytes;         /* one n x n fp32 matrix */
  dlrt_buffer_t *a, *b; /* all ones */
  float *host;          /* pinned, n x n: where results are read back */
  dlrt_gemm_desc desc;  /* C = A * B */
  char no_gemm[256];    /* why there is no GEMM here; "" when there is */
} big_gemm;

static int enqueue_gemm(big_gemm *g, dlrt_stream_t *stream, dlrt_buffer_t *c) {
  return dlrt_gemm(stream, &g->desc, g->a, 0, g->b, 0, c, 0);
}

/* Elements of `v` that differ from `want` (bitwise, so -0.0 and NaN count). */
static size_t count_other_than(const float *v, size_t count, float want) {
  size_t bad = 0;
  for (size_t i = 0; i < count; i++)
    if (memcmp(&v[i], &want, sizeof want) != 0)
      bad++;
  return bad;
}

/* Reads `buf` into g->host on `stream` and waits for it. */
static int read_back(big_gemm *g, dlrt_buffer_t *buf, dlrt_stream_t *stream) {
  int status = dlrt_copy_d2h(g->host, buf, 0, g->bytes, stream);
  if (status == DLRT_OK)
    status = dlrt_stream_synchronize(stream);
  return status;
}

/* Uploads the operands and runs the GEMM once: that checks it exists here and
 * builds any kernels, so later timings measure the GEMM itself. */
static void big_gemm_setup(big_gemm *g, dlrt_device_t *dev) {
  memset(g, 0, sizeof *g);
  g->dev = dev;
  g->spec = dlrt_device_spec(dev);
  dlrt_device_props props;
  if (dlrt_device_props_get(dev, &props) != DLRT_OK)
    bail_out("dlrt_device_props_get(%s): %s", g->spec, dlrt_last_error());
  g->host_addressable = props.host_addressable;
  g->n = props.kind == DLRT_DEVICE_DISCRETE ? 4096 : 1024;
  g->bytes = (size_t)(g->n * g->n) * sizeof(float);
  g->desc = dlrt_gemm_desc_make(DLRT_F32, 0, 0, g->n, g->n, g->n, 1.0f, 0.0f);

  void *host = NULL;
  int status = dlrt_host_alloc(dev, g->bytes, &host);
  if (status != DLRT_OK)
    bail_out("%s: dlrt_host_alloc(%zu): %s", g->spec, g->bytes, dlrt_last_error());
  g->host = host;
  for (size_t i = 0; i < (size_t)(g->n * g->n); i++)
    g->host[i] = 1.0f;
  dlrt_buffer_t *c = NULL;
  status = dlrt_buffer_alloc(dev, g->bytes, NULL, &g->a);
  if (status == DLRT_OK)
    status = dlrt_buffer_alloc(dev, g->bytes, NULL, &g->b);
  if (status == DLRT_OK)
    status = dlrt_buffer_alloc(dev, g->bytes, NULL, &c);
  if (status == DLRT_OK)
    status = dlrt_copy_h2d(g->a, 0, g->host, g->bytes, NULL);
  if (status == DLRT_OK)
    status = dlrt_copy_h2d(g->b, 0, g->host, g->bytes, NULL);
  if (status != DLRT_OK)
    bail_out("%s: setting up %zu-byte operands: %s", g->spec, g->bytes,
             dlrt_last_error());

  dlrt_stream_t *stream = dlrt_device_default_stream(dev);
  status = enqueue_gemm(g, stream, c);
  if (status == DLRT_OK)
    status = read_back(g, c, stream);
  if (status == DLRT_ERR_UNSUPPORTED) {
    snprintf(g->no_gemm, sizeof g->no_gemm, "no fp32 GEMM on %s: %s", g->spec,
             dlrt_last_error());
  } else if (tap_check(status, "%s: warm-up GEMM, n = %lld", g->spec,
                       (long long)g->n)) {
    is_u64(count_other_than(g->host, (size_t)(g->n * g->n), (float)g->n), 0,
           "%s: warm-up GEMM: every element is %lld", g->spec, (long long)g->n);
  } else {
    snprintf(g->no_gemm, sizeof g->no_gemm, "the warm-up GEMM on %s failed", g->spec);
  }
  dlrt_buffer_free(c);
}

static void big_gemm_teardown(big_gemm *g) {
  dlrt_buffer_free(g->a);
  dlrt_buffer_free(g->b);
  dlrt_host_free(g->host);
}

static void test_stream_basics(dlrt_device_t *dev) {
  const char *spec = dlrt_device_spec(dev);
  dlrt_stream_t *def = dlrt_device_default_stream(dev);
  ok(def != NULL, "%s: the default stream exists", spec);
  ok(def && dlrt_stream_device(def) == dev, "%s: it belongs to the device", spec);
  tap_check(dlrt_stream_synchronize(def), "%s: synchronize the default stream", spec);
  dlrt_stream_t *s = NULL;
  if (tap_check(dlrt_stream_create(dev, &s), "%s: dlrt_stream_create", spec)) {
    ok(s != def, "%s: a new stream is not the default stream", spec);
    ok(dlrt_stream_device(s) == dev, "%s: dlrt_stream_device of a new stream", spec);
    tap_check(dlrt_stream_synchronize(s), "%s: synchronize an idle stream", spec);
    dlrt_stream_destroy(s);
  }
  dlrt_stream_destroy(NULL);
  dlrt_event_destroy(NULL);
  ok(1, "%s: dlrt_stream_destroy(NULL) and dlrt_event_destroy(NULL) return", spec);
  is_status(dlrt_stream_create(NULL, &s), DLRT_ERR_INVALID_ARG,
            "dlrt_stream_create(NULL device)");
  is_status(dlrt_stream_create(dev, NULL), DLRT_ERR_INVALID_ARG,
            "%s: dlrt_stream_create(NULL out)", spec);
  dlrt_event_t *e = NULL;
  is_status(dlrt_event_create(NULL, &e), DLRT_ERR_INVALID_ARG,
            "dlrt_event_create(NULL device)");
  is_status(dlrt_event_create(dev, NULL), DLRT_ERR_INVALID_ARG,
            "%s: dlrt_event_create(NULL out)", spec);
}

/* One stream, no synchronization between steps: each step reads what the
 * previous one wrote (or overwrites what it read), so any reordering shows in
 * the result. y: 0xFF bytes -> x copied in -> y = 2 x + y -> x overwritten. */
static void test_in_order(dlrt_device_t *dev) {
  const char *spec = dlrt_device_spec(dev);
  enum { COUNT = 1 << 20 };
  const size_t bytes = COUNT * sizeof(float);
  dlrt_stream_t *s = NULL;
  dlrt_buffer_t *x = NULL, *y = NULL;
  void *mem[4] = {NULL, NULL, NULL, NULL};
  int status = dlrt_stream_create(dev, &s);
  if (status == DLRT_OK)
    status = dlrt_buffer_alloc(dev, bytes, s, &x);
  if (status == DLRT_OK)
    status = dlrt_buffer_alloc(dev, bytes, s, &y);
  for (int i = 0; i < 4 && status == DLRT_OK; i++)
    status = dlrt_host_alloc(dev, bytes, &mem[i]);
  if (!tap_check(status, "%s: in-order chain: set up", spec))
    goto done;
  float *first = mem[0], *second = mem[1], *out_y = mem[2], *out_x = mem[3];
  for (int i = 0; i < COUNT; i++) {
    first[i] = (float)(i % 17 - 8) * 0.25f; /* 3 * first[i] is exact */
    second[i] = (float)(i % 5) + 0.5f;
  }

  int ran_ew = 0;
  status = dlrt_memset(y, 0, 0xFF, bytes, s);
  if (status == DLRT_OK)
    status = dlrt_copy_h2d(x, 0, first, bytes, s);
  if (status == DLRT_OK)
    status = dlrt_copy_d2d(y, 0, x, 0, bytes, s);
  if (status == DLRT_OK) {
    int ew = dlrt_elementwise(s, DLRT_EW_AXPY, DLRT_F32, COUNT, 2.0f, y, 0, x, 0, NULL, 0);
    ran_ew = tap_check_op(ew, "%s: in-order chain: y = 2 x + y", spec);
  }
  if (status == DLRT_OK)
    status = dlrt_copy_h2d(x, 0, second, bytes, s);
  if (status == DLRT_OK)
    status = dlrt_copy_d2h(out_y, y, 0, bytes, s);
  if (status == DLRT_OK)
    status = dlrt_copy_d2h(out_x, x, 0, bytes, s);
  if (status == DLRT_OK)
    status = dlrt_stream_synchronize(s);
  if (!tap_check(status, "%s: memset, h2d, d2d, (axpy), h2d, d2h on one stream", spec))
    goto done;

  size_t wrong = 0;
  for (int i = 0; i < COUNT; i++)
    if (out_y[i] != (ran_ew ? 3.0f : 1.0f) * first[i])
      wrong++;
  is_u64(wrong, 0, "%s: y is %s x after the chain (elements wrong)", spec,
         ran_ew ? "3" : "1");
  is_mem(out_x, second, bytes,
         "%s: x took the second upload only after the d2d had read it", spec);
done:
  for (int i = 0; i < 4; i++)
    dlrt_host_free(mem[i]);
  dlrt_buffer_free(x);
  dlrt_buffer_free(y);
  dlrt_stream_destroy(s);
}

/* Stream B waits on an event that A records after a long GEMM; B's read must
 * see the product, never the zeros that were there before. */
static void test_event_orders_streams(big_gemm *g) {
  dlrt_stream_t *a = NULL, *b = NULL;
  dlrt_event_t *done_on_a = NULL;
  dlrt_buffer_t *c = NULL;
  int status = dlrt_stream_create(g->dev, &a);
  if (status == DLRT_OK)
    status = dlrt_stream_create(g->dev, &b);
  if (status == DLRT_OK)
    status = dlrt_event_create(g->dev, &done_on_a);
  if (status == DLRT_OK)
    status = dlrt_buffer_alloc(g->dev, g->bytes, a, &c);
  if (status == DLRT_OK)
    status = dlrt_memset(c, 0, 0, g->bytes, a);
  if (status == DLRT_OK)
    status = enqueue_gemm(g, a, c);
  if (status == DLRT_OK)
    status = dlrt_event_record(done_on_a, a);
  if (status == DLRT_OK)
    status = dlrt_stream_wait_event(b, done_on_a);
  if (status == DLRT_OK)
    status = read_back(g, c, b);
  if (tap_check(status, "%s: GEMM on A, event, B waits, B reads C", g->spec)) {
    is_u64(count_other_than(g->host, (size_t)(g->n * g->n), (float)g->n), 0,
           "%s: B saw the finished product (elements not %lld)", g->spec,
           (long long)g->n);
    is_int(dlrt_event_query(done_on_a), 1,
           "%s: the event is complete once B has passed it", g->spec);
  }
  dlrt_buffer_free(c);
  dlrt_event_destroy(done_on_a);
  dlrt_stream_destroy(a);
  dlrt_stream_destroy(b);
}

static void test_event_timing(big_gemm *g) {
  dlrt_stream_t *s = NULL;
  dlrt_event_t *start = NULL, *end = NULL, *never = NULL;
  dlrt_buffer_t *c = NULL;
  int status = dlrt_stream_create(g->dev, &s);
  if (status == DLRT_OK)
    status = dlrt_event_create(g->dev, &start);
  if (status == DLRT_OK)
    status = dlrt_event_create(g->dev, &end);
  if (status == DLRT_OK)
    status = dlrt_event_create(g->dev, &never);
  if (status == DLRT_OK)
    status = dlrt_buffer_alloc(g->dev, g->bytes, s, &c);
  if (status == DLRT_OK)
    status = dlrt_event_record(start, s);
  if (status == DLRT_OK)
    status = enqueue_gemm(g, s, c);
  if (status == DLRT_OK)
    status = dlrt_event_record(end, s);
  if (!tap_check(status, "%s: record, GEMM, record", g->spec))
    goto done;

  int pending = dlrt_event_query(end);
  diag("%s: right after recording, dlrt_event_query = %d", g->spec, pending);
  ok(pending == 0 || pending == 1, "%s: dlrt_event_query is 0 or 1 (got %d)", g->spec,
     pending);
  tap_check(dlrt_event_synchronize(end), "%s: dlrt_event_synchronize", g->spec);
  is_int(dlrt_event_query(end), 1, "%s: complete after synchronizing", g->spec);
  is_int(dlrt_event_query(start), 1, "%s: the earlier event too", g->spec);

  float ms = -1.0f;
  if (tap_check(dlrt_event_elapsed_ms(start, end, &ms), "%s: dlrt_event_elapsed_ms",
                g->spec)) {
    double gflop = 2.0 * (double)g->n * (double)g->n * (double)g->n * 1e-9;
    diag("%s: GEMM n = %lld took %.3f ms (%.1f GFLOP/s)", g->spec, (long long)g->n, ms,
         ms > 0 ? gflop / (ms * 1e-3) : 0.0);
    ok(ms > 0.0f && isfinite(ms), "%s: elapsed time %.3f ms is > 0 and finite", g->spec,
       ms);
  }
  is_status(dlrt_event_elapsed_ms(never, end, &ms), DLRT_ERR_STATE,
            "%s: elapsed from a never-recorded event", g->spec);
  is_status(dlrt_event_elapsed_ms(start, never, &ms), DLRT_ERR_STATE,
            "%s: elapsed to a never-recorded event", g->spec);
  is_status(dlrt_event_synchronize(never), DLRT_ERR_STATE,
            "%s: synchronize a never-recorded event", g->spec);
  is_status(dlrt_event_elapsed_ms(NULL, end, &ms), DLRT_ERR_INVALID_ARG,
            "%s: elapsed from NULL", g->spec);
  is_status(dlrt_event_elapsed_ms(start, end, NULL), DLRT_ERR_INVALID_ARG,
            "%s: elapsed into a NULL result", g->spec);
  is_status(dlrt_event_record(NULL, s), DLRT_ERR_INVALID_ARG, "%s: record a NULL event",
            g->spec);
  is_status(dlrt_stream_wait_event(s, NULL), DLRT_ERR_INVALID_ARG,
            "%s: wait for a NULL event", g->spec);
  is_status(dlrt_stream_wait_event(NULL, end), DLRT_ERR_INVALID_ARG,
            "%s: a NULL stream waits", g->spec);
done:
  dlrt_buffer_free(c);
  dlrt_event_destroy(start);
  dlrt_event_destroy(end);
  dlrt_event_destroy(never);
  dlrt_stream_destroy(s);
}

/* Checks that `reused` (allocated right after a buffer at `old_ptr` was freed
 * with a GEMM still writing it) is the same memory, zeroes it on `stream`, and
 * checks it stays zero — first when `stream` is done, then when the whole
 * device is. Had the allocator not ordered the reuse after the GEMM, the
 * GEMM's late writes (every element n) would land on the zeros. */
static void check_reuse_is_ordered(big_gemm *g, dlrt_buffer_t *reused, void *old_ptr,
                                   dlrt_stream_t *stream, const char *what) {
  if (g->host_addressable)
    ok(dlrt_buffer_host_ptr(reused) == old_ptr,
       "%s: %s: the allocator handed back the same memory (%p, was %p)", g->spec, what,
       dlrt_buffer_host_ptr(reused), old_ptr);
  else
    skip(1, "%s: no host pointer to compare", g->spec);

  int status = dlrt_memset(reused, 0, 0, g->bytes, stream);
  if (status == DLRT_OK)
    status = read_back(g, reused, stream);
  if (!tap_check(status, "%s: %s: zero the reused memory", g->spec, what))
    return;
  size_t count = (size_t)(g->n * g->n);
  is_u64(count - count_other_than(g->host, count, 0.0f), count,
         "%s: %s: zero elements once the new stream finished", g->spec, what);
  status = dlrt_device_synchronize(g->dev);
  if (status == DLRT_OK)
    status = read_back(g, reused, stream);
  if (tap_check(status, "%s: %s: synchronize the device", g->spec, what))
    is_u64(count - count_other_than(g->host, count, 0.0f), count,
           "%s: %s: zero elements once the GEMM's stream finished too", g->spec, what);
}

/* Free with work pending on the allocation stream, reuse on another. */
static void test_free_while_busy(big_gemm *g) {
  dlrt_stream_t *a = NULL, *b = NULL;
  dlrt_buffer_t *c = NULL, *reused = NULL;
  int status = dlrt_stream_create(g->dev, &a);
  if (status == DLRT_OK)
    status = dlrt_stream_create(g->dev, &b);
  if (status == DLRT_OK)
    status = dlrt_mem_empty_cache(g->dev);
  if (status == DLRT_OK)
    status = dlrt_buffer_alloc(g->dev, g->bytes, a, &c);
  void *old_ptr = c ? dlrt_buffer_host_ptr(c) : NULL;
  if (status == DLRT_OK)
    status = enqueue_gemm(g, a, c);
  if (status == DLRT_OK) {
    dlrt_buffer_free(c); /* the GEMM is still running */
    c = NULL;
    status = dlrt_buffer_alloc(g->dev, g->bytes, b, &reused);
  }
  if (tap_check(status, "%s: GEMM on A into C, free C, allocate on B", g->spec))
    check_reuse_is_ordered(g, reused, old_ptr, b, "free during GEMM");
  dlrt_buffer_free(c);
  dlrt_buffer_free(reused);
  dlrt_stream_destroy(a);
  dlrt_stream_destroy(b);
}

/* The buffer belongs to A but B writes it; only dlrt_buffer_record_stream
 * tells the allocator that reuse on A must wait for B. */
static void test_record_stream(big_gemm *g) {
  dlrt_stream_t *a = NULL, *b = NULL;
  dlrt_buffer_t *c = NULL, *reused = NULL;
  int status = dlrt_stream_create(g->dev, &a);
  if (status == DLRT_OK)
    status = dlrt_stream_create(g->dev, &b);
  if (status == DLRT_OK)
    status = dlrt_mem_empty_cache(g->dev);
  if (status == DLRT_OK)
    status = dlrt_buffer_alloc(g->dev, g->bytes, a, &c);
  void *old_ptr = c ? dlrt_buffer_host_ptr(c) : NULL;
  if (status == DLRT_OK)
    status = enqueue_gemm(g, b, c);
  if (status == DLRT_OK)
    status = dlrt_buffer_record_stream(c, b);
  if (status == DLRT_OK) {
    dlrt_buffer_free(c);
    c = NULL;
    status = dlrt_buffer_alloc(g->dev, g->bytes, a, &reused);
  }
  if (tap_check(status,
                "%s: C on A, GEMM on B into C, record B, free, "
                "allocate on A",
                g->spec))
    check_reuse_is_ordered(g, reused, old_ptr, a, "record_stream");
  if (reused) {
    tap_check(dlrt_buffer_record_stream(reused, a),
              "%s: recording the allocation stream itself is harmless", g->spec);
  }
  is_status(dlrt_buffer_record_stream(NULL, a), DLRT_ERR_INVALID_ARG,
            "%s: record_stream of a NULL buffer", g->spec);
  if (reused)
    is_status(dlrt_buffer_record_stream(reused, NULL), DLRT_ERR_INVALID_ARG,
              "%s: record_stream of a NULL stream", g->spec);
  dlrt_buffer_free(c);
  dlrt_buffer_free(reused);
  dlrt_stream_destroy(a);
  dlrt_stream_destroy(b);
}

/* A stream of device `to` waits on an event of device `from` (possibly
 * another backend: the host waits), then copies the GEMM's product over. */
static void test_wait_across_devices(big_gemm *from, big_gemm *to) {
  char label[96];
  snprintf(label, sizeof label, "%s waits for %s", to->spec, from->spec);
  dlrt_stream_t *s_from = NULL, *s_to = NULL;
  dlrt_event_t *e_from = NULL, *e_to = NULL;
  dlrt_buffer_t *c_from = NULL, *c_to = NULL;
  int status = dlrt_stream_create(from->dev, &s_from);
  if (status == DLRT_OK)
    status = dlrt_stream_create(to->dev, &s_to);
  if (status == DLRT_OK)
    status = dlrt_event_create(from->dev, &e_from);
  if (status == DLRT_OK)
    status = dlrt_event_create(to->dev, &e_to);
  if (status == DLRT_OK)
    status = dlrt_buffer_alloc(from->dev, from->bytes, s_from, &c_from);
  if (status == DLRT_OK)
    status = dlrt_buffer_alloc(to->dev, from->bytes, s_to, &c_to);
  if (status == DLRT_OK)
    status = dlrt_memset(c_from, 0, 0, from->bytes, s_from);
  if (status == DLRT_OK)
    status = enqueue_gemm(from, s_from, c_from);
  if (status == DLRT_OK)
    status = dlrt_event_record(e_from, s_from);
  if (!tap_check(status, "%s: set up, GEMM, record", label))
    goto done;

  tap_check(dlrt_stream_wait_event(s_to, e_from), "%s: dlrt_stream_wait_event", label);
  status = dlrt_copy_d2d(c_to, 0, c_from, 0, from->bytes, s_to);
  if (status == DLRT_OK)
    status = dlrt_event_record(e_to, s_to);
  if (status == DLRT_OK)
    status = dlrt_event_synchronize(e_to);
  if (!tap_check(status, "%s: copy the product over, record, synchronize", label))
    goto done;
  is_int(dlrt_event_query(e_from), 1,
         "%s: work after the wait completed only after the awaited event", label);
  float ms;
  ok(dlrt_event_elapsed_ms(e_from, e_to, &ms) < 0,
     "%s: no elapsed time between events of two devices", label);
  /* Read back through `to`; `from`'s host buffer is sized for its matrix. */
  status = dlrt_copy_d2h(from->host, c_to, 0, from->bytes, s_to);
  if (status == DLRT_OK)
    status = dlrt_stream_synchronize(s_to);
  if (tap_check(status, "%s: read the copy back", label))
    is_u64(count_other_than(from->host, (size_t)(from->n * from->n), (float)from->n), 0,
           "%s: the copy carries the finished product (elements wrong)", label);
  is_status(dlrt_event_record(e_from, s_to), DLRT_ERR_WRONG_DEVICE,
            "%s: recording an event on another device's stream is refused", label);
done:
  dlrt_stream_synchronize(s_from);
  dlrt_buffer_free(c_from);
  dlrt_buffer_free(c_to);
  dlrt_event_destroy(e_from);
  dlrt_event_destroy(e_to);
  dlrt_stream_destroy(s_from);
  dlrt_stream_destroy(s_to);
}

int main(void) {
  int count = dlrt_device_count();
  if (count < 1)
    bail_out("no devices: %s", dlrt_last_error());
  big_gemm *gemms = calloc((size_t)count, sizeof *gemms);
  if (!gemms)
    bail_out("out of host memory");

  for (int i = 0; i < count; i++) {
    dlrt_device_t *dev = NULL;
    if (dlrt_device_get(i, &dev) != DLRT_OK)
      bail_out("dlrt_device_get(%d): %s", i, dlrt_last_error());
    diag("device %s", dlrt_device_spec(dev));
    test_stream_basics(dev);
    test_in_order(dev);
    big_gemm *g = &gemms[i];
    big_gemm_setup(g, dev);
    if (g->no_gemm[0]) {
      skip(20, "%s", g->no_gemm);
      continue;
    }
    test_event_orders_streams(g);
    test_event_timing(g);
    test_free_while_busy(g);
    test_record_stream(g);
  }

  for (int i = 0; i < count; i++)
    for (int j = 0; j < count; j++) {
      if (i == j)
        continue;
      if (gemms[i].no_gemm[0])
        skip(6, "%s", gemms[i].no_gemm);
      else
        test_wait_across_devices(&gemms[i], &gemms[j]);
    }
  if (count == 1)
    skip(1, "one device only: no events across devices");

  for (int i = 0; i < count; i++)
    big_gemm_teardown(&gemms[i]);
  free(gemms);
  dlrt_shutdown();
  return done_testing();
}
