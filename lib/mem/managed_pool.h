/* managed_pool.h — the spill pool's state, shared by managed.c (residency,
 * eviction, prefetch, slices) and managed_io.c (the pools' totals, timed
 * and traced copies, the disk tier) (internal). */
#ifndef DLRT_MEM_MANAGED_POOL_H
#define DLRT_MEM_MANAGED_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "mem/managed.h"

/* Demand copies are timed with event pairs; this many may be pending. */
#define TIMED_MAX 64

typedef struct {
  size_t size;           /* bytes of data: what copies move */
  size_t bytes;          /* in 512-byte granules: what the budget counts */
  int declared;
  int locked;
  int dirty;             /* the device copy is the only current one */
  int on_host, on_disk;  /* a current copy there */
  void *host;            /* pinned, kept for reuse while the storage lives */
  int64_t disk_offset;   /* -1: no slot in the file */
  int64_t next_use, last_use;
  int in_flight;         /* prefetched: `fetched` must pass before use */
  int handed_over;       /* bufs[] still aliases the storage that took it over */
  int temp_host;         /* host is a view past the host budget (host_view_end frees it) */
  size_t view_spilled;   /* bytes copied off the device into that view: they reach the
                            disk (spilled_to_disk_bytes) if host_view_end writes it */
  dlrt_buffer_t *window; /* used in slices (dlrt__mpool_slices_begin), else NULL */
  size_t window_bytes;   /* its granules, counted resident and locked */
  /* A slice copied on a copy stream (dlrt__mpool_slice_async): `slice_from`
   * on the compute stream before it, `slice_done` after it on the copy
   * stream, which the compute stream has not waited for while pending. */
  dlrt_event_t *slice_from, *slice_done;
  int slice_pending;
  dlrt_event_t *fetched;
  /* Written back on the pool's write-back stream (the device-to-host copy
   * engine): `written` passes when the host copy is complete (`writing`
   * until the host has seen it pass). Meanwhile the device block is held
   * as `drain` (bufs[id] is NULL; its bytes still count as resident)
   * until the budget needs it back (the compute stream then waits for
   * `written`) or the storage is used again (it returns, uncopied). */
  dlrt_event_t *written;
  int writing;
  dlrt_buffer_t *drain;
  int64_t drain_seq;     /* the order of the drains: the oldest is released first */
} dlrt__mstore;

struct dlrt__mpool {
  dlrt_device_t *dev;
  dlrt_stream_t *compute, *copy; /* copy: prefetches (host to device) */
  dlrt_stream_t *wb;             /* write-backs (device to host) */
  uint64_t draining;             /* bytes of resident drains */
  int64_t drain_clock;
  dlrt_buffer_t **bufs;
  int n;
  dlrt__mstore *s;
  uint64_t budget, host_budget;
  uint64_t resident, host_used, locked_bytes;
  int64_t clock;         /* acquisitions so far: the LRU clock */
  int disk_fd;
  int64_t disk_end;      /* next free offset (slots are reused per storage) */
  void *staging;         /* pinned, for disk reads and writes */
  size_t staging_bytes;
  dlrt_event_t *mark;    /* on the compute stream: copies to the host done */
  dlrt_event_t *timed[TIMED_MAX][2];
  int n_timed;
  dlrt_spill_stats st;
  int check;             /* DLRT_SPILL_CHECK=1: recount the budget at every allocation */
  int broken;            /* the disk tier failed: copies may be lost, no further use */
  char disk_dir[256];    /* the spill file's folder, for messages */
};

static inline size_t granules(size_t bytes) { return (bytes + 511) / 512 * 512; }

/* managed_io.c: the figures of every pool (dlrt__spill_totals) */
void dlrt__mpool_register(dlrt__mpool *p, int add);
void dlrt__mpool_retire(dlrt__mpool *p); /* its figures so far stay counted for the device */
/* Copies on the compute stream are timed by event pairs (transfer_ms) and,
 * when tracing, spanned: begin returns the trace's clock or -1. */
void dlrt__mpool_collect_timed(dlrt__mpool *p);
int dlrt__mpool_timed_begin(dlrt__mpool *p);
int dlrt__mpool_timed_end(dlrt__mpool *p);
double dlrt__mpool_trace_begin(dlrt_stream_t *stream);
void dlrt__mpool_trace_end(dlrt_stream_t *stream, double t0, const char *what, size_t bytes,
                           int tid);
/* The disk tier: host memory at src becomes the storage's disk copy, or its
 * disk copy comes into dst; device <-> disk go through the staging buffer
 * and wait for the copy. */
int dlrt__mpool_disk_write(dlrt__mpool *p, int id, const void *src);
int dlrt__mpool_disk_read(dlrt__mpool *p, int id, void *dst);
int dlrt__mpool_write_to_disk(dlrt__mpool *p, int id);
int dlrt__mpool_read_from_disk(dlrt__mpool *p, int id);
/* The error of a pool whose disk tier failed (p->broken): every later use
 * returns it. */
int dlrt__mpool_broken(dlrt__mpool *p);

#endif
