/*
 * test-pinned-limit.c — the pinned host pool's budget (DLRT_PINNED_LIMIT):
 * by default half of RAM; a size or a percentage of RAM sets it; the pool
 * reports it as its limit, serves and reuses blocks within it, and refuses
 * past it with DLRT_ERR_OOM naming DLRT_PINNED_LIMIT (dlrt's own staging
 * then falls back to pageable memory: tests/test-pinned-limit.sh); a value
 * that is no size is an error naming the variable. Each case is a fresh
 * library (dlrt_shutdown) with the variable set before the first use.
 * Points: computed at run time (done_testing).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlrt.h"
#include "tap.h"

#define MiB ((uint64_t)1 << 20)

static uint64_t ram(void) {
  return (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
}

static dlrt_mem_stats host_stats(dlrt_device_t *dev) {
  dlrt_mem_stats s;
  memset(&s, 0, sizeof s);
  if (dlrt_host_stats_get(dev, &s) != DLRT_OK)
    bail_out("dlrt_host_stats_get(%s): %s", dlrt_device_spec(dev), dlrt_last_error());
  return s;
}

static void with_limit(dlrt_device_t *dev, const char *spec, void *ctx) {
  (void)ctx;
  dlrt_mem_stats st = host_stats(dev);
  is_u64(st.limit, 4 * MiB, "%s: DLRT_PINNED_LIMIT=4M is the pool's limit", spec);
  void *a = NULL, *b = NULL, *big = NULL;
  tap_check(dlrt_host_alloc(dev, 1 * MiB, &a), "%s: 1 MiB within the limit", spec);
  tap_check(dlrt_host_alloc(dev, 1 * MiB, &b), "%s: another 1 MiB", spec);
  tap_check(dlrt_host_free(a), "%s: freed", spec);
  uint64_t drivers = host_stats(dev).driver_allocs;
  tap_check(dlrt_host_alloc(dev, 1 * MiB, &a), "%s: 1 MiB again", spec);
  is_u64(host_stats(dev).driver_allocs, drivers, "%s: reused from the pool, no new driver "
         "allocation", spec);
  int rc = dlrt_host_alloc(dev, 8 * MiB, &big);
  is_status(rc, DLRT_ERR_OOM, "%s: 8 MiB past the 4 MiB limit is refused", spec);
  ok(strstr(dlrt_last_error(), "DLRT_PINNED_LIMIT") != NULL,
     "%s: the message names DLRT_PINNED_LIMIT: %s", spec, dlrt_last_error());
  ok(host_stats(dev).reserved.current <= 4 * MiB, "%s: the pool stays within its limit "
     "(%llu bytes reserved)", spec, (unsigned long long)host_stats(dev).reserved.current);
  dlrt_pageable_stats pg;
  tap_check(dlrt_pageable_stats_get(dev, &pg), "%s: dlrt_pageable_stats_get", spec);
  is_u64(pg.count, 0, "%s: dlrt_host_alloc itself never falls back to pageable memory", spec);
  dlrt_host_free(a);
  dlrt_host_free(b);
}

int main(void) {
  /* The default: half of RAM. */
  unsetenv("DLRT_PINNED_LIMIT");
  dlrt_device_t *cpu = NULL;
  tap_check(dlrt_device_open("cpu", &cpu), "open the cpu");
  is_u64(host_stats(cpu).limit, ram() / 2, "by default the pinned pool is bounded by half of "
         "RAM (%llu MiB)", (unsigned long long)(ram() / 2 / MiB));
  dlrt_shutdown();

  /* A percentage is of RAM. */
  setenv("DLRT_PINNED_LIMIT", "25%", 1);
  tap_check(dlrt_device_open("cpu", &cpu), "open the cpu with DLRT_PINNED_LIMIT=25%%");
  uint64_t got = host_stats(cpu).limit, want = ram() / 4;
  ok(got + 1 >= want && got <= want + 1, "25%% of RAM: %llu bytes, want %llu",
     (unsigned long long)got, (unsigned long long)want);
  dlrt_shutdown();

  /* A size, on every device. */
  setenv("DLRT_PINNED_LIMIT", "4M", 1);
  tap_for_each_device(with_limit, NULL);
  dlrt_shutdown();

  /* Not a size. */
  setenv("DLRT_PINNED_LIMIT", "lots", 1);
  tap_check(dlrt_device_open("cpu", &cpu), "open the cpu with DLRT_PINNED_LIMIT=lots");
  void *p = NULL;
  is_status(dlrt_host_alloc(cpu, 4096, &p), DLRT_ERR_INVALID_ARG,
            "pinned memory under DLRT_PINNED_LIMIT=lots is refused");
  ok(strstr(dlrt_last_error(), "DLRT_PINNED_LIMIT=\"lots\"") != NULL,
     "the message names the variable and its value: %s", dlrt_last_error());
  dlrt_shutdown();
  unsetenv("DLRT_PINNED_LIMIT");
  return done_testing();
}
