/* managed_io.c — the spill pools' copies that are not residency: the
 * figures of every pool per device, timed and traced copies, and the disk
 * tier past the host budget (managed_pool.h). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mem/buffer.h"
#include "mem/disk.h"
#include "mem/managed_pool.h"
#include "util/replace.h"
#include "util/status.h"
#include "util/trace.h"

/* ---------------------------------------------------------------- totals */

/* Every pool's figures, per device, for dlrt_mem_summary: live pools are
 * asked, destroyed ones left their totals behind. */
#define TOTALS_MAX 16
static pthread_mutex_t totals_lock = PTHREAD_MUTEX_INITIALIZER;
static struct { dlrt_device_t *dev; dlrt_spill_stats st; } retired[TOTALS_MAX];
static dlrt__mpool *live[64];

static void add_stats(dlrt_spill_stats *a, const dlrt_spill_stats *b) {
  a->spilled_bytes += b->spilled_bytes, a->fetched_bytes += b->fetched_bytes;
  a->disk_written_bytes += b->disk_written_bytes, a->disk_read_bytes += b->disk_read_bytes;
  a->spilled_to_disk_bytes += b->spilled_to_disk_bytes;
  a->evictions += b->evictions, a->dropped_clean += b->dropped_clean;
  a->offloads += b->offloads, a->prefetch_hits += b->prefetch_hits;
  a->prefetch_misses += b->prefetch_misses, a->transfer_ms += b->transfer_ms;
  if (b->peak_resident > a->peak_resident) a->peak_resident = b->peak_resident;
  if (b->peak_host > a->peak_host) a->peak_host = b->peak_host;
  if (b->min_budget > a->min_budget) a->min_budget = b->min_budget;
}

void dlrt__mpool_register(dlrt__mpool *p, int add) {
  pthread_mutex_lock(&totals_lock);
  for (int i = 0; i < 64; i++)
    if (add ? !live[i] : live[i] == p) {
      live[i] = add ? p : NULL;
      break;
    }
  pthread_mutex_unlock(&totals_lock);
}

void dlrt__mpool_retire(dlrt__mpool *p) {
  pthread_mutex_lock(&totals_lock);
  for (int i = 0; i < TOTALS_MAX; i++)
    if (!retired[i].dev || retired[i].dev == p->dev) {
      retired[i].dev = p->dev;
      add_stats(&retired[i].st, &p->st);
      break;
    }
  pthread_mutex_unlock(&totals_lock);
}

int dlrt__spill_totals(dlrt_device_t *dev, dlrt_spill_stats *out) {
  memset(out, 0, sizeof *out);
  int any = 0;
  pthread_mutex_lock(&totals_lock);
  for (int i = 0; i < TOTALS_MAX; i++)
    if (retired[i].dev == dev) add_stats(out, &retired[i].st), any = 1;
  for (int i = 0; i < 64; i++)
    if (live[i] && live[i]->dev == dev) add_stats(out, &live[i]->st), any = 1;
  pthread_mutex_unlock(&totals_lock);
  return any;
}

void dlrt__mpool_collect_timed(dlrt__mpool *p) {
  for (int i = 0; i < p->n_timed; i++) {
    float ms = 0;
    if (dlrt_event_synchronize(p->timed[i][1]) == DLRT_OK &&
        dlrt_event_elapsed_ms(p->timed[i][0], p->timed[i][1], &ms) == DLRT_OK)
      p->st.transfer_ms += ms;
  }
  p->n_timed = 0;
}

/* ---------------------------------------------------------------- timing */

/* Tracing: the copy's span, the stream waited for on both sides. */
double dlrt__mpool_trace_begin(dlrt_stream_t *stream) {
  if (!dlrt__trace_on()) return -1;
  dlrt_stream_synchronize(stream);
  return dlrt__trace_now_us();
}

void dlrt__mpool_trace_end(dlrt_stream_t *stream, double t0, const char *what, size_t bytes,
                      int tid) {
  if (t0 < 0) return;
  dlrt_stream_synchronize(stream);
  char name[64];
  snprintf(name, sizeof name, "%s %.1f KiB", what, (double)bytes / 1024.0);
  dlrt__trace_span(name, "copy", tid, t0, dlrt__trace_now_us());
}

/* Brackets a copy on the compute stream with an event pair. */
int dlrt__mpool_timed_begin(dlrt__mpool *p) {
  if (p->n_timed == TIMED_MAX) dlrt__mpool_collect_timed(p);
  dlrt_event_t **e = p->timed[p->n_timed];
  int rc = DLRT_OK;
  if (!e[0]) rc = dlrt_event_create(p->dev, &e[0]);
  if (rc == DLRT_OK && !e[1]) rc = dlrt_event_create(p->dev, &e[1]);
  if (rc == DLRT_OK) rc = dlrt_event_record(e[0], p->compute);
  return rc;
}

int dlrt__mpool_timed_end(dlrt__mpool *p) {
  int rc = dlrt_event_record(p->timed[p->n_timed][1], p->compute);
  if (rc == DLRT_OK) p->n_timed++;
  return rc;
}

/* ---------------------------------------------------------------- disk */

/* The spill file (disk.h): the pool's disk tier and parameter streaming's. */

int dlrt__disk_open(dlrt__disk *d) {
  if (d->fd > 0) return DLRT_OK;
  const char *dir = getenv("DLRT_SPILL_DIR");
  if (!dir || !*dir) dir = getenv("TMPDIR");
  if (!dir || !*dir) dir = "/tmp";
  snprintf(d->dir, sizeof d->dir, "%s", dir);
  /* Unnamed (or unlinked at once): gone when the process ends, cleanly or not. */
  int fd = dlrt__open_unnamed(dir, "dlrt-spill");
  if (fd < 0)
    return dlrt__set_error(DLRT_ERR_IO, "cannot create a spill file in %s: %s; set "
                           "DLRT_SPILL_DIR (dltrain --spill-dir) to a writable folder with "
                           "room", dir, strerror(errno));
  d->fd = fd;
  return DLRT_OK;
}

void dlrt__disk_close(dlrt__disk *d) {
  if (d->fd > 0) close(d->fd);
  d->fd = 0;
}

/* The disk cannot take `bytes` more (errno `err`): the run stops here.
 * Every copy on disk may be stale now, so the file refuses all further
 * use (broken) rather than run on with lost data. */
int dlrt__disk_failed(dlrt__disk *d, int err, size_t bytes, const char *what) {
  int full = err == ENOSPC || err == EDQUOT || err == EFBIG;
  char detail[160];
  snprintf(detail, sizeof detail, "%s", strerror(err));
  d->broken = 1;
  if (full)
    return dlrt__set_error(DLRT_ERR_IO, "the spill directory %s is full: %s %.1f MiB more "
                           "beside the %.1f MiB the spill file holds failed (%s); give the "
                           "spill file a folder with room (dltrain --spill-dir DIR, or "
                           "DLRT_SPILL_DIR), or raise --host-limit (the host budget) so less "
                           "goes to disk", d->dir, what, (double)bytes / 1048576.0,
                           (double)d->end / 1048576.0, detail);
  return dlrt__set_error(DLRT_ERR_IO, "cannot %s %.1f MiB in the spill file in %s: %s; set "
                         "DLRT_SPILL_DIR (dltrain --spill-dir) to a folder that works",
                         what, (double)bytes / 1048576.0, d->dir, detail);
}

/* A slot of `bytes` in the file, its blocks reserved at once (fallocate):
 * a disk that is full, or a quota, fails here, before any data is written,
 * and not half-way through a copy. Filesystems without fallocate rely on
 * the checked writes. */
int dlrt__disk_reserve(dlrt__disk *d, size_t bytes, int64_t *offset) {
  int err = 0;
  if (d->broken) return dlrt__disk_failed(d, EIO, bytes, "reserving");
#if defined(__linux__)
  if (fallocate(d->fd, 0, (off_t)d->end, (off_t)bytes) != 0)
    err = errno == EOPNOTSUPP || errno == ENOSYS ? 0 : errno;
#else
  err = posix_fallocate(d->fd, (off_t)d->end, (off_t)bytes);
  if (err == EINVAL || err == EOPNOTSUPP) err = 0;
#endif
  if (err) return dlrt__disk_failed(d, err, bytes, "reserving");
  *offset = d->end;
  d->end += (int64_t)bytes;
  return DLRT_OK;
}

/* `bytes` from src to the file at `offset`, whole: a short write goes on
 * from where it stopped; one that writes nothing (0 bytes, or an error)
 * fails the file. */
int dlrt__disk_write(dlrt__disk *d, int64_t offset, const void *src, size_t bytes) {
  const char *at_src = src;
  size_t left = bytes;
  off_t at = (off_t)offset;
  while (left > 0) {
    ssize_t w = pwrite(d->fd, at_src, left, at);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return dlrt__disk_failed(d, w < 0 ? errno : ENOSPC, left, "writing");
    at_src += w, left -= (size_t)w, at += w;
  }
  return DLRT_OK;
}

int dlrt__disk_read(dlrt__disk *d, int64_t offset, void *dst, size_t bytes) {
  char *at_dst = dst;
  size_t left = bytes;
  off_t at = (off_t)offset;
  while (left > 0) {
    ssize_t r = pread(d->fd, at_dst, left, at);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      return dlrt__set_error(DLRT_ERR_IO, "cannot read %zu bytes back from the spill file: %s",
                             bytes, r < 0 ? strerror(errno) : "it is shorter than written");
    at_dst += r, left -= (size_t)r, at += r;
  }
  return DLRT_OK;
}

/* The pool's file, as a dlrt__disk for the calls above (its fields are the
 * pool's: managed_pool.h), and back. */
static dlrt__disk pool_disk(const dlrt__mpool *p) {
  dlrt__disk d = {.fd = p->disk_fd >= 0 ? p->disk_fd : 0, .end = p->disk_end,
                  .broken = p->broken};
  snprintf(d.dir, sizeof d.dir, "%s", p->disk_dir);
  return d;
}

static int pool_disk_done(dlrt__mpool *p, const dlrt__disk *d, int rc) {
  p->disk_fd = d->fd > 0 ? d->fd : -1;
  p->disk_end = d->end;
  p->broken = d->broken;
  snprintf(p->disk_dir, sizeof p->disk_dir, "%s", d->dir);
  return rc;
}

static int disk_open(dlrt__mpool *p) {
  if (p->disk_fd >= 0) return DLRT_OK;
  dlrt__disk d = pool_disk(p);
  return pool_disk_done(p, &d, dlrt__disk_open(&d));
}

static int disk_slot(dlrt__mpool *p, dlrt__mstore *m) {
  if (m->disk_offset >= 0) return DLRT_OK;
  dlrt__disk d = pool_disk(p);
  return pool_disk_done(p, &d, dlrt__disk_reserve(&d, m->bytes, &m->disk_offset));
}

static int staging_for(dlrt__mpool *p, size_t bytes) {
  if (p->staging_bytes >= bytes) return DLRT_OK;
  dlrt_host_free(p->staging);
  p->staging = NULL;
  p->staging_bytes = 0;
  int rc = dlrt__host_alloc_staging(p->dev, bytes, &p->staging);
  if (rc == DLRT_OK) p->staging_bytes = bytes;
  return rc;
}

/* Host memory at src becomes the storage's disk copy. */
int dlrt__mpool_disk_write(dlrt__mpool *p, int id, const void *src) {
  dlrt__mstore *m = &p->s[id];
  if (p->broken) return dlrt__mpool_broken(p);
  int rc = disk_open(p);
  if (rc < 0 || (rc = disk_slot(p, m)) < 0) return rc;
  double t_disk = dlrt__trace_now_us();
  /* The slot's old copy is overwritten: until the write is whole, there is
   * no disk copy. */
  m->on_disk = 0;
  dlrt__disk d = pool_disk(p);
  if ((rc = pool_disk_done(p, &d, dlrt__disk_write(&d, m->disk_offset, src, m->size))) < 0)
    return rc;
  p->st.disk_written_bytes += m->size;
  if (dlrt__trace_on()) dlrt__trace_span("to disk", "disk", DLRT_TRACE_HOST, t_disk, dlrt__trace_now_us());
  m->on_disk = 1;
  return DLRT_OK;
}

/* Device -> disk through the staging buffer (waits for the copy). */
int dlrt__mpool_write_to_disk(dlrt__mpool *p, int id) {
  dlrt__mstore *m = &p->s[id];
  int rc = staging_for(p, m->bytes);
  if (rc == DLRT_OK) rc = dlrt__mpool_timed_begin(p);
  if (rc == DLRT_OK) rc = dlrt_copy_d2h(p->staging, p->bufs[id], 0, m->size, p->compute);
  if (rc == DLRT_OK) rc = dlrt__mpool_timed_end(p);
  if (rc == DLRT_OK) rc = dlrt_stream_synchronize(p->compute);
  return rc < 0 ? rc : dlrt__mpool_disk_write(p, id, p->staging);
}

/* The storage's disk copy into host memory at dst. */
int dlrt__mpool_disk_read(dlrt__mpool *p, int id, void *dst) {
  dlrt__mstore *m = &p->s[id];
  if (p->broken) return dlrt__mpool_broken(p);
  double t0 = dlrt__trace_now_us();
  dlrt__disk d = pool_disk(p);
  int rc = dlrt__disk_read(&d, m->disk_offset, dst, m->size);
  if (rc < 0) return rc;
  p->st.disk_read_bytes += m->size;
  if (dlrt__trace_on()) dlrt__trace_span("from disk", "disk", DLRT_TRACE_HOST, t0, dlrt__trace_now_us());
  return DLRT_OK;
}

/* Disk -> device through the staging buffer (waits for the copy). */
int dlrt__mpool_read_from_disk(dlrt__mpool *p, int id) {
  dlrt__mstore *m = &p->s[id];
  int rc = staging_for(p, m->bytes);
  if (rc < 0) return rc;
  /* The staging buffer may still feed an earlier copy. */
  if ((rc = dlrt_stream_synchronize(p->compute)) < 0) return rc;
  if ((rc = dlrt__mpool_disk_read(p, id, p->staging)) < 0) return rc;
  if ((rc = dlrt__mpool_timed_begin(p)) == DLRT_OK &&
      (rc = dlrt_copy_h2d(p->bufs[id], 0, p->staging, m->size, p->compute)) == DLRT_OK)
    rc = dlrt__mpool_timed_end(p);
  return rc;
}

int dlrt__mpool_broken(dlrt__mpool *p) {
  (void)p;
  return dlrt__set_error(DLRT_ERR_STATE, "the spill pool stopped at a failure of its disk tier "
                         "(a spill directory that filled up, or a read or write that failed): "
                         "copies on disk may be stale, so it is not used further; make room "
                         "(dltrain --spill-dir DIR, DLRT_SPILL_DIR, or a larger --host-limit) "
                         "and run again");
}
