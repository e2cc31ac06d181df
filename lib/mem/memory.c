/* memory.c — the public memory API: device buffers through the caching
 * allocator, the pinned host pool, budgets and statistics. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/registry.h"
#include "mem/buffer.h"
#include "mem/process_registry.h"
#include "util/ptrmap.h"
#include "util/status.h"

static void host_registry_forget(dlrt_device_t *dev);

/* ---------------------------------------------------------------- per device */

/* Pinned memory cannot be paged out: a pool that grew to fill RAM would
 * leave the OOM killer to end the run. Each device's pinned pool is bounded
 * by DLRT_PINNED_LIMIT (a size as for DLRT_MEM_LIMIT; a percentage is of
 * RAM), by default half of RAM; past it staging goes to pageable memory
 * (dlrt__host_alloc_staging). */
static int pinned_limit_of(uint64_t host_memory, uint64_t *out) {
  const char *text = getenv("DLRT_PINNED_LIMIT");
  *out = host_memory / 2;
  if (!text || !*text) return DLRT_OK;
  if (dlrt_parse_size(text, host_memory, out) < 0 || *out == 0)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "DLRT_PINNED_LIMIT=\"%s\" is not a size: use "
                           "bytes with an optional K, M, G or T suffix (256M) or a percentage "
                           "of RAM (25%%), above 0", text);
  return DLRT_OK;
}

static int mem_create(dlrt_device_t *dev, void **state) {
  dlrt__mem_device *md = calloc(1, sizeof *md);
  if (!md) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  dlrt_device_props props;
  if (dlrt_device_props_get(dev, &props) < 0) {
    memset(&props, 0, sizeof props);
    snprintf(props.spec, sizeof props.spec, "%s", dev->spec);
    snprintf(props.backend, sizeof props.backend, "%s", dev->be->name);
  }
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  uint64_t host_memory = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
  uint64_t pinned_limit;
  int rc = pinned_limit_of(host_memory, &pinned_limit);
  md->dev = dev;
  if (rc < 0 || (rc = dlrt__allocator_create(dev, 0, props.total_memory, &md->alloc)) < 0 ||
      (rc = dlrt__allocator_create(dev, 1, host_memory, &md->host_pool)) < 0 ||
      (rc = dlrt__allocator_set_limit(md->host_pool, pinned_limit)) < 0 ||
      (rc = dlrt__procreg_add(md->alloc, &props)) < 0) {
    dlrt__allocator_destroy(md->alloc);
    dlrt__allocator_destroy(md->host_pool);
    free(md);
    return rc;
  }
  if (dev->initial_limit) dlrt__allocator_set_limit(md->alloc, dev->initial_limit);
  *state = md;
  return DLRT_OK;
}

static void mem_close(void *state) {
  dlrt__mem_device *md = state;
  host_registry_forget(md->dev);
  dlrt__procreg_remove(md->alloc);
  dlrt__allocator_destroy(md->alloc);
  dlrt__allocator_destroy(md->host_pool);
  free(md);
}

static void mem_stream_destroyed(void *state, dlrt_stream_t *stream) {
  dlrt__allocator_forget_stream(((dlrt__mem_device *)state)->alloc, stream);
}

static uint64_t mem_reserved(void *state) {
  return dlrt__allocator_reserved(((dlrt__mem_device *)state)->alloc);
}

static int mem_scratch(void *state, size_t bytes, dlrt_stream_t *stream, dlrt_buffer_t **out) {
  return dlrt_buffer_alloc(((dlrt__mem_device *)state)->dev, bytes, stream, out);
}

static void mem_scratch_free(void *state, dlrt_buffer_t *buf) {
  (void)state;
  dlrt_buffer_free(buf);
}

static int mem_pinned(void *state, size_t bytes, void **out) {
  return dlrt_host_alloc(((dlrt__mem_device *)state)->dev, bytes, out);
}

static void mem_pinned_free(void *state, void *ptr) {
  (void)state;
  dlrt_host_free(ptr);
}

static const dlrt__device_hooks mem_hooks = {
    .create = mem_create,
    .close = mem_close,
    .stream_destroyed = mem_stream_destroyed,
    .reserved = mem_reserved,
    .scratch_alloc = mem_scratch,
    .scratch_free = mem_scratch_free,
    .pinned_alloc = mem_pinned,
    .pinned_free = mem_pinned_free,
};

int dlrt__mem_device_get(dlrt_device_t *dev, dlrt__mem_device **out) {
  void *state = NULL;
  int rc = dlrt__device_attached(dev, &mem_hooks, &state);
  *out = state;
  return rc;
}

/* ---------------------------------------------------------------- buffers */

_Static_assert(offsetof(struct dlrt_buffer, span) == 0,
               "lib/device reads a buffer as the span it begins with");

int dlrt_buffer_alloc(dlrt_device_t *dev, size_t bytes, dlrt_stream_t *stream,
                      dlrt_buffer_t **out) {
  return dlrt__buffer_alloc_ex(dev, bytes, stream, 0, out);
}

int dlrt__buffer_alloc_ex(dlrt_device_t *dev, size_t bytes, dlrt_stream_t *stream, int exact,
                          dlrt_buffer_t **out) {
  DLRT__CHECK_ARG(dev && out, "device or out is NULL");
  DLRT__CHECK_ARG(bytes > 0, "%s: cannot allocate 0 bytes", dev->spec);
  dlrt__mem_device *md = NULL;
  int rc = dlrt__mem_device_get(dev, &md);
  if (rc < 0) return rc;
  if (!stream) stream = dev->default_stream;
  if (stream->dev != dev)
    return dlrt__set_error(DLRT_ERR_WRONG_DEVICE, "buffer on %s allocated for a stream of "
                           "%s", dev->spec, stream->dev->spec);
  dlrt_buffer_t *buf = calloc(1, sizeof *buf);
  if (!buf) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  rc = dlrt__allocator_alloc_ex(md->alloc, bytes, stream, exact, &buf->block, &buf->span.mem,
                                &buf->span.offset);
  if (rc < 0) {
    free(buf);
    return rc;
  }
  buf->span.dev = dev;
  buf->span.size = bytes;
  buf->alloc = md->alloc;
  buf->refs = 1;
  *out = buf;
  return DLRT_OK;
}

/* The last reference returns the block to the cache; a wrapped buffer's
 * memory is its owner's, and only the handle goes. */
void dlrt_buffer_free(dlrt_buffer_t *buf) {
  if (!buf || __atomic_sub_fetch(&buf->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
  if (buf->alloc) dlrt__allocator_free(buf->alloc, buf->block);
  free(buf);
}

int dlrt_buffer_retain(dlrt_buffer_t *buf) {
  DLRT__CHECK_ARG(buf, "buffer is NULL");
  __atomic_add_fetch(&buf->refs, 1, __ATOMIC_ACQ_REL);
  return DLRT_OK;
}

int dlrt_buffer_record_stream(dlrt_buffer_t *buf, dlrt_stream_t *stream) {
  DLRT__CHECK_ARG(buf && stream, "buffer or stream is NULL");
  if (stream->dev != buf->span.dev)
    return dlrt__set_error(DLRT_ERR_WRONG_DEVICE, "buffer of %s used on a stream of %s",
                           buf->span.dev->spec, stream->dev->spec);
  /* Caller-owned memory: its owner orders its reuse, not the allocator. */
  if (!buf->alloc) return DLRT_OK;
  return dlrt__allocator_record_stream(buf->alloc, buf->block, stream);
}

size_t dlrt_buffer_size(const dlrt_buffer_t *buf) { return buf ? buf->span.size : 0; }

dlrt_device_t *dlrt_buffer_device(const dlrt_buffer_t *buf) { return buf ? buf->span.dev : NULL; }

void *dlrt_buffer_host_ptr(const dlrt_buffer_t *buf) {
  return buf && buf->span.mem.host ? (char *)buf->span.mem.host + buf->span.offset : NULL;
}

/* ---------------------------------------------------------------- budgets */

static int open_device(dlrt_device_t *dev, dlrt__mem_device **md) {
  DLRT__CHECK_ARG(dev, "device is NULL");
  return dlrt__mem_device_get(dev, md);
}

int dlrt_mem_set_limit(dlrt_device_t *dev, uint64_t bytes) {
  dlrt__mem_device *md = NULL;
  int rc = open_device(dev, &md);
  return rc < 0 ? rc : dlrt__allocator_set_limit(md->alloc, bytes);
}

uint64_t dlrt_mem_get_limit(dlrt_device_t *dev) {
  dlrt__mem_device *md = NULL;
  if (open_device(dev, &md) < 0) return 0;
  uint64_t limit = dlrt__allocator_limit(md->alloc);
  return limit == UINT64_MAX ? 0 : limit;
}

int dlrt_mem_empty_cache(dlrt_device_t *dev) {
  dlrt__mem_device *md = NULL;
  int rc = open_device(dev, &md);
  return rc < 0 ? rc : dlrt__allocator_empty_cache(md->alloc);
}

/* The statistics of the device's memory (host = 0) or its pinned pool. */
static int stats_get(dlrt_device_t *dev, int host, dlrt_mem_stats *out) {
  dlrt__mem_device *md = NULL;
  int rc = open_device(dev, &md);
  if (rc < 0) return rc;
  DLRT__CHECK_ARG(out, "out is NULL");
  dlrt__allocator_stats(host ? md->host_pool : md->alloc, out);
  return DLRT_OK;
}

int dlrt_mem_stats_get(dlrt_device_t *dev, dlrt_mem_stats *out) { return stats_get(dev, 0, out); }

int dlrt_host_stats_get(dlrt_device_t *dev, dlrt_mem_stats *out) { return stats_get(dev, 1, out); }

int dlrt_mem_reset_peak(dlrt_device_t *dev) {
  dlrt__mem_device *md = NULL;
  int rc = open_device(dev, &md);
  if (rc < 0) return rc;
  dlrt__allocator_reset_peak(md->alloc);
  dlrt__allocator_reset_peak(md->host_pool);
  return DLRT_OK;
}

/* ---------------------------------------------------------------- pinned host */

/* Pointer returned by dlrt_host_alloc -> its block, so dlrt_host_free needs
 * only the pointer (as cudaFreeHost does). */
typedef struct {
  dlrt_device_t *dev;
  dlrt__allocator *pool; /* NULL: pageable memory of dlrt__host_alloc_staging */
  dlrt__block *block;
  size_t bytes;          /* pageable: what it holds */
} host_allocation;

static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;
static dlrt__ptrmap host_allocations;
/* Staging past the pinned limit, per device (under host_lock). */
#define PAGEABLE_DEVICES 16
static struct {
  dlrt_device_t *dev;
  dlrt_pageable_stats st;
} pageable[PAGEABLE_DEVICES];
static int pageable_noted;

static dlrt_pageable_stats *pageable_of(dlrt_device_t *dev) {
  for (int i = 0; i < PAGEABLE_DEVICES; i++)
    if (pageable[i].dev == dev || !pageable[i].dev) {
      pageable[i].dev = dev;
      return &pageable[i].st;
    }
  return NULL;
}

int dlrt_host_alloc(dlrt_device_t *dev, size_t bytes, void **out) {
  DLRT__CHECK_ARG(dev && out, "device or out is NULL");
  DLRT__CHECK_ARG(bytes > 0, "%s: cannot allocate 0 bytes of pinned memory", dev->spec);
  dlrt__mem_device *md = NULL;
  int rc = dlrt__mem_device_get(dev, &md);
  if (rc < 0) return rc;
  host_allocation *h = malloc(sizeof *h);
  if (!h) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  dlrt_mem mem;
  size_t offset;
  rc = dlrt__allocator_alloc(md->host_pool, bytes, NULL, &h->block, &mem, &offset);
  if (rc < 0) {
    free(h);
    return rc;
  }
  h->dev = dev;
  h->pool = md->host_pool;
  h->bytes = bytes;
  void *ptr = (char *)mem.host + offset;
  pthread_mutex_lock(&host_lock);
  rc = dlrt__ptrmap_put(&host_allocations, ptr, h);
  pthread_mutex_unlock(&host_lock);
  if (rc < 0) {
    dlrt__allocator_free(md->host_pool, h->block);
    free(h);
    return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  }
  *out = ptr;
  return DLRT_OK;
}

int dlrt_host_free(void *ptr) {
  if (!ptr) return DLRT_OK;
  pthread_mutex_lock(&host_lock);
  host_allocation *h = dlrt__ptrmap_remove(&host_allocations, ptr);
  pthread_mutex_unlock(&host_lock);
  if (!h)
    return dlrt__set_error(DLRT_ERR_NOT_FOUND, "dlrt_host_free(%p): not a pointer from "
                           "dlrt_host_alloc (or already freed)", ptr);
  if (h->pool) {
    dlrt__allocator_free(h->pool, h->block);
  } else {
    pthread_mutex_lock(&host_lock);
    dlrt_pageable_stats *st = pageable_of(h->dev);
    if (st) st->current -= h->bytes;
    pthread_mutex_unlock(&host_lock);
    free(ptr);
  }
  free(h);
  return DLRT_OK;
}

int dlrt__host_alloc_staging(dlrt_device_t *dev, size_t bytes, void **out) {
  int rc = dlrt_host_alloc(dev, bytes, out);
  if (rc != DLRT_ERR_OOM) return rc;
  /* The pinned pool is at its limit (or the driver refused): pageable
   * memory serves, the copies only slower. */
  dlrt__mem_device *md = NULL;
  if ((rc = dlrt__mem_device_get(dev, &md)) < 0) return rc;
  uint64_t limit = dlrt__allocator_limit(md->host_pool);
  dlrt_clear_error();
  host_allocation *h = malloc(sizeof *h);
  void *ptr = NULL;
  if (!h || posix_memalign(&ptr, 4096, bytes ? bytes : 1) != 0) {
    free(h);
    return dlrt__set_error(DLRT_ERR_OOM, "out of host memory: %zu bytes of pageable memory, "
                           "past the pinned pool's limit", bytes);
  }
  h->dev = dev, h->pool = NULL, h->block = NULL, h->bytes = bytes;
  pthread_mutex_lock(&host_lock);
  rc = dlrt__ptrmap_put(&host_allocations, ptr, h);
  dlrt_pageable_stats *st = rc == DLRT_OK ? pageable_of(dev) : NULL;
  if (st) {
    st->current += bytes;
    if (st->current > st->peak) st->peak = st->current;
    st->count++;
  }
  int note = rc == DLRT_OK && !pageable_noted;
  if (note) pageable_noted = 1;
  pthread_mutex_unlock(&host_lock);
  if (rc < 0) {
    free(ptr), free(h);
    return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  }
  if (note)
    fprintf(stderr, "dlrt: note: %s: the pinned host pool is at its limit of %.1f MiB "
            "(DLRT_PINNED_LIMIT: a size, or a percentage of RAM; default half of RAM); "
            "staging goes on in pageable memory, with slower copies (shown once)\n",
            dev->spec, (double)limit / 1048576.0);
  *out = ptr;
  return DLRT_OK;
}

int dlrt_pageable_stats_get(dlrt_device_t *dev, dlrt_pageable_stats *out) {
  DLRT__CHECK_ARG(dev && out, "device or out is NULL");
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&host_lock);
  for (int i = 0; i < PAGEABLE_DEVICES; i++)
    if (pageable[i].dev == dev) *out = pageable[i].st;
  pthread_mutex_unlock(&host_lock);
  return DLRT_OK;
}

/* A device's pool goes when it closes: forget the pointers it still has
 * (leaked by the caller), so a later dlrt_host_free of one is refused. */
static void host_registry_forget(dlrt_device_t *dev) {
  pthread_mutex_lock(&host_lock);
  for (size_t i = 0; i < host_allocations.capacity; i++) {
    void *k = host_allocations.keys[i];
    host_allocation *h = host_allocations.values[i];
    if (k && h && h->dev == dev) {
      dlrt__ptrmap_remove(&host_allocations, k);
      if (!h->pool) free(k); /* pageable: the pool's segments go with the pool */
      free(h);
    }
  }
  if (host_allocations.live == 0) dlrt__ptrmap_clear(&host_allocations);
  pthread_mutex_unlock(&host_lock);
}
