/*
 * test-alloc.c — the per-device caching allocator, rule by rule, on every
 * device: 512-byte rounding, the small pool (2 MiB segments, requests up to
 * 1 MiB) and the large pool (20 MiB segments below 10 MiB, own-size segments
 * from 10 MiB), splitting, best fit, merging, emptying the cache, the budget
 * (with garbage-collect-and-retry), statistics, dlrt_mem_summary, size parsing
 * and DLRT_MEM_LIMIT.
 *
 * The allocator is above raw driver memory and the same on every backend, so
 * the numbers are exact everywhere. Each scenario starts with an empty cache
 * and no live buffers and compares statistics before and after; where a rule
 * shows only in addresses, it is checked on host-addressable devices and
 * skipped elsewhere. Points: computed at run time (done_testing).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "tap.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define SMALL_SEGMENT (2 * MiB)
#define LARGE_SEGMENT (20 * MiB)

/* Change of a statistic between two snapshots, signed. */
#define DELTA(after, before, field) ((long long)((after).field - (before).field))

typedef struct {
  dlrt_device_t *dev;
  const char *spec;
  int host_addressable;
  uint64_t total_memory;
} device_info;

static dlrt_mem_stats stats_of(const device_info *d) {
  dlrt_mem_stats s;
  memset(&s, 0, sizeof s);
  int status = dlrt_mem_stats_get(d->dev, &s);
  if (status != DLRT_OK)
    bail_out("dlrt_mem_stats_get(%s): %s: %s", d->spec, dlrt_strerror(status),
             dlrt_last_error());
  return s;
}

/* No live buffers are expected here: everything cached goes back. */
static void start_clean(const device_info *d) {
  if (dlrt_device_synchronize(d->dev) != DLRT_OK ||
      dlrt_mem_empty_cache(d->dev) != DLRT_OK)
    bail_out("%s: cannot empty the cache: %s", d->spec, dlrt_last_error());
}

/* A buffer, or NULL after a failed point saying which allocation failed. */
static dlrt_buffer_t *alloc_or_report(const device_info *d, size_t bytes) {
  dlrt_buffer_t *buf = NULL;
  int status = dlrt_buffer_alloc(d->dev, bytes, NULL, &buf);
  if (status != DLRT_OK) {
    tap_check(status, "%s: allocate %zu bytes", d->spec, bytes);
    return NULL;
  }
  return buf;
}

static uintptr_t addr(const dlrt_buffer_t *buf) {
  return (uintptr_t)dlrt_buffer_host_ptr(buf);
}

/* One point on a buffer's address: `buf` starts `offset` bytes after `base`
 * (an address taken while its buffer was live). */
static void is_at(const device_info *d, const dlrt_buffer_t *buf, uintptr_t base,
                  long long offset, const char *what) {
  if (!d->host_addressable) {
    skip(1, "%s: no host pointer to see where blocks are placed", d->spec);
    return;
  }
  is_int((long long)(addr(buf) - base), offset,
         "%s: %s (offset from the reference block)", d->spec, what);
}

static void free_all(dlrt_buffer_t **bufs, int count) {
  for (int i = 0; i < count; i++) {
    dlrt_buffer_free(bufs[i]);
    bufs[i] = NULL;
  }
}

static void scenario_clean_start(const device_info *d) {
  tap_check(dlrt_mem_empty_cache(d->dev), "%s: dlrt_mem_empty_cache", d->spec);
  tap_check(dlrt_mem_reset_peak(d->dev), "%s: dlrt_mem_reset_peak", d->spec);
  dlrt_mem_stats s = stats_of(d);
  is_u64(s.cached_free, 0, "%s: nothing cached after emptying the cache", d->spec);
  is_u64(s.allocated.peak, s.allocated.current,
         "%s: allocated.peak is reset to current", d->spec);
}

static void scenario_small_pool(const device_info *d) {
  start_clean(d);
  dlrt_mem_stats base = stats_of(d);
  dlrt_buffer_t *a = alloc_or_report(d, 1000);
  if (!a)
    return;
  dlrt_mem_stats s = stats_of(d);
  is_int(DELTA(s, base, allocated.current), 1024, "%s: 1000 B takes a 1024-B block",
         d->spec);
  is_int(DELTA(s, base, requested.current), 1000, "%s: 1000 B requested", d->spec);
  is_int(DELTA(s, base, reserved.current), SMALL_SEGMENT,
         "%s: from a new 2 MiB small segment", d->spec);
  is_int(DELTA(s, base, segments.current), 1, "%s: one segment", d->spec);
  is_int(DELTA(s, base, driver_allocs), 1, "%s: one driver allocation", d->spec);
  is_int(DELTA(s, base, cache_hits), 0, "%s: not a cache hit", d->spec);
  is_int(DELTA(s, base, alloc_count), 1, "%s: alloc_count counts it", d->spec);
  is_size(dlrt_buffer_size(a), 1000, "%s: dlrt_buffer_size is the request", d->spec);
  ok(dlrt_buffer_device(a) == d->dev, "%s: dlrt_buffer_device", d->spec);
  if (d->host_addressable)
    ok(dlrt_buffer_host_ptr(a) != NULL, "%s: a host pointer", d->spec);
  else
    ok(dlrt_buffer_host_ptr(a) == NULL,
       "%s: no host pointer on a device that is not host-addressable", d->spec);

  dlrt_buffer_t *b = alloc_or_report(d, 1000);
  if (!b) {
    dlrt_buffer_free(a);
    return;
  }
  dlrt_mem_stats s2 = stats_of(d);
  is_int(DELTA(s2, s, cache_hits), 1, "%s: a second 1000 B is a cache hit", d->spec);
  is_int(DELTA(s2, s, driver_allocs), 0, "%s: without a driver call", d->spec);
  is_int(DELTA(s2, base, allocated.current), 2048, "%s: two blocks allocated", d->spec);
  uintptr_t a_addr = addr(a);
  is_at(d, b, a_addr, 1024, "the second block follows the first (split)");

  dlrt_buffer_free(a);
  dlrt_buffer_free(b);
  dlrt_mem_stats s3 = stats_of(d);
  is_int(DELTA(s3, base, free_count), 2, "%s: free_count counts both frees", d->spec);
  is_int(DELTA(s3, base, allocated.current), 0, "%s: nothing allocated", d->spec);
  is_int(DELTA(s3, base, requested.current), 0, "%s: nothing requested", d->spec);
  is_int(DELTA(s3, base, reserved.current), SMALL_SEGMENT,
         "%s: the segment stays reserved (cached)", d->spec);
  is_int(DELTA(s3, base, cached_free), SMALL_SEGMENT,
         "%s: the whole segment is cached and free", d->spec);
  is_u64(s3.largest_free, SMALL_SEGMENT,
         "%s: the freed blocks merged into one 2 MiB block", d->spec);
  ok(s3.fragmentation == 0.0, "%s: fragmentation %g is 0 with one free block", d->spec,
     s3.fragmentation);

  /* a and b were freed; what comes next reuses a's address. */
  dlrt_buffer_t *c = alloc_or_report(d, 2048);
  if (c) {
    dlrt_mem_stats s4 = stats_of(d);
    is_int(DELTA(s4, s3, driver_allocs), 0, "%s: 2048 B comes from the merged block",
           d->spec);
    is_int(DELTA(s4, s3, cache_hits), 1, "%s: a cache hit", d->spec);
    is_at(d, c, a_addr, 0, "at the merged block's start");
    dlrt_buffer_free(c);
  }
  dlrt_buffer_t *e = alloc_or_report(d, 1000);
  if (e) {
    is_at(d, e, a_addr, 0, "1000 B freed and asked for again: the same memory");
    dlrt_buffer_free(e);
  }
  tap_check(dlrt_mem_empty_cache(d->dev), "%s: empty the cache", d->spec);
  dlrt_mem_stats s5 = stats_of(d);
  is_int(DELTA(s5, base, reserved.current), 0, "%s: nothing reserved after", d->spec);
  is_int(DELTA(s5, base, segments.current), 0, "%s: no segments after", d->spec);
  is_int(DELTA(s5, base, driver_frees), 1, "%s: the segment went back", d->spec);
}

static void scenario_rounding(const device_info *d) {
  const size_t request[] = {1, 512, 513, 1 * MiB};
  const long long block[] = {512, 512, 1024, 1 * MiB};
  enum { N = sizeof request / sizeof request[0] };
  dlrt_buffer_t *bufs[N] = {NULL};
  start_clean(d);
  for (int i = 0; i < N; i++) {
    dlrt_mem_stats before = stats_of(d);
    if (!(bufs[i] = alloc_or_report(d, request[i])))
      break;
    dlrt_mem_stats after = stats_of(d);
    is_int(DELTA(after, before, allocated.current), block[i],
           "%s: %zu B rounds up to a %lld-B block", d->spec, request[i], block[i]);
    is_int(DELTA(after, before, requested.current), (long long)request[i],
           "%s: %zu B requested", d->spec, request[i]);
  }
  free_all(bufs, N);
}

typedef struct {
  size_t request;
  long long segment;   /* bytes reserved from the driver for it */
  long long allocated; /* its block: the rest is split off unless too small */
} segment_case;

static void scenario_segment_sizes(const device_info *d) {
  const segment_case cases[] = {
      {1 * MiB, 2 * MiB, 1 * MiB},              /* small pool's largest */
      {1 * MiB + 1, 20 * MiB, 1 * MiB + 512},   /* large pool's smallest */
      {9 * MiB + 1, 20 * MiB, 9 * MiB + 512},   /* below 10 MiB */
      {10 * MiB, 10 * MiB, 10 * MiB},           /* own size */
      {10 * MiB + 1, 12 * MiB, 10 * MiB + 512}, /* rounded to 2 MiB */
      {25 * MiB, 26 * MiB, 26 * MiB},           /* 1 MiB left: not split */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const segment_case *c = &cases[i];
    start_clean(d);
    dlrt_mem_stats before = stats_of(d);
    dlrt_buffer_t *buf = alloc_or_report(d, c->request);
    if (!buf)
      continue;
    dlrt_mem_stats after = stats_of(d);
    is_int(DELTA(after, before, reserved.current), c->segment,
           "%s: %zu B gets a %lld-B segment", d->spec, c->request, c->segment);
    is_int(DELTA(after, before, allocated.current), c->allocated,
           "%s: %zu B occupies a %lld-B block", d->spec, c->request, c->allocated);
    dlrt_buffer_free(buf);
  }
  start_clean(d);
}

/* Small and large requests never share a segment, even where they would fit. */
static void scenario_pools_apart(const device_info *d) {
  start_clean(d);
  dlrt_mem_stats base = stats_of(d);
  dlrt_buffer_t *large = alloc_or_report(d, 5 * MiB);
  dlrt_buffer_t *small = large ? alloc_or_report(d, 1000) : NULL;
  if (small) {
    dlrt_mem_stats s = stats_of(d);
    is_int(DELTA(s, base, segments.current), 2,
           "%s: 1000 B takes a small segment though the large one has 15 MiB "
           "free",
           d->spec);
    is_int(DELTA(s, base, reserved.current), LARGE_SEGMENT + SMALL_SEGMENT,
           "%s: 20 MiB + 2 MiB reserved", d->spec);
  }
  dlrt_buffer_free(large);
  dlrt_buffer_free(small);

  start_clean(d);
  base = stats_of(d);
  small = alloc_or_report(d, 1000);
  dlrt_buffer_free(small); /* leaves a free 2 MiB small segment */
  large = small ? alloc_or_report(d, 3 * MiB / 2) : NULL;
  if (large) {
    dlrt_mem_stats s = stats_of(d);
    is_int(DELTA(s, base, reserved.current), SMALL_SEGMENT + LARGE_SEGMENT,
           "%s: 1.5 MiB takes a new 20 MiB segment, not the free small one", d->spec);
  }
  dlrt_buffer_free(large);
  start_clean(d);
}

/* In the large pool a block is split only when more than 1 MiB would remain;
 * freed neighbours merge back. */
static void scenario_large_split_merge(const device_info *d) {
  start_clean(d);
  dlrt_mem_stats base = stats_of(d);
  dlrt_buffer_t *bufs[4] = {NULL};
  if (!(bufs[0] = alloc_or_report(d, 5 * MiB)) ||
      !(bufs[1] = alloc_or_report(d, 9 * MiB)) ||
      !(bufs[2] = alloc_or_report(d, 5 * MiB)))
    goto done;
  dlrt_mem_stats s = stats_of(d);
  is_int(DELTA(s, base, segments.current), 1,
         "%s: 5 + 9 + 5 MiB share one 20 MiB segment", d->spec);
  is_int(DELTA(s, base, allocated.current), 20 * MiB,
         "%s: the last block keeps the 1 MiB remainder (not > 1 MiB: no split)",
         d->spec);
  is_int(DELTA(s, base, requested.current), 19 * MiB, "%s: 19 MiB requested", d->spec);
  uintptr_t start = addr(bufs[0]);
  is_at(d, bufs[1], start, 5 * MiB, "9 MiB follows 5 MiB");
  is_at(d, bufs[2], start, 14 * MiB, "the last 5 MiB follows");

  dlrt_buffer_free(bufs[1]);
  dlrt_buffer_free(bufs[0]);
  bufs[0] = bufs[1] = NULL;
  dlrt_mem_stats freed = stats_of(d);
  is_u64(freed.largest_free, 14 * MiB, "%s: 5 and 9 MiB merged into 14 MiB", d->spec);
  if ((bufs[3] = alloc_or_report(d, 14 * MiB))) {
    dlrt_mem_stats again = stats_of(d);
    is_int(DELTA(again, freed, driver_allocs), 0,
           "%s: 14 MiB is served from the merged block", d->spec);
    is_at(d, bufs[3], start, 0, "at the merged block's start");
  }
done:
  free_all(bufs, 4);
  start_clean(d);
}

/* In the small pool any remainder of 512 B or more is split off. */
static void scenario_small_split_merge(const device_info *d) {
  start_clean(d);
  dlrt_mem_stats base = stats_of(d);
  dlrt_buffer_t *bufs[5] = {NULL};
  if (!(bufs[0] = alloc_or_report(d, 1 * MiB)) ||
      !(bufs[1] = alloc_or_report(d, 1 * MiB - 512)) ||
      !(bufs[2] = alloc_or_report(d, 512)))
    goto done;
  dlrt_mem_stats full = stats_of(d);
  is_int(DELTA(full, base, segments.current), 1,
         "%s: 1 MiB + (1 MiB - 512) + 512 fill one small segment", d->spec);
  is_int(DELTA(full, base, allocated.current), 2 * MiB, "%s: exactly 2 MiB allocated",
         d->spec);
  is_at(d, bufs[2], addr(bufs[0]), 2 * MiB - 512, "the 512-B block is last");
  if (!(bufs[3] = alloc_or_report(d, 512)))
    goto done;
  is_int(DELTA(stats_of(d), base, segments.current), 2,
         "%s: one more 512 B needs a second segment", d->spec);
  dlrt_buffer_free(bufs[3]);
  bufs[3] = NULL;
  tap_check(dlrt_mem_empty_cache(d->dev), "%s: empty the cache", d->spec);
  dlrt_mem_stats emptied = stats_of(d);
  is_int(DELTA(emptied, base, reserved.current), SMALL_SEGMENT,
         "%s: only the fully free segment went back", d->spec);

  dlrt_buffer_free(bufs[1]);
  dlrt_buffer_free(bufs[2]);
  bufs[1] = bufs[2] = NULL;
  if ((bufs[4] = alloc_or_report(d, 1 * MiB))) {
    dlrt_mem_stats s = stats_of(d);
    is_int(DELTA(s, emptied, driver_allocs), 0,
           "%s: 1 MiB fits only in the two freed blocks merged", d->spec);
    is_at(d, bufs[4], addr(bufs[0]), 1 * MiB, "where the freed blocks were");
  }
done:
  free_all(bufs, 5);
  start_clean(d);
}

/* Best fit: the smallest free block that fits; between equal ones, the
 * lowest address. Live guard blocks keep the free blocks from merging. */
static void scenario_best_fit(const device_info *d) {
  if (!d->host_addressable) {
    skip(3, "%s: no host pointer to see which block best fit chose", d->spec);
    return;
  }
  start_clean(d);
  const size_t layout[] = {256 * KiB, 16 * KiB, 64 * KiB, 16 * KiB, 64 * KiB, 16 * KiB};
  enum { N = sizeof layout / sizeof layout[0] };
  dlrt_buffer_t *bufs[N] = {NULL}, *picked[3] = {NULL};
  uintptr_t big = 0, first64 = 0, second64 = 0;
  for (int i = 0; i < N; i++)
    if (!(bufs[i] = alloc_or_report(d, layout[i])))
      goto done;
  big = addr(bufs[0]);
  first64 = addr(bufs[2]);
  second64 = addr(bufs[4]);
  dlrt_buffer_free(bufs[0]);
  dlrt_buffer_free(bufs[2]);
  dlrt_buffer_free(bufs[4]);
  bufs[0] = bufs[2] = bufs[4] = NULL;
  /* Free now: 256 KiB, 64 KiB, 64 KiB and the segment's large tail. */
  if ((picked[0] = alloc_or_report(d, 32 * KiB)))
    ok(addr(picked[0]) == first64,
       "%s: 32 KiB goes to the lower of the two 64 KiB blocks", d->spec);
  if ((picked[1] = alloc_or_report(d, 64 * KiB)))
    ok(addr(picked[1]) == second64,
       "%s: 64 KiB goes to the other 64 KiB block, not the 32 KiB rest", d->spec);
  if ((picked[2] = alloc_or_report(d, 200 * KiB)))
    ok(addr(picked[2]) == big, "%s: 200 KiB goes to the 256 KiB block", d->spec);
done:
  free_all(bufs, N);
  free_all(picked, 3);
  start_clean(d);
}

static void scenario_empty_cache(const device_info *d) {
  start_clean(d);
  dlrt_mem_stats base = stats_of(d);
  dlrt_buffer_t *big = alloc_or_report(d, 25 * MiB);
  dlrt_buffer_t *small = big ? alloc_or_report(d, 1000) : NULL;
  if (small) {
    dlrt_buffer_free(big);
    big = NULL;
    tap_check(dlrt_mem_empty_cache(d->dev), "%s: empty the cache", d->spec);
    dlrt_mem_stats s = stats_of(d);
    is_int(DELTA(s, base, reserved.current), SMALL_SEGMENT,
           "%s: the free 26 MiB segment went back; the one in use stayed", d->spec);
    is_int(DELTA(s, base, segments.current), 1, "%s: one segment left", d->spec);
    dlrt_buffer_free(small);
    small = NULL;
    tap_check(dlrt_mem_empty_cache(d->dev), "%s: empty the cache again", d->spec);
    is_int(DELTA(stats_of(d), base, reserved.current), 0, "%s: nothing reserved",
           d->spec);
  }
  dlrt_buffer_free(big);
  dlrt_buffer_free(small);
}

/* fragmentation = 1 - largest_free / cached_free. */
static void scenario_fragmentation(const device_info *d) {
  start_clean(d);
  dlrt_mem_stats base = stats_of(d);
  dlrt_buffer_t *a = alloc_or_report(d, 512 * KiB);
  dlrt_buffer_t *b = a ? alloc_or_report(d, 512 * KiB) : NULL;
  if (b) {
    dlrt_buffer_free(a); /* free: 512 KiB, then b, then the 1 MiB tail */
    a = NULL;
    dlrt_mem_stats s = stats_of(d);
    is_int(DELTA(s, base, cached_free), 3 * MiB / 2,
           "%s: 1.5 MiB cached and free in two blocks", d->spec);
    is_u64(s.largest_free, 1 * MiB, "%s: the largest is 1 MiB", d->spec);
    ok(fabs(s.fragmentation - 1.0 / 3.0) < 1e-9, "%s: fragmentation %.6f is 1/3",
       d->spec, s.fragmentation);
    dlrt_buffer_free(b);
    b = NULL;
    s = stats_of(d);
    ok(s.fragmentation == 0.0, "%s: 0 once all merged (got %g)", d->spec,
       s.fragmentation);
  }
  dlrt_buffer_free(a);
  dlrt_buffer_free(b);
  start_clean(d);
}

static void scenario_peaks(const device_info *d) {
  start_clean(d);
  tap_check(dlrt_mem_reset_peak(d->dev), "%s: reset the peaks", d->spec);
  dlrt_mem_stats base = stats_of(d);
  dlrt_buffer_t *buf = alloc_or_report(d, 3 * MiB);
  if (!buf)
    return;
  dlrt_buffer_free(buf);
  dlrt_mem_stats s = stats_of(d);
  is_int((long long)(s.allocated.peak - base.allocated.current), 3 * MiB,
         "%s: allocated.peak saw the 3 MiB block", d->spec);
  is_int((long long)(s.requested.peak - base.requested.current), 3 * MiB,
         "%s: requested.peak saw 3 MiB", d->spec);
  is_int((long long)(s.reserved.peak - base.reserved.current), LARGE_SEGMENT,
         "%s: reserved.peak saw the 20 MiB segment", d->spec);
  is_int((long long)(s.segments.peak - base.segments.current), 1,
         "%s: segments.peak saw one more segment", d->spec);
  tap_check(dlrt_mem_reset_peak(d->dev), "%s: reset the peaks again", d->spec);
  s = stats_of(d);
  ok(s.allocated.peak == s.allocated.current &&
         s.requested.peak == s.requested.current &&
         s.reserved.peak == s.reserved.current && s.active.peak == s.active.current &&
         s.segments.peak == s.segments.current,
     "%s: after reset every peak equals its current value", d->spec);
  start_clean(d);
}

/* Relations that hold at any moment. */
static void check_invariants(const device_info *d, const char *when) {
  dlrt_mem_stats s = stats_of(d);
  const dlrt_mem_counter *counters[] = {&s.allocated, &s.requested, &s.reserved,
                                        &s.active, &s.segments};
  int peaks_ok = 1;
  for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++)
    peaks_ok &= counters[i]->peak >= counters[i]->current;
  ok(peaks_ok, "%s %s: every peak >= its current value", d->spec, when);
  ok(s.active.current >= s.allocated.current, "%s %s: active %llu >= allocated %llu",
     d->spec, when, (unsigned long long)s.active.current,
     (unsigned long long)s.allocated.current);
  ok(s.requested.current <= s.allocated.current &&
         s.allocated.current + s.cached_free <= s.reserved.current,
     "%s %s: requested <= allocated, allocated + cached free <= reserved", d->spec,
     when);
  ok(s.largest_free <= s.cached_free, "%s %s: largest_free <= cached_free", d->spec,
     when);
  ok(s.fragmentation >= 0.0 && s.fragmentation <= 1.0,
     "%s %s: fragmentation %g in [0, 1]", d->spec, when, s.fragmentation);
}

static int mentions_budget(const char *message) {
  return strcasestr(message, "budget") || strcasestr(message, "limit");
}

/* "0 = the device's memory": the default budget may read back either way. */
static int is_default_budget(const device_info *d, uint64_t limit) {
  return limit == 0 || limit == d->total_memory;
}

static void scenario_budget(const device_info *d) {
  start_clean(d);
  uint64_t limit = dlrt_mem_get_limit(d->dev);
  ok(is_default_budget(d, limit),
     "%s: the default budget is the device's memory (reads %llu)", d->spec,
     (unsigned long long)limit);
  dlrt_mem_stats base = stats_of(d);
  if (!tap_check(dlrt_mem_set_limit(d->dev, 4 * MiB), "%s: budget 4 MiB", d->spec))
    return;
  is_u64(dlrt_mem_get_limit(d->dev), 4 * MiB, "%s: dlrt_mem_get_limit", d->spec);
  is_u64(stats_of(d).limit, 4 * MiB, "%s: stats.limit", d->spec);

  dlrt_buffer_t *buf = NULL;
  dlrt_clear_error();
  is_status(dlrt_buffer_alloc(d->dev, 8 * MiB, NULL, &buf), DLRT_ERR_OOM,
            "%s: 8 MiB over a 4 MiB budget", d->spec);
  ok(mentions_budget(dlrt_last_error()), "%s: the message names the budget: %s",
     d->spec, dlrt_last_error());
  is_int(DELTA(stats_of(d), base, oom_count), 1, "%s: oom_count counts it", d->spec);

  dlrt_mem_stats before = stats_of(d);
  if ((buf = alloc_or_report(d, 3 * MiB))) {
    is_int(DELTA(stats_of(d), before, reserved.current), 4 * MiB,
           "%s: 3 MiB under the budget gets a 4 MiB segment (20 MiB would not "
           "fit)",
           d->spec);
    dlrt_buffer_free(buf); /* cached: 4 MiB reserved, all free */
    buf = NULL;
    before = stats_of(d);
    if ((buf = alloc_or_report(d, 1000))) {
      dlrt_mem_stats after = stats_of(d);
      is_int(DELTA(after, before, retries), 1,
             "%s: 1000 B fits only after the cache is emptied: one retry", d->spec);
      is_int(DELTA(after, base, reserved.current), SMALL_SEGMENT,
             "%s: the cached 4 MiB went back, a 2 MiB segment came", d->spec);
      dlrt_buffer_free(buf); /* cached: 2 MiB */
      buf = NULL;
    }
  }
  tap_check(dlrt_mem_set_limit(d->dev, 1 * MiB), "%s: budget 1 MiB", d->spec);
  is_int(DELTA(stats_of(d), base, reserved.current), 0,
         "%s: a budget below what is reserved releases the cache", d->spec);

  tap_check(dlrt_mem_set_limit(d->dev, 0), "%s: budget 0 (the device's memory)",
            d->spec);
  limit = dlrt_mem_get_limit(d->dev);
  ok(is_default_budget(d, limit), "%s: back to the device's memory (reads %llu)",
     d->spec, (unsigned long long)limit);
  ok(is_default_budget(d, stats_of(d).limit), "%s: stats.limit agrees", d->spec);
  is_status(dlrt_buffer_alloc(d->dev, SIZE_MAX, NULL, &buf), DLRT_ERR_OOM,
            "%s: SIZE_MAX bytes (rounding must not wrap)", d->spec);
  is_status(dlrt_buffer_alloc(d->dev, (size_t)1 << 62, NULL, &buf), DLRT_ERR_OOM,
            "%s: 4 EiB", d->spec);
}

static void scenario_summary(const device_info *d, int show) {
  char table[8192];
  int length = dlrt_mem_summary(d->dev, table, sizeof table);
  if (!ok(length > 0 && (size_t)length < sizeof table,
          "%s: dlrt_mem_summary returns %d", d->spec, length))
    return;
  if (show)
    diag("%s", table);
  is_size(strlen(table), (size_t)length, "%s: the length is the table's", d->spec);
  const char *const words[] = {"allocated", "reserved", "active", "peak"};
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
    ok(strcasestr(table, words[i]) != NULL, "%s: the table shows \"%s\"", d->spec,
       words[i]);
  /* Every row sits under a heading that names what its columns hold: the
   * counts are totals, not current and peak figures. */
  dlrt_mem_stats st;
  dlrt_mem_stats_get(d->dev, &st);
  const struct { const char *label; uint64_t value; } counts[] = {
      {"allocations", st.alloc_count},   {"frees", st.free_count},
      {"cache hits", st.cache_hits},     {"driver allocations", st.driver_allocs},
      {"retries", st.retries},           {"out-of-memory errors", st.oom_count}};
  for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
    char want[96];
    snprintf(want, sizeof want, "| %-24s | %14llu |\n", counts[i].label,
             (unsigned long long)counts[i].value);
    const char *row = strstr(table, want);
    /* The heading above it: the last line before it that a rule follows. */
    char heading[128] = "";
    for (const char *p = table; row && p < row; p = strchr(p, '\n') + 1) {
      const char *end = strchr(p, '\n');
      if (strncmp(end + 1, "|---", 4) == 0)
        snprintf(heading, sizeof heading, "%.*s", (int)(end - p), p);
    }
    ok(row && strncmp(heading, "| counts", 8) == 0 && !strstr(heading, "current"),
       "%s: %s (%llu) is a row under \"%s\", not under current / peak", d->spec,
       counts[i].label, (unsigned long long)counts[i].value, heading);
  }
  char tiny[8];
  memset(tiny, 'x', sizeof tiny);
  is_int(dlrt_mem_summary(d->dev, tiny, sizeof tiny), length,
         "%s: into 8 bytes it still returns the full length", d->spec);
  ok(tiny[7] == '\0' && strlen(tiny) == 7, "%s: and writes 7 characters and a NUL",
     d->spec);
  is_int(dlrt_mem_summary(d->dev, NULL, 0), length,
         "%s: (NULL, 0) asks for the length only", d->spec);
}

/* `other`: another device, or NULL. */
static void scenario_bad_arguments(const device_info *d, dlrt_device_t *other) {
  dlrt_buffer_t *buf = NULL;
  dlrt_mem_stats s;
  is_status(dlrt_buffer_alloc(d->dev, 0, NULL, &buf), DLRT_ERR_INVALID_ARG,
            "%s: allocate 0 bytes", d->spec);
  is_status(dlrt_buffer_alloc(NULL, 16, NULL, &buf), DLRT_ERR_INVALID_ARG,
            "allocate on a NULL device");
  is_status(dlrt_buffer_alloc(d->dev, 16, NULL, NULL), DLRT_ERR_INVALID_ARG,
            "%s: allocate into a NULL out pointer", d->spec);
  if (other)
    is_status(dlrt_buffer_alloc(d->dev, 16, dlrt_device_default_stream(other), &buf),
              DLRT_ERR_WRONG_DEVICE, "%s: allocate for a stream of %s", d->spec,
              dlrt_device_spec(other));
  else
    skip(1, "one device only: no foreign stream");
  is_status(dlrt_mem_stats_get(NULL, &s), DLRT_ERR_INVALID_ARG,
            "stats of a NULL device");
  is_status(dlrt_mem_stats_get(d->dev, NULL), DLRT_ERR_INVALID_ARG,
            "%s: stats into NULL", d->spec);
  is_status(dlrt_mem_set_limit(NULL, 1), DLRT_ERR_INVALID_ARG,
            "budget of a NULL device");
  is_status(dlrt_mem_empty_cache(NULL), DLRT_ERR_INVALID_ARG,
            "empty the cache of a NULL device");
  is_status(dlrt_mem_reset_peak(NULL), DLRT_ERR_INVALID_ARG,
            "reset the peaks of a NULL device");
  char table[64];
  ok(dlrt_mem_summary(NULL, table, sizeof table) < 0, "summary of a NULL device fails");
  dlrt_buffer_free(NULL);
  ok(1, "dlrt_buffer_free(NULL) returns");
}

static void test_parse_size(void) {
  const struct {
    const char *text;
    uint64_t total, want;
  } good[] = {
      {"256M", 0, 268435456ull}, {"1.5G", 0, 1610612736ull}, {"4096", 0, 4096},
      {"1K", 0, 1024},           {"2T", 0, 2ull << 40},      {"50%", 1000, 500},
      {"100%", 1000, 1000},
  };
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    uint64_t got = 0;
    int status = dlrt_parse_size(good[i].text, good[i].total, &got);
    if (tap_check(status, "dlrt_parse_size(\"%s\")", good[i].text))
      is_u64(got, good[i].want, "\"%s\" of %llu is %llu", good[i].text,
             (unsigned long long)good[i].total, (unsigned long long)good[i].want);
  }
  const char *const bad[] = {"",         "abc",    "-1",
                             "12Q",      "150%",   "M",
                             "%",        "1.5.5G", "18446744073709551616",
                             "20000000T"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    uint64_t got = 0;
    is_status(dlrt_parse_size(bad[i], 1000, &got), DLRT_ERR_INVALID_ARG,
              "dlrt_parse_size(\"%s\") is refused", bad[i]);
  }
  uint64_t got = 0;
  is_status(dlrt_parse_size(NULL, 1000, &got), DLRT_ERR_INVALID_ARG,
            "dlrt_parse_size(NULL)");
  is_status(dlrt_parse_size("1K", 1000, NULL), DLRT_ERR_INVALID_ARG,
            "dlrt_parse_size into NULL");
}

/* DLRT_MEM_LIMIT is read when the library starts and applies to every device. */
static void test_env_limit(void) {
  dlrt_shutdown();
  setenv("DLRT_MEM_LIMIT", "64M", 1);
  for (int i = 0; i < dlrt_device_count(); i++) {
    dlrt_device_t *dev = NULL;
    if (dlrt_device_get(i, &dev) != DLRT_OK)
      continue;
    is_u64(dlrt_mem_get_limit(dev), 64 * MiB, "DLRT_MEM_LIMIT=64M: %s",
           dlrt_device_spec(dev));
    dlrt_buffer_t *buf = NULL;
    is_status(dlrt_buffer_alloc(dev, 100 * MiB, NULL, &buf), DLRT_ERR_OOM,
              "DLRT_MEM_LIMIT=64M: 100 MiB on %s", dlrt_device_spec(dev));
  }
  dlrt_shutdown();
  setenv("DLRT_MEM_LIMIT", "50%", 1);
  for (int i = 0; i < dlrt_device_count(); i++) {
    dlrt_device_t *dev = NULL;
    dlrt_device_props p;
    if (dlrt_device_get(i, &dev) != DLRT_OK ||
        dlrt_device_props_get(dev, &p) != DLRT_OK)
      continue;
    uint64_t limit = dlrt_mem_get_limit(dev);
    uint64_t half = p.total_memory / 2;
    ok(limit + 1 >= half && limit <= half + 1,
       "DLRT_MEM_LIMIT=50%%: %s's budget %llu is half of %llu", dlrt_device_spec(dev),
       (unsigned long long)limit, (unsigned long long)p.total_memory);
  }
  dlrt_shutdown();
  unsetenv("DLRT_MEM_LIMIT");
}

int main(void) {
  unsetenv("DLRT_MEM_LIMIT"); /* the exact numbers assume the default budget */
  test_parse_size();

  int count = dlrt_device_count();
  if (count < 1)
    bail_out("no devices: %s", dlrt_last_error());
  for (int i = 0; i < count; i++) {
    device_info d;
    dlrt_device_props p;
    if (dlrt_device_get(i, &d.dev) != DLRT_OK ||
        dlrt_device_props_get(d.dev, &p) != DLRT_OK)
      bail_out("device %d: %s", i, dlrt_last_error());
    d.spec = dlrt_device_spec(d.dev);
    d.host_addressable = p.host_addressable;
    d.total_memory = p.total_memory;
    dlrt_device_t *other = NULL;
    if (count > 1)
      dlrt_device_get((i + 1) % count, &other);
    diag("device %s", d.spec);

    scenario_clean_start(&d);
    scenario_small_pool(&d);
    check_invariants(&d, "after the small-pool scenario");
    scenario_rounding(&d);
    scenario_segment_sizes(&d);
    scenario_pools_apart(&d);
    scenario_large_split_merge(&d);
    scenario_small_split_merge(&d);
    scenario_best_fit(&d);
    scenario_empty_cache(&d);
    scenario_fragmentation(&d);
    scenario_peaks(&d);
    scenario_budget(&d);
    check_invariants(&d, "at the end");
    scenario_summary(&d, i == 0);
    scenario_bad_arguments(&d, other);
    dlrt_mem_set_limit(d.dev, 0);
  }
  test_env_limit();
  dlrt_shutdown();
  return done_testing();
}
