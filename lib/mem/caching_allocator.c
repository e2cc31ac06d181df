/* caching_allocator.c — size-binned best-fit caching allocator with split,
 * merge, stream-ordered reuse, a budget, and garbage-collect-and-retry.
 * The rules are listed in caching_allocator.h. */
#include "config.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "mem/caching_allocator.h"
#include "util/status.h"

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)

enum {
  ROUND = DLRT__ALLOC_GRANULE, /* every block size is a multiple of this */
  SMALL_MAX = 1 << 20,         /* requests <= 1 MiB use the small pool */
  SMALL_SEGMENT = 2 << 20,     /* small-pool segment size */
  MID_MAX = DLRT__ALLOC_OWN_SEGMENT, /* requests < 10 MiB get a 20 MiB segment */
  MID_SEGMENT = 20 << 20,
  LARGE_ROUND = DLRT__ALLOC_LARGE_ROUND, /* large segments round to 2 MiB */
  POOL_SMALL = 0,
  POOL_LARGE = 1,
  SUB_BITS = 2,                /* 4 bins per power of two */
  N_BINS = 64 << SUB_BITS,
  MAX_EVENTS = 4,              /* pending stream events a free block keeps */
};

/* An event shared by the blocks split from one block. */
typedef struct {
  dlrt_event_t *ev;
  dlrt_stream_t *stream; /* recorded there */
  int refs;
} pending_event;

struct dlrt__block {
  struct segment *seg;
  size_t offset, size;   /* within the segment, bytes */
  size_t requested;      /* what the caller asked for (live blocks) */
  int allocated;
  dlrt_stream_t *stream; /* allocation stream; for a free block, its last */
  /* Live block: streams named by record_stream. Free block: events that work
   * on other streams must finish before a reuse. */
  dlrt_stream_t *uses[MAX_EVENTS];
  int n_uses;
  pending_event *events[MAX_EVENTS];
  int n_events;
  dlrt__block *prev, *next;       /* neighbours by address in the segment */
  dlrt__block *bin_prev, *bin_next; /* free-bin list */
  int bin;
};

typedef struct segment {
  dlrt_mem mem;
  size_t size;
  int pool;
  dlrt__block *first;
  struct segment *prev, *next;
} segment;

struct dlrt__allocator {
  dlrt_device_t *dev;
  int host;
  pthread_mutex_t lock;
  uint64_t limit; /* budget on reserved bytes; UINT64_MAX: none */
  uint64_t capacity; /* the memory behind the pool: device memory, or host RAM */
  segment *segments;
  dlrt__block *bins[2][N_BINS];
  uint64_t pending_bytes; /* free bytes still carrying events (in `active`) */
  uint64_t allocated_high; /* allocated peaks before the last reset_peak */
  dlrt_mem_stats st;
};

/* ---------------------------------------------------------------- helpers */

static size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

static void counter_add(dlrt_mem_counter *c, uint64_t v) {
  c->current += v;
  if (c->current > c->peak) c->peak = c->current;
}

static void counter_sub(dlrt_mem_counter *c, uint64_t v) { c->current -= v; }

static int pool_of(size_t size) { return size <= SMALL_MAX ? POOL_SMALL : POOL_LARGE; }

/* Monotone bin index: the power of two plus SUB_BITS bits below it. */
static int bin_of(size_t size) {
  int log2 = 63 - __builtin_clzll((unsigned long long)size);
  int sub = log2 >= SUB_BITS ? (int)((size >> (log2 - SUB_BITS)) & ((1 << SUB_BITS) - 1)) : 0;
  return (log2 << SUB_BITS) | sub;
}

static void fmt_bytes(char *out, size_t n, uint64_t bytes) {
  if (bytes >= (uint64_t)1 << 30)
    snprintf(out, n, "%.2f GiB", (double)bytes / (1 << 30));
  else if (bytes >= (uint64_t)1 << 20)
    snprintf(out, n, "%.1f MiB", (double)bytes / (1 << 20));
  else
    snprintf(out, n, "%" PRIu64 " B", bytes);
}

/* A free block still carrying events counts as `active`: streams may still be
 * using it. count/uncount bracket every change to a free block's size or events. */
static int is_pending(const dlrt__block *b) { return !b->allocated && b->n_events > 0; }

static void uncount(dlrt__allocator *a, const dlrt__block *b) {
  if (is_pending(b)) {
    a->pending_bytes -= b->size;
    counter_sub(&a->st.active, b->size);
  }
}

static void count(dlrt__allocator *a, const dlrt__block *b) {
  if (is_pending(b)) {
    a->pending_bytes += b->size;
    counter_add(&a->st.active, b->size);
  }
}

/* ---------------------------------------------------------------- events */

static pending_event *event_record_on(dlrt__allocator *a, dlrt_stream_t *stream) {
  pending_event *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  if (dlrt_event_create(a->dev, &e->ev) < 0) {
    free(e);
    return NULL;
  }
  if (dlrt_event_record(e->ev, stream) < 0) {
    dlrt_event_destroy(e->ev);
    free(e);
    return NULL;
  }
  e->stream = stream;
  e->refs = 1;
  return e;
}

static void event_release(dlrt__allocator *a, pending_event *e) {
  (void)a;
  if (--e->refs == 0) {
    dlrt_event_destroy(e->ev);
    free(e);
  }
}

static void block_clear_events(dlrt__allocator *a, dlrt__block *b) {
  for (int i = 0; i < b->n_events; i++) event_release(a, b->events[i]);
  b->n_events = 0;
}

/* Drops events that have completed, so the block counts as idle. */
static void block_retire_events(dlrt__allocator *a, dlrt__block *b) {
  int kept = 0;
  for (int i = 0; i < b->n_events; i++) {
    if (dlrt_event_query(b->events[i]->ev) == 1)
      event_release(a, b->events[i]);
    else
      b->events[kept++] = b->events[i];
  }
  b->n_events = kept;
}

/* Adds an event to a free block, keeping at most MAX_EVENTS: beyond that the
 * host waits for the oldest one (rare: many streams touching one block). */
static void block_add_event(dlrt__allocator *a, dlrt__block *b, pending_event *e) {
  if (b->n_events == MAX_EVENTS) {
    dlrt_event_synchronize(b->events[0]->ev);
    event_release(a, b->events[0]);
    memmove(b->events, b->events + 1, (MAX_EVENTS - 1) * sizeof b->events[0]);
    b->n_events--;
  }
  e->refs++;
  b->events[b->n_events++] = e;
}

/* Orders `stream` after all work that may still use free block `b`. */
static int block_order_for(dlrt__allocator *a, dlrt__block *b, dlrt_stream_t *stream) {
  int rc = DLRT_OK;
  if (a->host) return DLRT_OK;
  if (b->stream && b->stream != stream) {
    /* Lazily recorded: covers every use on the last stream so far. */
    pending_event *e = event_record_on(a, b->stream);
    if (!e) return dlrt__set_error(DLRT_ERR_BACKEND, "%s: cannot record an event for "
                                   "stream-ordered reuse: %s", a->dev->spec, dlrt_last_error());
    rc = dlrt_stream_wait_event(stream, e->ev);
    event_release(a, e);
  }
  for (int i = 0; rc == DLRT_OK && i < b->n_events; i++)
    if (b->events[i]->stream != stream)
      rc = dlrt_stream_wait_event(stream, b->events[i]->ev);
  block_clear_events(a, b);
  return rc;
}

/* ---------------------------------------------------------------- bins */

static void bin_insert(dlrt__allocator *a, dlrt__block *b) {
  int pool = b->seg->pool;
  b->bin = bin_of(b->size);
  b->bin_prev = NULL;
  b->bin_next = a->bins[pool][b->bin];
  if (b->bin_next) b->bin_next->bin_prev = b;
  a->bins[pool][b->bin] = b;
  a->st.cached_free += b->size;
}

static void bin_remove(dlrt__allocator *a, dlrt__block *b) {
  int pool = b->seg->pool;
  if (b->bin_prev) b->bin_prev->bin_next = b->bin_next;
  else a->bins[pool][b->bin] = b->bin_next;
  if (b->bin_next) b->bin_next->bin_prev = b->bin_prev;
  b->bin_prev = b->bin_next = NULL;
  a->st.cached_free -= b->size;
}

static uintptr_t block_address(const dlrt__block *b) {
  return (uintptr_t)b->seg->mem.handle + b->offset;
}

/* Smallest free block >= size (ties: same stream first, then lowest address).
 * Every block of a higher bin is larger than every block of a lower one, so
 * the first bin holding a fit holds the best fit. */
static dlrt__block *find_best_fit(dlrt__allocator *a, int pool, size_t size,
                                  dlrt_stream_t *stream) {
  for (int bin = bin_of(size); bin < N_BINS; bin++) {
    dlrt__block *best = NULL;
    for (dlrt__block *b = a->bins[pool][bin]; b; b = b->bin_next) {
      if (b->size < size) continue;
      if (!best || b->size < best->size ||
          (b->size == best->size &&
           ((b->stream == stream) > (best->stream == stream) ||
            ((b->stream == stream) == (best->stream == stream) &&
             block_address(b) < block_address(best)))))
        best = b;
    }
    if (best) return best;
  }
  return NULL;
}

/* ---------------------------------------------------------------- segments */

static void segment_memory_free(dlrt__allocator *a, segment *s) {
  if (a->host) dlrt__device_host_free(a->dev, s->mem);
  else dlrt__device_mem_free(a->dev, s->mem);
}

static int segment_new(dlrt__allocator *a, size_t size, int pool, segment **out) {
  segment *s = calloc(1, sizeof *s);
  dlrt__block *b = calloc(1, sizeof *b);
  int rc;
  if (!s || !b) {
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory for allocator bookkeeping");
    goto fail;
  }
  rc = a->host ? dlrt__device_host_alloc(a->dev, size, &s->mem)
               : dlrt__device_mem_alloc(a->dev, size, &s->mem);
  if (rc < 0) goto fail;
  s->size = size;
  s->pool = pool;
  s->first = b;
  b->seg = s;
  b->size = size;
  s->next = a->segments;
  if (s->next) s->next->prev = s;
  a->segments = s;
  counter_add(&a->st.reserved, size);
  counter_add(&a->st.segments, 1);
  a->st.driver_allocs++;
  bin_insert(a, b);
  *out = s;
  return DLRT_OK;
fail:
  free(s);
  free(b);
  return rc;
}

static void segment_release(dlrt__allocator *a, segment *s) {
  dlrt__block *b = s->first;
  uncount(a, b);
  block_clear_events(a, b);
  bin_remove(a, b);
  free(b);
  if (s->prev) s->prev->next = s->next;
  else a->segments = s->next;
  if (s->next) s->next->prev = s->prev;
  segment_memory_free(a, s);
  counter_sub(&a->st.reserved, s->size);
  counter_sub(&a->st.segments, 1);
  a->st.driver_frees++;
  free(s);
}

/* Releases every fully free segment. The device is synchronized first, so no
 * queued work can still touch the memory given back to the driver. */
static uint64_t release_cached(dlrt__allocator *a) {
  uint64_t released = 0;
  if (!a->host) dlrt__device_sync_all(a->dev);
  for (segment *s = a->segments, *next; s; s = next) {
    next = s->next;
    if (!s->first->allocated && !s->first->next) {
      released += s->size;
      segment_release(a, s);
    }
  }
  return released;
}

/* ---------------------------------------------------------------- alloc/free */

static size_t segment_size_for(dlrt__allocator *a, size_t size) {
  size_t standard = size <= SMALL_MAX ? SMALL_SEGMENT
                    : size < MID_MAX  ? MID_SEGMENT
                                      : round_up(size, LARGE_ROUND);
  size_t minimal = size <= SMALL_MAX ? SMALL_SEGMENT : round_up(size, LARGE_ROUND);
  uint64_t room = a->limit - a->st.reserved.current;
  if (a->st.reserved.current <= a->limit && standard > room && minimal <= room)
    return minimal;
  return standard;
}

static int grow(dlrt__allocator *a, size_t size, int pool, segment **out) {
  size_t seg_size = segment_size_for(a, size);
  int rc;
  if (a->st.reserved.current + seg_size <= a->limit) {
    rc = segment_new(a, seg_size, pool, out);
    if (rc != DLRT_ERR_OOM) return rc;
  }
  /* Over budget or refused by the driver: give the cache back and retry. */
  a->st.retries++;
  release_cached(a);
  seg_size = segment_size_for(a, size);
  if (a->st.reserved.current + seg_size > a->limit) {
    char want[32], limit[32], reserved[32], live[32], need[32];
    fmt_bytes(want, sizeof want, size);
    fmt_bytes(limit, sizeof limit, a->limit);
    fmt_bytes(reserved, sizeof reserved, a->st.reserved.current);
    fmt_bytes(live, sizeof live, a->st.allocated.current);
    fmt_bytes(need, sizeof need, a->st.reserved.current + round_up(size, pool == POOL_SMALL ? SMALL_SEGMENT : LARGE_ROUND));
    return dlrt__set_error(DLRT_ERR_OOM,
        "%s: cannot allocate %s%s: the budget is %s and %s is reserved, %s of it "
        "in live buffers; the smallest budget that fits is %s: raise %s, free buffers, "
        "or use a smaller batch",
        a->dev->spec, want, a->host ? " of pinned host memory" : "", limit,
        reserved, live, need,
        a->host ? "DLRT_PINNED_LIMIT (a size, or a percentage of RAM)"
                : "DLRT_MEM_LIMIT (or dlrt_mem_set_limit)");
  }
  rc = segment_new(a, seg_size, pool, out);
  if (rc == DLRT_ERR_OOM) {
    char want[32];
    fmt_bytes(want, sizeof want, size);
    return dlrt__set_error(DLRT_ERR_OOM, "%s: the driver refused %s%s even after the "
        "cache was emptied (%s); free buffers, lower DLRT_MEM_LIMIT to share the device, "
        "or use a smaller batch", a->dev->spec, want,
        a->host ? " of pinned host memory" : "", dlrt_last_error());
  }
  return rc;
}

/* Carves `size` bytes off the front of free block `b` when the rest is worth
 * keeping; the rest stays free with the same stream and events. */
static void maybe_split(dlrt__allocator *a, dlrt__block *b, size_t size, int exact) {
  size_t rest = b->size - size;
  int pool = b->seg->pool;
  size_t keep_below = pool == POOL_SMALL || exact ? ROUND : (size_t)DLRT__ALLOC_SPLIT_MIN + 1;
  if (rest < keep_below) return;
  dlrt__block *r = calloc(1, sizeof *r);
  if (!r) return; /* keep the block whole: wasteful, still correct */
  r->seg = b->seg;
  r->offset = b->offset + size;
  r->size = rest;
  r->stream = b->stream;
  r->prev = b;
  r->next = b->next;
  if (b->next) b->next->prev = r;
  b->next = r;
  b->size = size;
  for (int i = 0; i < b->n_events; i++) {
    b->events[i]->refs++;
    r->events[r->n_events++] = b->events[i];
  }
  count(a, r);
  bin_insert(a, r);
}

int dlrt__allocator_alloc(dlrt__allocator *a, size_t bytes, dlrt_stream_t *stream,
                          dlrt__block **out, dlrt_mem *mem, size_t *offset) {
  return dlrt__allocator_alloc_ex(a, bytes, stream, 0, out, mem, offset);
}

int dlrt__allocator_alloc_ex(dlrt__allocator *a, size_t bytes, dlrt_stream_t *stream, int exact,
                             dlrt__block **out, dlrt_mem *mem, size_t *offset) {
  if (bytes > SIZE_MAX - LARGE_ROUND || (a->capacity && bytes > a->capacity)) {
    char want[32], have[32];
    fmt_bytes(want, sizeof want, bytes);
    fmt_bytes(have, sizeof have, a->capacity);
    pthread_mutex_lock(&a->lock);
    a->st.oom_count++;
    pthread_mutex_unlock(&a->lock);
    return dlrt__set_error(DLRT_ERR_OOM, "%s: %s%s can never be allocated: the %s has %s "
                           "in all; use a smaller batch or split the tensor", a->dev->spec, want,
                           a->host ? " of pinned host memory" : "",
                           a->host ? "host" : "device", have);
  }
  size_t size = round_up(bytes, ROUND);
  int pool = pool_of(size);
  int rc = DLRT_OK;
  pthread_mutex_lock(&a->lock);
  dlrt__block *b = find_best_fit(a, pool, size, stream);
  if (b) {
    a->st.cache_hits++;
  } else {
    segment *s;
    rc = grow(a, size, pool, &s);
    if (rc < 0) {
      if (rc == DLRT_ERR_OOM) a->st.oom_count++;
      goto out;
    }
    b = s->first;
  }
  /* Leaving the free state: the bytes stop counting as pending. The split-off
   * rest keeps the events; the block itself is ordered for its new stream. */
  bin_remove(a, b);
  uncount(a, b);
  maybe_split(a, b, size, exact);
  rc = block_order_for(a, b, stream);
  if (rc < 0) {
    count(a, b);
    bin_insert(a, b);
    goto out;
  }
  b->allocated = 1;
  b->stream = stream;
  b->requested = bytes;
  b->n_uses = 0;
  counter_add(&a->st.allocated, b->size);
  counter_add(&a->st.requested, bytes);
  counter_add(&a->st.active, b->size);
  a->st.alloc_count++;
  *out = b;
  *mem = b->seg->mem;
  *offset = b->offset;
out:
  pthread_mutex_unlock(&a->lock);
  return rc;
}

/* Merges free block `n` (the right neighbour) into free block `b`; neither is
 * in a bin nor counted as pending while this runs. */
static void merge_into(dlrt__allocator *a, dlrt__block *b, dlrt__block *n) {
  /* The merged block must order reuse after both halves' last streams. */
  if (n->stream && n->stream != b->stream) {
    if (!b->stream) {
      b->stream = n->stream;
    } else {
      pending_event *e = event_record_on(a, n->stream);
      if (e) {
        block_add_event(a, b, e);
        event_release(a, e);
      } else {
        dlrt_stream_synchronize(n->stream);
      }
    }
  }
  for (int i = 0; i < n->n_events; i++) block_add_event(a, b, n->events[i]);
  block_clear_events(a, n);
  b->size += n->size;
  b->next = n->next;
  if (n->next) n->next->prev = b;
  free(n);
}

void dlrt__allocator_free(dlrt__allocator *a, dlrt__block *b) {
  pthread_mutex_lock(&a->lock);
  counter_sub(&a->st.allocated, b->size);
  counter_sub(&a->st.requested, b->requested);
  counter_sub(&a->st.active, b->size);
  a->st.free_count++;
  b->allocated = 0;
  /* Streams named by record_stream: their work so far must finish before
   * any reuse, even on the allocation stream. */
  for (int i = 0; i < b->n_uses; i++) {
    pending_event *e = event_record_on(a, b->uses[i]);
    if (e) {
      block_add_event(a, b, e);
      event_release(a, e);
    } else {
      dlrt_stream_synchronize(b->uses[i]);
    }
  }
  b->n_uses = 0;
  if (b->prev && !b->prev->allocated) {
    dlrt__block *p = b->prev;
    bin_remove(a, p);
    uncount(a, p);
    merge_into(a, p, b);
    b = p;
  }
  if (b->next && !b->next->allocated) {
    dlrt__block *n = b->next;
    bin_remove(a, n);
    uncount(a, n);
    merge_into(a, b, n);
  }
  count(a, b);
  bin_insert(a, b);
  pthread_mutex_unlock(&a->lock);
}

int dlrt__allocator_record_stream(dlrt__allocator *a, dlrt__block *b,
                                  dlrt_stream_t *stream) {
  int rc = DLRT_OK;
  pthread_mutex_lock(&a->lock);
  if (stream != b->stream) {
    int known = 0;
    for (int i = 0; i < b->n_uses; i++) known |= b->uses[i] == stream;
    if (!known) {
      if (b->n_uses == MAX_EVENTS)
        rc = dlrt__set_error(DLRT_ERR_STATE, "a buffer can be used on at most %d "
                             "streams besides its own", MAX_EVENTS);
      else
        b->uses[b->n_uses++] = stream;
    }
  }
  pthread_mutex_unlock(&a->lock);
  return rc;
}

/* ---------------------------------------------------------------- lifetime */

int dlrt__allocator_create(dlrt_device_t *dev, int host, uint64_t capacity,
                           dlrt__allocator **out) {
  dlrt__allocator *a = calloc(1, sizeof *a);
  if (!a) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  a->dev = dev;
  a->host = host;
  a->capacity = capacity;
  a->limit = UINT64_MAX;
  pthread_mutex_init(&a->lock, NULL);
  *out = a;
  return DLRT_OK;
}

void dlrt__allocator_destroy(dlrt__allocator *a) {
  if (!a) return;
  pthread_mutex_lock(&a->lock);
  release_cached(a);
  /* Segments with live blocks: the caller leaked buffers. Release the memory
   * anyway so the driver context can go; the leaked handles dangle. */
  while (a->segments) {
    segment *s = a->segments;
    dlrt__block *b = s->first;
    while (b) {
      dlrt__block *n = b->next;
      for (int i = 0; i < b->n_events; i++) event_release(a, b->events[i]);
      if (b->bin_prev || a->bins[s->pool][b->bin] == b) bin_remove(a, b);
      free(b);
      b = n;
    }
    s->first = NULL;
    a->segments = s->next;
    segment_memory_free(a, s);
    free(s);
  }
  pthread_mutex_unlock(&a->lock);
  pthread_mutex_destroy(&a->lock);
  free(a);
}

int dlrt__allocator_set_limit(dlrt__allocator *a, uint64_t bytes) {
  pthread_mutex_lock(&a->lock);
  a->limit = bytes ? bytes : UINT64_MAX;
  if (a->st.reserved.current > a->limit) release_cached(a);
  pthread_mutex_unlock(&a->lock);
  return DLRT_OK;
}

uint64_t dlrt__allocator_limit(dlrt__allocator *a) {
  pthread_mutex_lock(&a->lock);
  uint64_t l = a->limit;
  pthread_mutex_unlock(&a->lock);
  return l;
}

int dlrt__allocator_empty_cache(dlrt__allocator *a) {
  pthread_mutex_lock(&a->lock);
  release_cached(a);
  pthread_mutex_unlock(&a->lock);
  return DLRT_OK;
}

void dlrt__allocator_stats(dlrt__allocator *a, dlrt_mem_stats *out) {
  pthread_mutex_lock(&a->lock);
  a->st.largest_free = 0;
  for (int pool = 0; pool < 2; pool++)
    for (int bin = 0; bin < N_BINS; bin++)
      for (dlrt__block *b = a->bins[pool][bin]; b; b = b->bin_next) {
        if (b->n_events) {
          uncount(a, b);
          block_retire_events(a, b);
          count(a, b);
        }
        if (b->size > a->st.largest_free) a->st.largest_free = b->size;
      }
  a->st.fragmentation = a->st.cached_free
      ? 1.0 - (double)a->st.largest_free / (double)a->st.cached_free : 0.0;
  a->st.limit = a->limit == UINT64_MAX ? 0 : a->limit;
  *out = a->st;
  pthread_mutex_unlock(&a->lock);
}

void dlrt__allocator_reset_peak(dlrt__allocator *a) {
  pthread_mutex_lock(&a->lock);
  if (a->st.allocated.peak > a->allocated_high) a->allocated_high = a->st.allocated.peak;
  dlrt_mem_counter *cs[] = {&a->st.allocated, &a->st.requested, &a->st.reserved,
                            &a->st.active, &a->st.segments};
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) cs[i]->peak = cs[i]->current;
  pthread_mutex_unlock(&a->lock);
}

void dlrt__allocator_forget_stream(dlrt__allocator *a, dlrt_stream_t *stream) {
  pthread_mutex_lock(&a->lock);
  for (segment *s = a->segments; s; s = s->next)
    for (dlrt__block *b = s->first; b; b = b->next) {
      if (!b->allocated && b->stream == stream) b->stream = NULL;
      int kept = 0;
      for (int i = 0; i < b->n_uses; i++)
        if (b->uses[i] != stream) b->uses[kept++] = b->uses[i];
      b->n_uses = kept;
      /* Events recorded on the stream stay valid after it goes (CUDA and
       * OpenCL keep them; the CPU backend's events own their state). */
    }
  pthread_mutex_unlock(&a->lock);
}

uint64_t dlrt__allocator_reserved(dlrt__allocator *a) {
  pthread_mutex_lock(&a->lock);
  uint64_t r = a->st.reserved.current;
  pthread_mutex_unlock(&a->lock);
  return r;
}

void dlrt__allocator_usage(dlrt__allocator *a, uint64_t *reserved, uint64_t *allocated,
                           uint64_t *peak) {
  pthread_mutex_lock(&a->lock);
  *reserved = a->st.reserved.current;
  *allocated = a->st.allocated.current;
  *peak = a->st.allocated.peak > a->allocated_high ? a->st.allocated.peak : a->allocated_high;
  pthread_mutex_unlock(&a->lock);
}
