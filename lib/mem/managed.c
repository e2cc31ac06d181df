/* managed.c — storages that spill between device, pinned host and disk under
 * budgets (see managed.h for the model): residency, eviction, prefetch and
 * slices; the copies' timing and the disk tier are in managed_io.c. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mem/buffer.h"
#include "mem/managed_pool.h"
#include "util/status.h"
#include "util/trace.h"

int dlrt__mpool_create(dlrt_device_t *dev, dlrt_stream_t *compute, dlrt_buffer_t **bufs, int n,
                       uint64_t device_budget, uint64_t host_budget, dlrt__mpool **out) {
  dlrt__mpool *p = calloc(1, sizeof *p);
  if (!p) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  p->dev = dev, p->compute = compute, p->bufs = bufs, p->n = n;
  p->budget = device_budget, p->host_budget = host_budget;
  p->disk_fd = -1;
  const char *check = getenv("DLRT_SPILL_CHECK");
  p->check = check && *check && strcmp(check, "0") != 0;
  p->s = calloc((size_t)(n > 0 ? n : 1), sizeof *p->s);
  int rc = p->s ? DLRT_OK : dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  if (rc == DLRT_OK) rc = dlrt_stream_create(dev, &p->copy);
  if (rc == DLRT_OK) rc = dlrt_stream_create(dev, &p->wb);
  if (rc == DLRT_OK) rc = dlrt_event_create(dev, &p->mark);
  for (int i = 0; i < n && rc == DLRT_OK; i++) {
    p->s[i].disk_offset = -1;
    p->s[i].next_use = INT64_MAX;
  }
  if (rc < 0) {
    dlrt__mpool_destroy(p);
    return rc;
  }
  dlrt__mpool_register(p, 1);
  *out = p;
  return DLRT_OK;
}

void dlrt__mpool_destroy(dlrt__mpool *p) {
  if (!p) return;
  if (p->compute) dlrt_stream_synchronize(p->compute);
  if (p->copy) dlrt_stream_synchronize(p->copy);
  if (p->wb) dlrt_stream_synchronize(p->wb);
  dlrt__mpool_collect_timed(p);
  dlrt__mpool_register(p, 0);
  dlrt__mpool_retire(p);
  for (int i = 0; p->s && i < p->n; i++) {
    if (!p->s[i].declared) continue;
    dlrt_host_free(p->s[i].host);
    dlrt_buffer_free(p->s[i].drain);
    dlrt_event_destroy(p->s[i].fetched);
    dlrt_event_destroy(p->s[i].written);
    dlrt_event_destroy(p->s[i].slice_from);
    dlrt_event_destroy(p->s[i].slice_done);
  }
  for (int i = 0; i < TIMED_MAX; i++) {
    dlrt_event_destroy(p->timed[i][0]);
    dlrt_event_destroy(p->timed[i][1]);
  }
  dlrt_host_free(p->staging);
  if (p->disk_fd >= 0) close(p->disk_fd);
  dlrt_event_destroy(p->mark);
  dlrt_stream_destroy(p->copy);
  dlrt_stream_destroy(p->wb);
  free(p->s);
  free(p);
}

void dlrt__mpool_declare(dlrt__mpool *p, int id, size_t bytes) {
  dlrt__mstore *m = &p->s[id];
  m->declared = 1;
  m->size = bytes ? bytes : 4;
  m->bytes = granules(m->size);
}

void dlrt__mpool_next_use(dlrt__mpool *p, int id, int64_t when) { p->s[id].next_use = when; }
uint64_t dlrt__mpool_resident(const dlrt__mpool *p) { return p->resident; }

/* ---------------------------------------------------------------- eviction */

/* The host copy of a storage being written back is complete, for the host
 * (which reads or writes it next). */
static int host_copy_done(dlrt__mstore *m) {
  if (!m->writing) return DLRT_OK;
  int rc = dlrt_event_synchronize(m->written);
  if (rc == DLRT_OK) m->writing = 0;
  return rc;
}

/* Queues the copy of the device buffer into the host copy on the write-back
 * stream, after the kernels the compute stream queued (the one that wrote
 * it among them). The buffer is the write-back stream's too from then on:
 * its reuse waits for the copy. */
static int write_back_async(dlrt__mpool *p, int id) {
  dlrt__mstore *m = &p->s[id];
  int rc;
  if (!m->written && (rc = dlrt_event_create(p->dev, &m->written)) < 0) return rc;
  if ((rc = dlrt_event_record(p->mark, p->compute)) < 0 ||
      (rc = dlrt_stream_wait_event(p->wb, p->mark)) < 0)
    return rc;
  double t0 = dlrt__mpool_trace_begin(p->wb);
  if ((rc = dlrt_copy_d2h(m->host, p->bufs[id], 0, m->size, p->wb)) < 0 ||
      (rc = dlrt_event_record(m->written, p->wb)) < 0 ||
      (rc = dlrt_buffer_record_stream(p->bufs[id], p->wb)) < 0)
    return rc;
  dlrt__mpool_trace_end(p->wb, t0, "write back", m->size, DLRT_TRACE_COPY);
  m->writing = 1;
  p->st.async_writebacks++;
  return DLRT_OK;
}

/* Writes a dirty storage back: to its host copy on the write-back stream
 * (*queued 1: the device buffer is read until `written` passes), or to disk
 * past the host budget, waited for. */
static int write_back(dlrt__mpool *p, int id, int *queued) {
  dlrt__mstore *m = &p->s[id];
  if (!m->host && (!p->host_budget || p->host_used + m->bytes <= p->host_budget)) {
    int rc = dlrt__host_alloc_staging(p->dev, m->bytes, &m->host);
    if (rc < 0) {
      m->host = NULL;
      dlrt_clear_error(); /* host memory short even pageable: the disk takes it */
    } else {
      p->host_used += m->bytes;
      if (p->host_used > p->st.peak_host) p->st.peak_host = p->host_used;
    }
  }
  int rc;
  *queued = 0;
  if (m->host) {
    if ((rc = write_back_async(p, id)) < 0) return rc;
    *queued = 1;
    m->on_host = 1;
  } else if ((rc = dlrt__mpool_write_to_disk(p, id)) < 0) {
    return rc;
  } else {
    p->st.spilled_to_disk_bytes += m->size;
  }
  p->st.spilled_bytes += m->size;
  m->dirty = 0;
  return DLRT_OK;
}

/* Gives a drain's device block back: the compute stream waits for its
 * write-back first (at once when it is done), so whatever reuses the
 * memory runs after the copy. */
static int release_drain(dlrt__mpool *p, int id) {
  dlrt__mstore *m = &p->s[id];
  int rc = dlrt_stream_wait_event(p->compute, m->written);
  dlrt_buffer_free(m->drain); /* reuse is ordered after the write-back stream's copy too */
  m->drain = NULL;
  p->resident -= m->bytes;
  p->draining -= m->bytes;
  p->st.drains_released++;
  return rc;
}

/* The drain written back first, or -1. */
static int oldest_drain(const dlrt__mpool *p) {
  int best = -1;
  for (int i = 0; i < p->n; i++)
    if (p->s[i].drain && (best < 0 || p->s[i].drain_seq < p->s[best].drain_seq)) best = i;
  return best;
}

/* A drain used again: its block returns as the storage's buffer, no copy
 * made (the host copy stays current too). Written, it waits for the
 * write-back that still reads it. */
static int reclaim_drain(dlrt__mpool *p, int id, int write) {
  dlrt__mstore *m = &p->s[id];
  p->bufs[id] = m->drain;
  m->drain = NULL;
  p->draining -= m->bytes;
  p->st.drains_reclaimed++;
  return write ? dlrt_stream_wait_event(p->compute, m->written) : DLRT_OK;
}

/* Moves an unlocked resident storage off the device. A write-back on the
 * write-back stream leaves its block as a drain, still counted resident. */
static int evict(dlrt__mpool *p, int id) {
  dlrt__mstore *m = &p->s[id];
  int rc, queued = 0;
  if (m->dirty || (!m->on_host && !m->on_disk)) {
    if ((rc = write_back(p, id, &queued)) < 0) return rc;
  } else {
    p->st.dropped_clean++;
  }
  m->in_flight = 0;
  if (queued) {
    m->drain = p->bufs[id];
    m->drain_seq = ++p->drain_clock;
    p->draining += m->bytes;
    p->bufs[id] = NULL;
    return DLRT_OK;
  }
  /* Freed on the compute stream's order: the kernels before it finish
   * before the memory is reused. */
  dlrt_buffer_free(p->bufs[id]);
  p->bufs[id] = NULL;
  p->resident -= m->bytes;
  return DLRT_OK;
}

/* The unlocked resident storage to evict: the one needed furthest in the
 * future (never again first), then the least recently used; -1 if none.
 * With `before` >= 0 only storages needed after that clock count. */
static int victim(const dlrt__mpool *p, int64_t before) {
  int best = -1;
  for (int i = 0; i < p->n; i++) {
    const dlrt__mstore *m = &p->s[i];
    if (!m->declared || !p->bufs[i] || m->locked || m->handed_over) continue;
    if (before >= 0 && m->next_use <= before) continue;
    if (best < 0 || m->next_use > p->s[best].next_use ||
        (m->next_use == p->s[best].next_use && m->last_use < p->s[best].last_use))
      best = i;
  }
  return best;
}

/* Releases drains (oldest first), then evicts, until `bytes` more fit the
 * budget; `before` as for victim(). With a `before` (a prefetch), nothing
 * is evicted unless enough can be: copies thrown out for a prefetch that
 * then does not fit would only come back. */
static int make_room(dlrt__mpool *p, size_t bytes, int64_t before, int *fits) {
  *fits = 0;
  if (before >= 0 && p->resident + bytes > p->budget) {
    uint64_t can_free = p->draining;
    for (int i = 0; i < p->n; i++) {
      const dlrt__mstore *m = &p->s[i];
      if (m->declared && p->bufs[i] && !m->locked && !m->handed_over && m->next_use > before)
        can_free += m->bytes;
    }
    if (p->resident - can_free + bytes > p->budget) return DLRT_OK;
  }
  while (p->resident + bytes > p->budget) {
    int d = oldest_drain(p), rc;
    if (d >= 0) {
      if ((rc = release_drain(p, d)) < 0) return rc;
      continue;
    }
    int v = victim(p, before);
    if (v < 0) return DLRT_OK;
    rc = evict(p, v);
    if (rc < 0) return rc;
    p->st.evictions++;
  }
  *fits = 1;
  return DLRT_OK;
}

static int no_room(dlrt__mpool *p, int id) {
  char need[32], budget[32], locked[32];
  snprintf(need, sizeof need, "%.1f MiB", (double)p->s[id].bytes / 1048576.0);
  snprintf(budget, sizeof budget, "%.1f MiB", (double)p->budget / 1048576.0);
  snprintf(locked, sizeof locked, "%.1f MiB", (double)p->locked_bytes / 1048576.0);
  uint64_t want = p->locked_bytes + p->s[id].bytes;
  if (want > p->st.min_budget) p->st.min_budget = want;
  return dlrt__set_error(DLRT_ERR_OOM, "out of device budget: %s more does not fit the spill "
                         "budget of %s with everything else moved off the device (%s is in use "
                         "by the running operation); the smallest budget that fits is %.1f MiB: "
                         "raise the limit (an optimizer update needs its parameter, gradient "
                         "and state at once: offloading the optimizer runs it on the host)",
                         need, budget, locked,
                         (double)p->st.min_budget / 1048576.0);
}

/* ---------------------------------------------------------------- use */

/* DLRT_SPILL_CHECK: the device bytes of every storage that holds a buffer,
 * counted afresh from the buffers, must be within the budget. */
static int recount(const dlrt__mpool *p) {
  uint64_t total = 0;
  for (int i = 0; i < p->n; i++)
    if (p->s[i].declared && p->bufs[i] && !p->s[i].handed_over)
      total += granules(dlrt_buffer_size(p->bufs[i]));
  for (int i = 0; i < p->n; i++) {
    if (p->s[i].window) total += granules(dlrt_buffer_size(p->s[i].window));
    if (p->s[i].drain) total += granules(dlrt_buffer_size(p->s[i].drain));
  }
  if (total > p->budget || total != p->resident)
    return dlrt__set_error(DLRT_ERR_STATE, "spill check: %llu bytes on the device (counted "
                           "%llu), budget %llu", (unsigned long long)total,
                           (unsigned long long)p->resident, (unsigned long long)p->budget);
  return DLRT_OK;
}

/* An exact block of `size` bytes (the allocator's block holds the granules
 * the budget counts). The pool's count can allow what the allocator still
 * refuses: under the allocator's own budget (DLRT_MEM_LIMIT) its segments
 * may hold free pieces none of which fits. Then, unless it is a prefetch
 * (`before` >= 0: best effort, given up), storages are evicted one by one,
 * furthest next use first, and the allocation retried, as long as any can
 * go: their blocks merge back, and segments left empty return to the
 * driver on the allocator's retry. */
static int alloc_exact(dlrt__mpool *p, size_t size, dlrt_stream_t *stream, int64_t before,
                       dlrt_buffer_t **out) {
  for (;;) {
    int rc = dlrt__buffer_alloc_ex(p->dev, size, stream, 1, out);
    if (rc != DLRT_ERR_OOM) return rc;
    *out = NULL;
    if (before >= 0) return rc;
    int d = oldest_drain(p);
    if (d >= 0) {
      if ((rc = release_drain(p, d)) < 0) return rc;
      continue;
    }
    int v = victim(p, -1);
    if (v < 0) return rc;
    if ((rc = evict(p, v)) < 0) return rc;
    p->st.evictions++;
  }
}

/* Places storage `id` on the device; *placed 0 (with DLRT_OK) when a
 * prefetch (`before` >= 0) finds no room. */
static int place(dlrt__mpool *p, int id, dlrt_stream_t *stream, int64_t before, int *placed) {
  dlrt__mstore *m = &p->s[id];
  *placed = 0;
  int fits, rc = before >= 0 ? DLRT_OK : make_room(p, m->bytes, -1, &fits);
  if (rc < 0) return rc;
  if (before < 0 && !fits) return no_room(p, id);
  rc = alloc_exact(p, m->size, stream, before, &p->bufs[id]);
  if (rc == DLRT_ERR_OOM && before >= 0) {
    dlrt_clear_error(); /* the storage is fetched when it is used instead */
    return DLRT_OK;
  }
  if (rc < 0) return rc;
  *placed = 1;
  p->resident += m->bytes;
  if (p->resident > p->st.peak_resident) p->st.peak_resident = p->resident;
  return p->check ? recount(p) : DLRT_OK;
}

int dlrt__mpool_acquire(dlrt__mpool *p, int id, int write) {
  dlrt__mstore *m = &p->s[id];
  int rc = DLRT_OK;
  if (p->broken) return dlrt__mpool_broken(p);
  m->last_use = ++p->clock;
  if (p->bufs[id]) {
    if (m->in_flight) {
      /* Prefetched: the compute stream waits for the copy, not the host. */
      if ((rc = dlrt_stream_wait_event(p->compute, m->fetched)) < 0) return rc;
      m->in_flight = 0;
      p->st.prefetch_hits++;
    }
  } else if (m->drain) {
    if ((rc = reclaim_drain(p, id, write)) < 0) return rc;
  } else {
    int has_copy = m->on_host || m->on_disk, placed;
    if ((rc = place(p, id, p->compute, -1, &placed)) < 0) return rc;
    if (has_copy) {
      p->st.prefetch_misses++;
      if (m->on_host) {
        double t0 = dlrt__mpool_trace_begin(p->compute);
        if ((m->writing && (rc = dlrt_stream_wait_event(p->compute, m->written)) < 0) ||
            (rc = dlrt__mpool_timed_begin(p)) < 0 ||
            (rc = dlrt_copy_h2d(p->bufs[id], 0, m->host, m->size, p->compute)) < 0 ||
            (rc = dlrt__mpool_timed_end(p)) < 0)
          return rc;
        dlrt__mpool_trace_end(p->compute, t0, "fetch", m->size, DLRT_TRACE_COMPUTE);
      } else if ((rc = dlrt__mpool_read_from_disk(p, id)) < 0) {
        return rc;
      }
      p->st.fetched_bytes += m->size;
    }
  }
  if (!m->locked) p->locked_bytes += m->bytes;
  m->locked++;
  if (p->locked_bytes > p->st.min_budget) p->st.min_budget = p->locked_bytes;
  if (write) {
    m->dirty = 1;
    m->on_host = m->on_disk = 0; /* stale now */
  }
  return DLRT_OK;
}

void dlrt__mpool_release(dlrt__mpool *p, int id) {
  dlrt__mstore *m = &p->s[id];
  if (m->locked > 0 && --m->locked == 0) p->locked_bytes -= m->bytes;
}

int dlrt__mpool_take_over(dlrt__mpool *p, int id, int from) {
  dlrt__mstore *m = &p->s[id], *f = &p->s[from];
  int rc = m->drain ? release_drain(p, id) : DLRT_OK; /* its old data is dead */
  if (rc < 0) return rc;
  /* bufs[from] keeps pointing at the buffer while the node reads it as its
   * input; dlrt__mpool_handed_over clears it after the node. */
  p->bufs[id] = p->bufs[from];
  if (f->locked) p->locked_bytes -= f->bytes;
  p->resident -= f->bytes; /* the bytes stay resident, now counted as `id` */
  p->resident += m->bytes;
  f->locked = 0;
  f->dirty = f->on_host = f->on_disk = f->in_flight = 0;
  f->next_use = INT64_MAX;
  f->handed_over = 1;
  m->last_use = ++p->clock;
  if (!m->locked) p->locked_bytes += m->bytes;
  m->locked++;
  m->dirty = 1;
  m->on_host = m->on_disk = 0;
  return DLRT_OK;
}

void dlrt__mpool_handed_over(dlrt__mpool *p, int from) {
  p->bufs[from] = NULL;
  p->s[from].handed_over = 0;
}

void dlrt__mpool_discard(dlrt__mpool *p, int id) {
  dlrt__mstore *m = &p->s[id];
  if (m->drain) release_drain(p, id); /* a wait queued on the compute stream cannot fail */
  if (p->bufs[id]) {
    dlrt_buffer_free(p->bufs[id]);
    p->bufs[id] = NULL;
    p->resident -= m->bytes;
  }
  if (m->locked) p->locked_bytes -= m->bytes;
  m->locked = 0;
  m->dirty = m->on_host = m->on_disk = m->in_flight = 0;
  m->next_use = INT64_MAX;
  /* The pinned copy and the disk slot stay for the storage's next life
   * (the same size, next step): no allocation churn. */
}

int dlrt__mpool_adopt_buffer(dlrt__mpool *p, int id) {
  dlrt__mstore *m = &p->s[id];
  m->dirty = 1;
  p->resident += m->bytes;
  if (p->resident > p->st.peak_resident) p->st.peak_resident = p->resident;
  return DLRT_OK;
}

int dlrt__mpool_prefetch(dlrt__mpool *p, int id) {
  dlrt__mstore *m = &p->s[id];
  if (!m->declared || p->bufs[id] || !m->on_host || m->window) return DLRT_OK; /* disk: on use */
  if (m->drain) return reclaim_drain(p, id, 0);
  int fits, rc = make_room(p, m->bytes, m->next_use, &fits);
  if (rc < 0 || !fits) return rc;
  /* The buffer belongs to the compute stream (whose order the allocator
   * keeps), and the copy stream first waits for everything the compute
   * stream queued: the kernels that last used the memory and the
   * write-back that made the host copy. */
  int placed;
  if ((rc = place(p, id, p->compute, m->next_use, &placed)) < 0 || !placed) return rc;
  if ((rc = dlrt_event_record(p->mark, p->compute)) < 0 ||
      (rc = dlrt_stream_wait_event(p->copy, p->mark)) < 0 ||
      (m->writing && (rc = dlrt_stream_wait_event(p->copy, m->written)) < 0))
    return rc;
  if (!m->fetched && (rc = dlrt_event_create(p->dev, &m->fetched)) < 0) return rc;
  double t0 = dlrt__mpool_trace_begin(p->copy);
  if ((rc = dlrt_copy_h2d(p->bufs[id], 0, m->host, m->size, p->copy)) < 0 ||
      (rc = dlrt_event_record(m->fetched, p->copy)) < 0 ||
      (rc = dlrt_buffer_record_stream(p->bufs[id], p->copy)) < 0)
    return rc;
  dlrt__mpool_trace_end(p->copy, t0, "prefetch", m->size, DLRT_TRACE_COPY);
  m->in_flight = 1;
  p->st.fetched_bytes += m->size;
  return DLRT_OK;
}

int dlrt__mpool_offload(dlrt__mpool *p, int id) {
  dlrt__mstore *m = &p->s[id];
  if (!m->declared || !p->bufs[id] || m->locked) return DLRT_OK;
  int rc = evict(p, id);
  if (rc == DLRT_OK) p->st.offloads++;
  /* Over the budget (buffers the pool adopted), drains are not held. */
  for (int d; rc == DLRT_OK && p->resident > p->budget && (d = oldest_drain(p)) >= 0;)
    rc = release_drain(p, d);
  return rc;
}

int dlrt__mpool_host_view(dlrt__mpool *p, int id, int write, void **host) {
  dlrt__mstore *m = &p->s[id];
  int rc = DLRT_OK;
  if (p->broken) return dlrt__mpool_broken(p);
  /* A prefetch may still be reading the host copy the caller will touch, a
   * write-back still writing it. */
  if (m->in_flight && (rc = dlrt_event_synchronize(m->fetched)) < 0) return rc;
  if ((rc = host_copy_done(m)) < 0) return rc;
  if (m->drain && (rc = release_drain(p, id)) < 0) return rc; /* the host copy serves */
  if (!m->host) {
    /* Past the host budget the view is temporary: dlrt__mpool_host_view_end
     * writes it to disk and frees it, so the budget holds. */
    m->temp_host = p->host_budget && p->host_used + m->bytes > p->host_budget;
    if ((rc = dlrt__host_alloc_staging(p->dev, m->bytes, &m->host)) < 0) return rc;
    if (!m->temp_host) p->host_used += m->bytes;
    if (p->host_used > p->st.peak_host) p->st.peak_host = p->host_used;
    if (!m->on_disk && !p->bufs[id]) memset(m->host, 0, m->size); /* never written */
  }
  if (p->bufs[id] && (m->dirty || !m->on_host)) {
    /* The device holds the current data: copy it back. */
    if ((rc = dlrt__mpool_timed_begin(p)) < 0 ||
        (rc = dlrt_copy_d2h(m->host, p->bufs[id], 0, m->size, p->compute)) < 0 ||
        (rc = dlrt__mpool_timed_end(p)) < 0)
      return rc;
    p->st.spilled_bytes += m->size;
    if (m->temp_host) m->view_spilled += m->size;
    m->dirty = 0;
    m->on_host = 1;
  } else if (!m->on_host && m->on_disk) {
    if ((rc = dlrt_stream_synchronize(p->compute)) < 0 || (rc = dlrt__mpool_disk_read(p, id, m->host)) < 0)
      return rc;
    m->on_host = 1;
  }
  if (write) {
    /* The host copy becomes the only current one. */
    if (p->bufs[id] && !m->locked) {
      dlrt_buffer_free(p->bufs[id]);
      p->bufs[id] = NULL;
      p->resident -= m->bytes;
      m->in_flight = 0;
    }
    m->on_disk = 0;
    m->dirty = 0;
    m->on_host = 1;
  }
  *host = m->host;
  return DLRT_OK;
}

/* ---------------------------------------------------------------- slices */

int dlrt__mpool_slices_begin(dlrt__mpool *p, int id, int write, size_t window,
                             dlrt_buffer_t **buf) {
  dlrt__mstore *m = &p->s[id];
  if (m->locked || m->window || m->handed_over)
    return dlrt__set_error(DLRT_ERR_STATE, "spill pool: storage %d is in use, it cannot be "
                           "used in slices", id);
  void *host;
  int rc = dlrt__mpool_host_view(p, id, write, &host);
  if (rc < 0) return rc;
  if (p->bufs[id]) {
    /* Clean now (the view copied it back): the host copy serves the slices. */
    dlrt_buffer_free(p->bufs[id]);
    p->bufs[id] = NULL;
    p->resident -= m->bytes;
    m->in_flight = 0;
  }
  size_t bytes = granules(window ? window : 4);
  int fits;
  if ((rc = make_room(p, bytes, -1, &fits)) < 0) return rc;
  if (!fits) {
    uint64_t want = p->locked_bytes + bytes;
    if (want > p->st.min_budget) p->st.min_budget = want;
    return dlrt__set_error(DLRT_ERR_OOM, "out of device budget: a slice of %.1f MiB does not "
                           "fit the spill budget of %.1f MiB beside the %.1f MiB in use; the "
                           "smallest budget that fits is %.1f MiB: raise the limit",
                           (double)bytes / 1048576.0, (double)p->budget / 1048576.0,
                           (double)p->locked_bytes / 1048576.0,
                           (double)p->st.min_budget / 1048576.0);
  }
  if ((rc = alloc_exact(p, window ? window : 4, p->compute, -1, &m->window)) < 0) {
    m->window = NULL;
    return rc;
  }
  m->window_bytes = bytes;
  p->resident += bytes;
  p->locked_bytes += bytes;
  if (p->resident > p->st.peak_resident) p->st.peak_resident = p->resident;
  if (p->locked_bytes > p->st.min_budget) p->st.min_budget = p->locked_bytes;
  *buf = m->window;
  return p->check ? recount(p) : DLRT_OK;
}

int dlrt__mpool_slice(dlrt__mpool *p, int id, int out, size_t at, size_t pitch, size_t width,
                      size_t rows) {
  dlrt__mstore *m = &p->s[id];
  char *host = (char *)m->host + at;
  double t0 = dlrt__mpool_trace_begin(p->compute);
  int rc = dlrt__mpool_timed_begin(p);
  if (rc == DLRT_OK)
    rc = out ? dlrt_copy_d2h_rows(host, pitch, m->window, 0, width, rows, p->compute)
             : dlrt_copy_h2d_rows(m->window, 0, host, pitch, width, rows, p->compute);
  if (rc == DLRT_OK) rc = dlrt__mpool_timed_end(p);
  if (out) m->on_disk = 0; /* stale now */
  if (rc < 0) return rc;
  dlrt__mpool_trace_end(p->compute, t0, out ? "slice out" : "slice in", width * rows, DLRT_TRACE_COMPUTE);
  *(out ? &p->st.spilled_bytes : &p->st.fetched_bytes) += width * rows;
  if (out && m->temp_host) m->view_spilled += width * rows;
  return DLRT_OK;
}

int dlrt__mpool_slice_async(dlrt__mpool *p, int id, int out, size_t at, size_t pitch,
                            size_t width, size_t rows) {
  dlrt__mstore *m = &p->s[id];
  dlrt_stream_t *st = out ? p->wb : p->copy;
  char *host = (char *)m->host + at;
  int rc = DLRT_OK;
  if (!m->slice_from) rc = dlrt_event_create(p->dev, &m->slice_from);
  if (rc == DLRT_OK && !m->slice_done) rc = dlrt_event_create(p->dev, &m->slice_done);
  /* A copy still pending on the window (the other direction's) goes first. */
  if (rc == DLRT_OK) rc = dlrt__mpool_slice_wait(p, id);
  if (rc == DLRT_OK) rc = dlrt_event_record(m->slice_from, p->compute);
  if (rc == DLRT_OK) rc = dlrt_stream_wait_event(st, m->slice_from);
  double t0 = dlrt__mpool_trace_begin(st);
  if (rc == DLRT_OK)
    rc = out ? dlrt_copy_d2h_rows(host, pitch, m->window, 0, width, rows, st)
             : dlrt_copy_h2d_rows(m->window, 0, host, pitch, width, rows, st);
  if (rc == DLRT_OK) rc = dlrt_event_record(m->slice_done, st);
  if (out) m->on_disk = 0; /* stale now */
  if (rc < 0) return rc;
  m->slice_pending = 1;
  dlrt__mpool_trace_end(st, t0, out ? "slice out" : "slice in", width * rows, DLRT_TRACE_COPY);
  *(out ? &p->st.spilled_bytes : &p->st.fetched_bytes) += width * rows;
  if (out && m->temp_host) m->view_spilled += width * rows;
  return DLRT_OK;
}

int dlrt__mpool_slice_wait(dlrt__mpool *p, int id) {
  dlrt__mstore *m = &p->s[id];
  if (!m->slice_pending) return DLRT_OK;
  m->slice_pending = 0;
  return dlrt_stream_wait_event(p->compute, m->slice_done);
}

int dlrt__mpool_slices_end(dlrt__mpool *p, int id, int written) {
  dlrt__mstore *m = &p->s[id];
  if (!m->window) return DLRT_OK;
  /* The compute stream frees the window: after its last copy. */
  int rc = dlrt__mpool_slice_wait(p, id);
  dlrt_buffer_free(m->window); /* stream-ordered: after the copies queued */
  m->window = NULL;
  p->resident -= m->window_bytes;
  p->locked_bytes -= m->window_bytes;
  m->window_bytes = 0;
  m->on_host = 1;
  m->dirty = 0;
  if (rc < 0 || !m->temp_host) return rc;
  /* Past the host budget: to disk once the copies are done, unless the
   * disk holds it already (the device copy that came back is gone). */
  rc = dlrt_stream_synchronize(p->compute);
  return rc < 0 ? rc : dlrt__mpool_host_view_end(p, id, written || !m->on_disk);
}

void dlrt__mpool_set_budget(dlrt__mpool *p, uint64_t device_budget) { p->budget = device_budget; }

void dlrt__mpool_reset_stats(dlrt__mpool *p) {
  dlrt__mpool_collect_timed(p);
  dlrt__mpool_retire(p); /* what it did so far still counts for the device */
  memset(&p->st, 0, sizeof p->st);
  p->st.peak_resident = p->resident;
  p->st.peak_host = p->host_used;
}

int dlrt__mpool_host_view_end(dlrt__mpool *p, int id, int write) {
  dlrt__mstore *m = &p->s[id];
  if (!m->temp_host) return DLRT_OK;
  int rc = write ? dlrt__mpool_disk_write(p, id, m->host) : DLRT_OK;
  /* What came off the device into the view went on to the disk with it;
   * unwritten, it was only read there (the device copy stays current). */
  if (write && rc == DLRT_OK) p->st.spilled_to_disk_bytes += m->view_spilled;
  m->view_spilled = 0;
  dlrt_host_free(m->host);
  m->host = NULL;
  m->on_host = 0;
  m->temp_host = 0;
  return rc;
}

int dlrt__mpool_stats(dlrt__mpool *p, dlrt_spill_stats *out) {
  dlrt__mpool_collect_timed(p);
  *out = p->st;
  return DLRT_OK;
}
