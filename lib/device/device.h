/* device.h — the library-side objects behind the public handles (internal). */
#ifndef DLRT_DEVICE_DEVICE_H
#define DLRT_DEVICE_DEVICE_H

#include <pthread.h>

#include "device/backend.h"

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

/* A span of raw device memory: what copies and launches check and address.
 * lib/device makes no buffers; lib/mem's struct dlrt_buffer begins with its
 * span, which is all of a buffer lib/device ever reads (dlrt__span_of). */
typedef struct {
  dlrt_device_t *dev;
  dlrt_mem mem;  /* the raw allocation the span lies in */
  size_t offset; /* of the span within it, bytes */
  size_t size;   /* bytes */
} dlrt__span;

static inline const dlrt__span *dlrt__span_of(const dlrt_buffer_t *buf) {
  return (const dlrt__span *)(const void *)buf;
}

/* What the layer above (lib/mem) keeps per device, and the calls lib/device
 * makes into it without knowing what it is: the upper layer passes these
 * down when it attaches (dlrt__device_attached), so no call goes up.
 * Every member is required. */
typedef struct dlrt__device_hooks {
  /* Makes the state for an opened device (under the device's attach lock). */
  int (*create)(dlrt_device_t *dev, void **state);
  /* The device is about to close, every stream synchronized: free it all. */
  void (*close)(void *state);
  /* A stream of the device is about to go (synchronized already). */
  void (*stream_destroyed)(void *state, dlrt_stream_t *stream);
  /* Bytes held from the driver, for free-memory estimates. */
  uint64_t (*reserved)(void *state);
  /* Stream-ordered device scratch for an op's temporaries (fp32 widening,
   * reduction partials), and pinned host scratch (bounce buffers). */
  int (*scratch_alloc)(void *state, size_t bytes, dlrt_stream_t *stream, dlrt_buffer_t **out);
  void (*scratch_free)(void *state, dlrt_buffer_t *buf);
  int (*pinned_alloc)(void *state, size_t bytes, void **out);
  void (*pinned_free)(void *state, void *ptr);
} dlrt__device_hooks;

struct dlrt_device {
  const dlrt_backend_iface *be;
  void *be_ctx; /* the backend's context */
  int index;    /* within the backend */
  char spec[32];
  pthread_mutex_t lock; /* guards opening and the stream list */
  /* Guards attaching (dlrt__device_attached): apart from `lock`, because the
   * upper layer's create takes its own locks, which hold `lock` later
   * (an allocator that synchronizes the device). */
  pthread_mutex_t attach_lock;
  int open;             /* set (release) once ctx, streams and allocators exist */
  void *ctx;            /* backend device, NULL until first use */
  dlrt_stream_t *default_stream;
  dlrt_stream_t *streams; /* every live stream, default included */
  uint64_t initial_limit;     /* from DLRT_MEM_LIMIT: a budget for the layer above */
  const dlrt__device_hooks *hooks; /* the attached layer's, with its state: */
  void *attached;                  /* set (release) once, cleared at close */
  /* The host link model (link.c): made (release) on the first dlrt_link_set
   * or DLRT_LINK, kept until close, so a copy reads it without a lock. */
  struct dlrt__link *link;
};

/* Opens the backend device on first use (its context and default stream). */
int dlrt__device_ensure_open(dlrt_device_t *dev);
/* Closes what ensure_open made; the registry calls it at shutdown. */
void dlrt__device_close(dlrt_device_t *dev);
/* Synchronizes every stream of an open device. */
int dlrt__device_sync_all(dlrt_device_t *dev);

/* Whether n distinct devices of one backend that has an all-reduce across
 * devices are given (whether dlrt__allreduce_devices may work for them). */
int dlrt__devices_share_allreduce(dlrt_device_t *const *devs, int n);
/* Sums `count` floats at the start of bufs[i] over n devices of one backend,
 * in place, each queued on streams[i] (its device's): NCCL on CUDA.
 * DLRT_ERR_UNSUPPORTED where the backend (or its library) has none. */
int dlrt__allreduce_devices(dlrt_stream_t *const *streams, dlrt_buffer_t *const *bufs,
                            int64_t count, int n);

/* The upper layer's state for `dev` (opening the device and making the state
 * with hooks->create the first time). One layer attaches: other hooks than
 * the first are refused (DLRT_ERR_STATE). */
int dlrt__device_attached(dlrt_device_t *dev, const dlrt__device_hooks *hooks, void **state);

/* Whether `dev`'s memory handles are device addresses (backend.h). */
static inline int dlrt__device_has_addresses(const dlrt_device_t *dev) {
  return dev->be->device_addresses;
}

/* Raw device memory (no caching: lib/mem caches above it). */
int dlrt__device_mem_alloc(dlrt_device_t *dev, size_t bytes, dlrt_mem *out);
void dlrt__device_mem_free(dlrt_device_t *dev, dlrt_mem mem);
/* Raw pinned host memory: out->host the pointer, out->handle what frees it. */
int dlrt__device_host_alloc(dlrt_device_t *dev, size_t bytes, dlrt_mem *out);
void dlrt__device_host_free(dlrt_device_t *dev, dlrt_mem mem);

/* Scratch through the attached layer's hooks (DLRT_ERR_STATE when none is
 * attached, which cannot happen for a device that holds buffers). */
int dlrt__device_scratch(dlrt_device_t *dev, size_t bytes, dlrt_stream_t *stream,
                         dlrt_buffer_t **out);
void dlrt__device_scratch_free(dlrt_device_t *dev, dlrt_buffer_t *buf);
int dlrt__device_pinned(dlrt_device_t *dev, size_t bytes, void **out);
void dlrt__device_pinned_free(dlrt_device_t *dev, void *ptr);

#endif
