/* caching_allocator.h — per-device caching allocator above raw driver memory
 * (internal). Also serves the pinned host pool (host = 1: no streams).
 *
 * Rules (documented in README, relied on by tests):
 *  - sizes round up to 512 bytes;
 *  - requests <= 1 MiB come from the small pool of 2 MiB segments, requests
 *    below 10 MiB from 20 MiB segments, larger ones get their own segment
 *    rounded to 2 MiB; if the standard segment is over budget but the request
 *    rounded to 2 MiB fits, that smaller segment is used;
 *  - best fit (smallest free block that fits in the pool, ties by address),
 *    split when the remainder is >= 512 bytes (small) or > 1 MiB (large),
 *    free neighbours merge;
 *  - stream-ordered reuse: a free block is reused on its last stream at once;
 *    on another stream, that stream first waits (device-side) on an event
 *    recorded on the block's last stream and on any stream named by
 *    dlrt_buffer_record_stream;
 *  - when the driver or the budget refuses a segment, the device is
 *    synchronized, fully free segments are released, and the request retried. */
#ifndef DLRT_MEM_CACHING_ALLOCATOR_H
#define DLRT_MEM_CACHING_ALLOCATOR_H

#include "device/backend.h"

/* Every block the allocator hands out is a whole number of these bytes:
 * what a request holds of the device (and of a budget) is its size rounded
 * up by dlrt__alloc_rounded. Planners count memory the same way. */
#define DLRT__ALLOC_GRANULE 512

static inline uint64_t dlrt__alloc_rounded(uint64_t bytes) {
  return (bytes + DLRT__ALLOC_GRANULE - 1) / DLRT__ALLOC_GRANULE * DLRT__ALLOC_GRANULE;
}

/* Requests of this many bytes or more get a segment of their own, rounded
 * up to DLRT__ALLOC_LARGE_ROUND, when no cached block fits; a large block
 * is split only when more than DLRT__ALLOC_SPLIT_MIN would be left over. */
#define DLRT__ALLOC_OWN_SEGMENT ((uint64_t)10 << 20)
#define DLRT__ALLOC_LARGE_ROUND ((uint64_t)2 << 20)
#define DLRT__ALLOC_SPLIT_MIN ((uint64_t)1 << 20)

/* The bytes the block of a request holds (what `allocated` counts): its
 * granules, or for a request with a segment of its own the whole segment
 * when the rest is too small to split off (a 22151168-byte request holds
 * 23068672). Planners count storages so; a request served from a larger
 * cached block may hold more still, which they cannot know. */
static inline uint64_t dlrt__alloc_block_bytes(uint64_t bytes) {
  uint64_t size = dlrt__alloc_rounded(bytes);
  if (size < DLRT__ALLOC_OWN_SEGMENT) return size;
  uint64_t segment = (size + DLRT__ALLOC_LARGE_ROUND - 1) / DLRT__ALLOC_LARGE_ROUND *
                     DLRT__ALLOC_LARGE_ROUND;
  return segment - size > DLRT__ALLOC_SPLIT_MIN ? size : segment;
}

typedef struct dlrt__allocator dlrt__allocator;
typedef struct dlrt__block dlrt__block;

/* host = 0: device memory through mem_alloc; host = 1: pinned host memory
 * through host_alloc. `capacity` is the memory behind the pool in bytes (0:
 * unknown); a request above it fails at once, without asking the driver. */
int dlrt__allocator_create(dlrt_device_t *dev, int host, uint64_t capacity,
                           dlrt__allocator **out);
/* Releases every segment; live blocks are leaked to the caller (logged). */
void dlrt__allocator_destroy(dlrt__allocator *a);

/* Allocates `bytes` for use on `stream` (NULL for the host pool). On success
 * *mem is the segment's memory, *offset the block's byte offset within it. */
int dlrt__allocator_alloc(dlrt__allocator *a, size_t bytes, dlrt_stream_t *stream,
                          dlrt__block **out, dlrt_mem *mem, size_t *offset);
/* The same; `exact`: a large block is split down to the request too (its
 * rest, however small, goes back to the cache), so the block holds what was
 * asked for, rounded to 512 bytes: for a caller that keeps its own budget
 * of those bytes (spilling's pool). */
int dlrt__allocator_alloc_ex(dlrt__allocator *a, size_t bytes, dlrt_stream_t *stream, int exact,
                             dlrt__block **out, dlrt_mem *mem, size_t *offset);
void dlrt__allocator_free(dlrt__allocator *a, dlrt__block *b);
int dlrt__allocator_record_stream(dlrt__allocator *a, dlrt__block *b,
                                  dlrt_stream_t *stream);

int dlrt__allocator_set_limit(dlrt__allocator *a, uint64_t bytes);
uint64_t dlrt__allocator_limit(dlrt__allocator *a);
int dlrt__allocator_empty_cache(dlrt__allocator *a);
void dlrt__allocator_stats(dlrt__allocator *a, dlrt_mem_stats *out);
void dlrt__allocator_reset_peak(dlrt__allocator *a);
/* Forgets a stream about to be destroyed: blocks that name it as their last
 * stream are treated as idle (the stream is synchronized by then). */
void dlrt__allocator_forget_stream(dlrt__allocator *a, dlrt_stream_t *stream);
/* Bytes reserved from the driver (for free-memory estimates). */
uint64_t dlrt__allocator_reserved(dlrt__allocator *a);
/* Bytes reserved and allocated now, and the most allocated at once over the
 * allocator's life (dlrt__allocator_reset_peak does not restart this one):
 * read under the lock without calling the backend, so any thread may ask
 * (the process registry's). */
void dlrt__allocator_usage(dlrt__allocator *a, uint64_t *reserved, uint64_t *allocated,
                           uint64_t *peak);

#endif
