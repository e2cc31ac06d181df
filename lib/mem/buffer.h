/* buffer.h — device buffers and the memory layer's per-device state
 * (internal). A buffer is a block of the device's caching allocator seen
 * as a span of raw memory; lib/device reads its span and nothing else. */
#ifndef DLRT_MEM_BUFFER_H
#define DLRT_MEM_BUFFER_H

#include <stddef.h>

#include "device/device.h"
#include "mem/caching_allocator.h"

struct dlrt_buffer {
  dlrt__span span;        /* first: lib/device's view (dlrt__span_of) */
  dlrt__allocator *alloc; /* the pool the block came from; NULL: caller-owned memory
                             (dlrt_buffer_wrap_host), never freed by dlrt */
  dlrt__block *block;
  int refs;               /* handles: dlrt_buffer_free drops one (dlrt_buffer_retain) */
};

/* What lib/mem keeps per device (attached to it through lib/device's hooks
 * the first time a memory call names the device). */
typedef struct {
  dlrt_device_t *dev;
  dlrt__allocator *alloc;     /* device memory */
  dlrt__allocator *host_pool; /* pinned host memory */
} dlrt__mem_device;

/* The device's memory state, made on first use (opens the device). */
int dlrt__mem_device_get(dlrt_device_t *dev, dlrt__mem_device **out);

/* The device address of a buffer's first byte for device-aware libraries
 * (CUDA-aware MPI), or NULL where the device has none (dlrt__device_has_addresses). */
static inline void *dlrt__buffer_device_address(const dlrt_buffer_t *buf) {
  if (!dlrt__device_has_addresses(buf->span.dev)) return NULL;
  return (char *)buf->span.mem.handle + buf->span.offset;
}

/* dlrt_buffer_alloc; `exact`: the allocator splits even a large cached
 * block down to the request (dlrt__allocator_alloc_ex), so the device
 * bytes it holds are the request rounded to 512 (spilling's pool keeps its
 * budget in those). */
int dlrt__buffer_alloc_ex(dlrt_device_t *dev, size_t bytes, dlrt_stream_t *stream, int exact,
                          dlrt_buffer_t **out);

/* dlrt_host_alloc, or past the pinned pool's limit (DLRT_PINNED_LIMIT)
 * pageable memory, noted once on stderr and counted (dlrt_pageable_stats);
 * dlrt_host_free frees either. For staging that copies only slower from
 * pageable memory. */
int dlrt__host_alloc_staging(dlrt_device_t *dev, size_t bytes, void **out);

#endif
