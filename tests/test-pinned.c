/*
 * test-pinned.c — pinned host memory (dlrt_host_alloc / dlrt_host_free) on
 * every device: the memory is usable, blocks do not overlap, the pool reuses
 * freed blocks, foreign pointers are refused, asynchronous copies from and to
 * it round-trip, and the pool is safe to use from several threads at once.
 * Points: computed at run time (done_testing).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "tap.h"

#define MiB ((size_t)1 << 20)

static dlrt_mem_stats host_stats(dlrt_device_t *dev) {
  dlrt_mem_stats s;
  memset(&s, 0, sizeof s);
  int status = dlrt_host_stats_get(dev, &s);
  if (status != DLRT_OK)
    bail_out("dlrt_host_stats_get(%s): %s", dlrt_device_spec(dev), dlrt_last_error());
  return s;
}

/* Allocate, use, free, allocate again: the second time comes from the pool. */
static void test_reuse(dlrt_device_t *dev) {
  const char *spec = dlrt_device_spec(dev);
  const size_t bytes = 1 * MiB + 3;
  dlrt_mem_stats base = host_stats(dev);
  void *p = NULL;
  if (!tap_check(dlrt_host_alloc(dev, bytes, &p), "%s: pin %zu bytes", spec, bytes))
    return;
  ok(p != NULL, "%s: a pointer", spec);
  diag("%s: pinned block at %p", spec, p);

  uint8_t *want = malloc(bytes);
  fill_pattern(want, bytes, 7);
  memcpy(p, want, bytes);
  is_mem(p, want, bytes, "%s: the memory holds what was written", spec);
  free(want);

  dlrt_mem_stats held = host_stats(dev);
  long long grown = (long long)(held.allocated.current - base.allocated.current);
  ok(grown >= (long long)bytes, "%s: allocated grew by %lld >= %zu", spec, grown,
     bytes);
  is_int((long long)(held.alloc_count - base.alloc_count), 1,
         "%s: alloc_count counts it", spec);

  tap_check(dlrt_host_free(p), "%s: dlrt_host_free", spec);
  dlrt_mem_stats freed = host_stats(dev);
  is_u64(freed.allocated.current, base.allocated.current,
         "%s: allocated back to where it was", spec);
  is_int((long long)(freed.free_count - base.free_count), 1, "%s: free_count counts it",
         spec);
  is_status(dlrt_host_free(p), DLRT_ERR_NOT_FOUND, "%s: freeing it twice is refused",
            spec);

  void *again = NULL;
  if (tap_check(dlrt_host_alloc(dev, bytes, &again), "%s: pin %zu bytes again", spec,
                bytes)) {
    dlrt_mem_stats reused = host_stats(dev);
    is_int((long long)(reused.cache_hits - freed.cache_hits), 1,
           "%s: the same size again is a cache hit", spec);
    is_int((long long)(reused.allocated.current - freed.allocated.current), grown,
           "%s: allocated grows by the same amount", spec);
    diag("%s: %s block", spec, again == p ? "the same" : "a different");
    tap_check(dlrt_host_free(again), "%s: free it", spec);
  }
  dlrt_mem_stats end = host_stats(dev);
  ok(end.allocated.peak >= end.allocated.current &&
         end.reserved.peak >= end.reserved.current,
     "%s: peaks >= current", spec);
}

/* Several live blocks of assorted sizes, each filled with its own pattern,
 * then all checked: overlapping blocks would overwrite each other. */
static void test_no_overlap(dlrt_device_t *dev) {
  const char *spec = dlrt_device_spec(dev);
  const size_t sizes[] = {1, 100, 4096, 65537, 3 * MiB, 100, 1};
  enum { N = sizeof sizes / sizeof sizes[0] };
  void *blocks[N] = {NULL};
  int allocated = 1;
  for (int i = 0; i < N; i++)
    if (dlrt_host_alloc(dev, sizes[i], &blocks[i]) != DLRT_OK)
      allocated = 0;
  if (!ok(allocated, "%s: %d live blocks of 1 B to 3 MiB", spec, N))
    diag("%s", dlrt_last_error());
  for (int i = 0; i < N; i++)
    if (blocks[i])
      fill_pattern(blocks[i], sizes[i], 100 + (uint32_t)i);
  int intact = 1;
  for (int i = 0; i < N; i++)
    for (size_t j = 0; blocks[i] && j < sizes[i]; j++)
      if (((uint8_t *)blocks[i])[j] != pattern_byte(j, 100 + (uint32_t)i)) {
        diag("%s: block %d (%zu B) changed at byte %zu", spec, i, sizes[i], j);
        intact = 0;
        break;
      }
  ok(intact, "%s: no block overwrote another", spec);
  int freed = 1;
  for (int i = 0; i < N; i++)
    if (blocks[i] && dlrt_host_free(blocks[i]) != DLRT_OK)
      freed = 0;
  ok(freed, "%s: all freed", spec);
}

static void test_refusals(dlrt_device_t *dev) {
  const char *spec = dlrt_device_spec(dev);
  void *p = NULL;
  tap_check(dlrt_host_free(NULL), "dlrt_host_free(NULL) is DLRT_OK");
  int on_stack = 0;
  is_status(dlrt_host_free(&on_stack), DLRT_ERR_NOT_FOUND,
            "dlrt_host_free of a stack address");
  void *from_malloc = malloc(64);
  is_status(dlrt_host_free(from_malloc), DLRT_ERR_NOT_FOUND,
            "dlrt_host_free of a malloc'd block");
  free(from_malloc);
  if (tap_check(dlrt_host_alloc(dev, 4096, &p), "%s: pin 4096 bytes", spec)) {
    is_status(dlrt_host_free((uint8_t *)p + 1), DLRT_ERR_NOT_FOUND,
              "%s: dlrt_host_free of a pointer inside a pinned block", spec);
    tap_check(dlrt_host_free(p), "%s: the block itself frees", spec);
  }
  is_status(dlrt_host_alloc(dev, 0, &p), DLRT_ERR_INVALID_ARG, "%s: pin 0 bytes", spec);
  is_status(dlrt_host_alloc(NULL, 16, &p), DLRT_ERR_INVALID_ARG,
            "pin for a NULL device");
  is_status(dlrt_host_alloc(dev, 16, NULL), DLRT_ERR_INVALID_ARG,
            "%s: pin into a NULL out pointer", spec);
  is_status(dlrt_host_alloc(dev, SIZE_MAX, &p), DLRT_ERR_OOM, "%s: pin SIZE_MAX bytes",
            spec);
  dlrt_mem_stats s;
  is_status(dlrt_host_stats_get(NULL, &s), DLRT_ERR_INVALID_ARG,
            "pinned stats of a NULL device");
  is_status(dlrt_host_stats_get(dev, NULL), DLRT_ERR_INVALID_ARG,
            "%s: pinned stats into NULL", spec);
}

/* What pinned memory is for: copies queued on a stream from and to it. */
static void test_async_round_trip(dlrt_device_t *dev) {
  const char *spec = dlrt_device_spec(dev);
  const size_t bytes = 8 * MiB + 5;
  void *src = NULL, *dst = NULL;
  dlrt_stream_t *s = NULL;
  dlrt_buffer_t *buf = NULL;
  int status = dlrt_host_alloc(dev, bytes, &src);
  if (status == DLRT_OK)
    status = dlrt_host_alloc(dev, bytes, &dst);
  if (status == DLRT_OK)
    status = dlrt_stream_create(dev, &s);
  if (status == DLRT_OK)
    status = dlrt_buffer_alloc(dev, bytes, s, &buf);
  if (status == DLRT_OK) {
    fill_pattern(src, bytes, 9);
    memset(dst, 0, bytes);
    status = dlrt_copy_h2d(buf, 0, src, bytes, s);
  }
  if (status == DLRT_OK)
    status = dlrt_copy_d2h(dst, buf, 0, bytes, s);
  if (status == DLRT_OK)
    status = dlrt_stream_synchronize(s);
  if (tap_check(status, "%s: h2d and d2h of %zu B on a stream, pinned both ends", spec,
                bytes))
    is_mem(dst, src, bytes, "%s: the round trip is exact", spec);
  dlrt_buffer_free(buf);
  dlrt_stream_destroy(s);
  dlrt_host_free(src);
  dlrt_host_free(dst);
}

/* Threads pinning and freeing at once, each checking its own blocks. */
typedef struct {
  dlrt_device_t *dev;
  uint32_t seed;
  int failures;
  char first_failure[160];
} worker;

static void *churn(void *arg) {
  enum { ROUNDS = 200, LIVE = 8 };
  worker *w = arg;
  void *live[LIVE] = {NULL};
  size_t live_bytes[LIVE] = {0};
  uint32_t rng = w->seed;
  for (int round = 0; round < ROUNDS; round++) {
    int slot = round % LIVE;
    if (live[slot]) {
      const uint8_t *p = live[slot];
      for (size_t j = 0; j < live_bytes[slot]; j++)
        if (p[j] != pattern_byte(j, w->seed + (uint32_t)slot)) {
          if (!w->failures++)
            snprintf(w->first_failure, sizeof w->first_failure,
                     "round %d: a %zu-B block changed at byte %zu", round,
                     live_bytes[slot], j);
          break;
        }
      if (dlrt_host_free(live[slot]) != DLRT_OK && !w->failures++)
        snprintf(w->first_failure, sizeof w->first_failure, "free: %s",
                 dlrt_last_error());
      live[slot] = NULL;
    }
    rng = rng * 1664525u + 1013904223u; /* sizes 1 B .. 64 KiB */
    size_t bytes = 1 + (rng >> 16);
    if (dlrt_host_alloc(w->dev, bytes, &live[slot]) != DLRT_OK) {
      if (!w->failures++)
        snprintf(w->first_failure, sizeof w->first_failure, "alloc %zu: %s", bytes,
                 dlrt_last_error());
      live[slot] = NULL;
      continue;
    }
    live_bytes[slot] = bytes;
    fill_pattern(live[slot], bytes, w->seed + (uint32_t)slot);
  }
  for (int slot = 0; slot < LIVE; slot++)
    dlrt_host_free(live[slot]);
  return NULL;
}

static void test_threads(dlrt_device_t *dev) {
  enum { THREADS = 4 };
  pthread_t threads[THREADS];
  worker workers[THREADS];
  dlrt_mem_stats before = host_stats(dev);
  for (int i = 0; i < THREADS; i++) {
    workers[i] = (worker){dev, 1000u * (uint32_t)(i + 1), 0, ""};
    if (pthread_create(&threads[i], NULL, churn, &workers[i]) != 0)
      bail_out("pthread_create failed");
  }
  int failures = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(threads[i], NULL);
    if (workers[i].failures) {
      diag("thread %d: %d failures; first: %s", i, workers[i].failures,
           workers[i].first_failure);
      failures += workers[i].failures;
    }
  }
  is_int(failures, 0, "%s: %d threads pinning, using and freeing at once",
         dlrt_device_spec(dev), THREADS);
  is_u64(host_stats(dev).allocated.current, before.allocated.current,
         "%s: nothing left allocated after the threads", dlrt_device_spec(dev));
}

int main(void) {
  int count = dlrt_device_count();
  if (count < 1)
    bail_out("no devices: %s", dlrt_last_error());
  for (int i = 0; i < count; i++) {
    dlrt_device_t *dev = NULL;
    if (dlrt_device_get(i, &dev) != DLRT_OK)
      bail_out("dlrt_device_get(%d): %s", i, dlrt_last_error());
    diag("device %s", dlrt_device_spec(dev));
    test_reuse(dev);
    test_no_overlap(dev);
    test_refusals(dev);
    test_async_round_trip(dev);
    test_threads(dev);
  }
  /* A pinned pointer the caller leaked goes with its device's pool at
   * shutdown (the memory layer forgets it when the device closes): freeing
   * it afterwards is refused, and the library starts again. */
  dlrt_device_t *cpu = NULL;
  void *leaked = NULL, *fresh = NULL;
  tap_check(dlrt_device_open("cpu", &cpu), "open the cpu");
  tap_check(dlrt_host_alloc(cpu, 4096, &leaked), "allocate 4096 pinned bytes, then leak them");
  dlrt_shutdown();
  is_status(dlrt_host_free(leaked), DLRT_ERR_NOT_FOUND,
            "after dlrt_shutdown a leaked pinned pointer is unknown: %s", dlrt_last_error());
  tap_check(dlrt_device_open("cpu", &cpu), "the cpu opens again after dlrt_shutdown");
  tap_check(dlrt_host_alloc(cpu, 4096, &fresh), "and its pinned pool allocates again");
  tap_check(dlrt_host_free(fresh), "and frees");
  dlrt_shutdown();
  return done_testing();
}
