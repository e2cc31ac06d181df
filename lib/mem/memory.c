/* memory.c — the public memory API: device buffers through the caching
 * allocator, the pinned host pool, budgets and statistics. */
#include "config.h"

#include <stdlib.h>

#include "device/registry.h"
#include "util/ptrmap.h"
#include "util/status.h"

/* ---------------------------------------------------------------- buffers */

int dlrt_buffer_alloc(dlrt_device_t *dev, size_t bytes, dlrt_stream_t *stream,
                      dlrt_buffer_t **out) {
  return dlrt__buffer_alloc_ex(dev, bytes, stream, 0, out);
}

int dlrt__buffer_alloc_ex(dlrt_device_t *dev, size_t bytes, dlrt_stream_t *stream, int exact,
                          dlrt_buffer_t **out) {
  DLRT__CHECK_ARG(dev && out, "device or out is NULL");
  DLRT__CHECK_ARG(bytes > 0, "%s: cannot allocate 0 bytes", dev->spec);
  int rc = dlrt__device_ensure_open(dev);
  if (rc < 0) return rc;
  if (!stream) stream = dev->default_stream;
  if (stream->dev != dev)
    return dlrt__set_error(DLRT_ERR_WRONG_DEVICE, "buffer on %s allocated for a stream of "
                           "%s", dev->spec, stream->dev->spec);
  dlrt_buffer_t *buf = calloc(1, sizeof *buf);
  if (!buf) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  rc = dlrt__allocator_alloc_ex(dev->alloc, bytes, stream, exact, &buf->block, &buf->mem,
                                &buf->offset);
  if (rc < 0) {
    free(buf);
    return rc;
  }
  buf->dev = dev;
  buf->size = bytes;
  *out = buf;
  return DLRT_OK;
}

void dlrt_buffer_free(dlrt_buffer_t *buf) {
  if (!buf) return;
  dlrt__allocator_free(buf->dev->alloc, buf->block);
  free(buf);
}

int dlrt_buffer_record_stream(dlrt_buffer_t *buf, dlrt_stream_t *stream) {
  DLRT__CHECK_ARG(buf && stream, "buffer or stream is NULL");
  if (stream->dev != buf->dev)
    return dlrt__set_error(DLRT_ERR_WRONG_DEVICE, "buffer of %s used on a stream of %s",
                           buf->dev->spec, stream->dev->spec);
  return dlrt__allocator_record_stream(buf->dev->alloc, buf->block, stream);
}

size_t dlrt_buffer_size(const dlrt_buffer_t *buf) { return buf ? buf->size : 0; }

dlrt_device_t *dlrt_buffer_device(const dlrt_buffer_t *buf) { return buf ? buf->dev : NULL; }

void *dlrt_buffer_host_ptr(const dlrt_buffer_t *buf) {
  return buf && buf->mem.host ? (char *)buf->mem.host + buf->offset : NULL;
}

/* ---------------------------------------------------------------- budgets */

static int open_device(dlrt_device_t *dev) {
  DLRT__CHECK_ARG(dev, "device is NULL");
  return dlrt__device_ensure_open(dev);
}

int dlrt_mem_set_limit(dlrt_device_t *dev, uint64_t bytes) {
  int rc = open_device(dev);
  return rc < 0 ? rc : dlrt__allocator_set_limit(dev->alloc, bytes);
}

uint64_t dlrt_mem_get_limit(dlrt_device_t *dev) {
  if (open_device(dev) < 0) return 0;
  uint64_t limit = dlrt__allocator_limit(dev->alloc);
  return limit == UINT64_MAX ? 0 : limit;
}

int dlrt_mem_empty_cache(dlrt_device_t *dev) {
  int rc = open_device(dev);
  return rc < 0 ? rc : dlrt__allocator_empty_cache(dev->alloc);
}

int dlrt_mem_stats_get(dlrt_device_t *dev, dlrt_mem_stats *out) {
  int rc = open_device(dev);
  if (rc < 0) return rc;
  DLRT__CHECK_ARG(out, "out is NULL");
  dlrt__allocator_stats(dev->alloc, out);
  return DLRT_OK;
}

int dlrt_host_stats_get(dlrt_device_t *dev, dlrt_mem_stats *out) {
  int rc = open_device(dev);
  if (rc < 0) return rc;
  DLRT__CHECK_ARG(out, "out is NULL");
  dlrt__allocator_stats(dev->host_pool, out);
  return DLRT_OK;
}

int dlrt_mem_reset_peak(dlrt_device_t *dev) {
  int rc = open_device(dev);
  if (rc < 0) return rc;
  dlrt__allocator_reset_peak(dev->alloc);
  dlrt__allocator_reset_peak(dev->host_pool);
  return DLRT_OK;
}

/* ---------------------------------------------------------------- pinned host */

/* Pointer returned by dlrt_host_alloc -> its block, so dlrt_host_free needs
 * only the pointer (as cudaFreeHost does). */
typedef struct {
  dlrt_device_t *dev;
  dlrt__block *block;
} host_allocation;

static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;
static dlrt__ptrmap host_allocations;

int dlrt_host_alloc(dlrt_device_t *dev, size_t bytes, void **out) {
  DLRT__CHECK_ARG(dev && out, "device or out is NULL");
  DLRT__CHECK_ARG(bytes > 0, "%s: cannot allocate 0 bytes of pinned memory", dev->spec);
  int rc = dlrt__device_ensure_open(dev);
  if (rc < 0) return rc;
  host_allocation *h = malloc(sizeof *h);
  if (!h) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  dlrt_mem mem;
  size_t offset;
  rc = dlrt__allocator_alloc(dev->host_pool, bytes, NULL, &h->block, &mem, &offset);
  if (rc < 0) {
    free(h);
    return rc;
  }
  h->dev = dev;
  void *ptr = (char *)mem.host + offset;
  pthread_mutex_lock(&host_lock);
  rc = dlrt__ptrmap_put(&host_allocations, ptr, h);
  pthread_mutex_unlock(&host_lock);
  if (rc < 0) {
    dlrt__allocator_free(dev->host_pool, h->block);
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
  dlrt__allocator_free(h->dev->host_pool, h->block);
  free(h);
  return DLRT_OK;
}

/* At shutdown the pools go with their devices; forget leaked pointers. */
void dlrt__host_registry_clear(void) {
  pthread_mutex_lock(&host_lock);
  for (size_t i = 0; i < host_allocations.capacity; i++) {
    void *k = host_allocations.keys[i];
    if (k && host_allocations.values[i]) free(host_allocations.values[i]);
  }
  dlrt__ptrmap_clear(&host_allocations);
  pthread_mutex_unlock(&host_lock);
}
