/* device.h — the library-side objects behind the public handles (internal). */
#ifndef DLRT_DEVICE_DEVICE_H
#define DLRT_DEVICE_DEVICE_H

#include <pthread.h>

#include "device/backend.h"
#include "mem/caching_allocator.h"

struct dlrt_stream {
  dlrt_device_t *dev;
  void *ctx;                /* backend stream */
  int is_default;
  struct dlrt_stream *next; /* the device's list of live streams */
};

struct dlrt_event {
  dlrt_device_t *dev;
  void *ctx; /* backend event */
  int recorded;
};

struct dlrt_buffer {
  dlrt_device_t *dev;
  dlrt__block *block;
  dlrt_mem mem;  /* the segment the block lives in */
  size_t offset; /* of the block within the segment, bytes */
  size_t size;   /* bytes the caller asked for */
};

/* dlrt_buffer_alloc; `exact`: the allocator splits even a large cached
 * block down to the request (dlrt__allocator_alloc_ex), so the device
 * bytes it holds are the request rounded to 512 (spilling's pool keeps its
 * budget in those). */
int dlrt__buffer_alloc_ex(dlrt_device_t *dev, size_t bytes, dlrt_stream_t *stream, int exact,
                          dlrt_buffer_t **out);

struct dlrt_device {
  const dlrt_backend_iface *be;
  void *be_ctx; /* the backend's context */
  int index;    /* within the backend */
  char spec[32];
  pthread_mutex_t lock; /* guards opening and the stream list */
  int open;             /* set (release) once ctx, streams and allocators exist */
  void *ctx;            /* backend device, NULL until first use */
  dlrt_stream_t *default_stream;
  dlrt_stream_t *streams; /* every live stream, default included */
  dlrt__allocator *alloc;     /* device memory */
  dlrt__allocator *host_pool; /* pinned host memory */
  uint64_t initial_limit;     /* from DLRT_MEM_LIMIT, applied at open */
};

/* Opens the backend device on first use (streams, allocators). */
int dlrt__device_ensure_open(dlrt_device_t *dev);
/* Closes what ensure_open made; the registry calls it at shutdown. */
void dlrt__device_close(dlrt_device_t *dev);
/* Synchronizes every stream of an open device. */
int dlrt__device_sync_all(dlrt_device_t *dev);

/* Sums `count` floats at the start of bufs[i] over n devices of one backend,
 * in place, each queued on streams[i] (its device's): NCCL on CUDA.
 * DLRT_ERR_UNSUPPORTED where the backend (or its library) has none. */
int dlrt__allreduce_devices(dlrt_stream_t *const *streams, dlrt_buffer_t *const *bufs,
                            int64_t count, int n);

/* Host pool bookkeeping for dlrt_host_free (lib/mem/memory.c). */
void dlrt__host_registry_clear(void);

#endif
