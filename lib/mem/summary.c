/* summary.c — dlrt_mem_summary: allocator statistics as a readable table,
 * in the spirit of torch.cuda.memory_summary(). */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

#include "device/registry.h"
#include "mem/managed.h"
#include "util/status.h"

typedef struct {
  char *buf;
  size_t size, len; /* len: what the full text needs, may exceed size */
} text;

static void put(text *t, const char *fmt, ...) DLRT__PRINTF(2, 3);
static void put(text *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = t->len < t->size ? t->size - t->len : 0;
  int n = vsnprintf(room ? t->buf + t->len : NULL, room, fmt, ap);
  va_end(ap);
  if (n > 0) t->len += (size_t)n;
}

static const char *human(char *out, size_t n, uint64_t bytes) {
  if (bytes >= (uint64_t)1 << 30) snprintf(out, n, "%.2f GiB", (double)bytes / (1 << 30));
  else if (bytes >= (uint64_t)1 << 20) snprintf(out, n, "%.2f MiB", (double)bytes / (1 << 20));
  else if (bytes >= 1024) snprintf(out, n, "%.2f KiB", (double)bytes / 1024);
  else snprintf(out, n, "%" PRIu64 " B", bytes);
  return out;
}

/* Two tables: the byte figures and segments, current and peak; then the
 * counts since the start and the cache's state now, one value each. */
static void table(text *t, const char *title, const dlrt_mem_stats *s) {
  char a[24], b[24];
  static const char rule2[] = "|--------------------------|----------------|----------------|\n";
  static const char rule1[] = "|--------------------------|----------------|\n";
  put(t, "| %-24s | %14s | %14s |\n", title, "current", "peak");
  put(t, rule2);
#define ROW(label, c) \
  put(t, "| %-24s | %14s | %14s |\n", label, human(a, sizeof a, (c).current), human(b, sizeof b, (c).peak))
  ROW("allocated", s->allocated);
  ROW("requested", s->requested);
  ROW("active", s->active);
  ROW("reserved", s->reserved);
#undef ROW
  put(t, "| %-24s | %14" PRIu64 " | %14" PRIu64 " |\n", "segments", s->segments.current, s->segments.peak);
  put(t, "\n| %-24s | %14s |\n", "counts, cache and budget", "value");
  put(t, rule1);
#define COUNT(label, v) put(t, "| %-24s | %14" PRIu64 " |\n", label, (uint64_t)(v))
  COUNT("allocations", s->alloc_count);
  COUNT("frees", s->free_count);
  COUNT("cache hits", s->cache_hits);
  COUNT("driver allocations", s->driver_allocs);
  COUNT("driver frees", s->driver_frees);
  COUNT("retries", s->retries);
  COUNT("out-of-memory errors", s->oom_count);
#undef COUNT
  put(t, "| %-24s | %14s |\n", "cached free", human(a, sizeof a, s->cached_free));
  put(t, "| %-24s | %14s |\n", "largest free block", human(a, sizeof a, s->largest_free));
  put(t, "| %-24s | %13.1f%% |\n", "fragmentation", 100.0 * s->fragmentation);
  put(t, "| %-24s | %14s |\n", "budget", s->limit ? human(a, sizeof a, s->limit) : "none");
}

int dlrt_mem_summary(dlrt_device_t *dev, char *buf, size_t size) {
  DLRT__CHECK_ARG(dev, "device is NULL");
  DLRT__CHECK_ARG(buf || size == 0, "buf is NULL but size is %zu", size);
  dlrt_mem_stats dm, hm;
  int rc = dlrt_mem_stats_get(dev, &dm);
  if (rc == DLRT_OK) rc = dlrt_host_stats_get(dev, &hm);
  if (rc < 0) return rc;
  text t = {buf, size, 0};
  put(&t, "dlrt memory summary: %s\n", dev->spec);
  table(&t, "device memory", &dm);
  put(&t, "\n");
  table(&t, "pinned host pool", &hm);
  dlrt_pageable_stats pg;
  if (dlrt_pageable_stats_get(dev, &pg) == DLRT_OK && pg.count) {
    char a[24], b[24];
    put(&t, "\npast the pinned limit, staging in pageable memory (DLRT_PINNED_LIMIT)\n");
    put(&t, "  now %s, at most %s, %" PRIu64 " allocations\n", human(a, sizeof a, pg.current),
        human(b, sizeof b, pg.peak), pg.count);
  }
  dlrt_spill_stats sp;
  if (dlrt__spill_totals(dev, &sp)) {
    put(&t, "\nspilling (unified-memory emulation), all executors on this device\n");
    put(&t, "  off the device    %12.1f MiB   back to the device %12.1f MiB\n",
        (double)sp.spilled_bytes / 1048576.0, (double)sp.fetched_bytes / 1048576.0);
    put(&t, "  of it to disk     %12.1f MiB\n", (double)sp.spilled_to_disk_bytes / 1048576.0);
    /* The spill file also takes host copies past the host budget. */
    put(&t, "  disk writes       %12.1f MiB   disk reads         %12.1f MiB\n",
        (double)sp.disk_written_bytes / 1048576.0, (double)sp.disk_read_bytes / 1048576.0);
    put(&t, "  evictions         %12llu       of them clean      %12llu\n",
        (unsigned long long)sp.evictions, (unsigned long long)sp.dropped_clean);
    put(&t, "  offloads          %12llu       prefetch hits      %12llu   misses %llu\n",
        (unsigned long long)sp.offloads, (unsigned long long)sp.prefetch_hits,
        (unsigned long long)sp.prefetch_misses);
    put(&t, "  waiting copies    %12.1f ms    largest resident   %12.1f MiB\n", sp.transfer_ms,
        (double)sp.peak_resident / 1048576.0);
  }
  if (size) buf[t.len < size ? t.len : size - 1] = '\0';
  return t.len > INT32_MAX ? INT32_MAX : (int)t.len;
}
