/* managed.h — unified-memory emulation: storages that live on the device
 * while there is budget for them and spill to pinned host memory, and past
 * the host budget to a disk file, moved whole and ahead of need (internal).
 *
 * A pool manages the storages of one user (the executor), numbered 0..n-1,
 * whose device buffers it keeps in the user's array bufs[] (NULL: not on the
 * device). Each storage has a residency: on the device (bufs[id] != NULL),
 * with a clean host or disk copy or none; `dirty` says the device holds the
 * only current copy. Before a kernel runs, its storages are acquired (made
 * resident and locked), after it released. When the device budget would be
 * exceeded the pool evicts unlocked storages, the one whose next use is
 * furthest away first (the user tells it the next use from its schedule;
 * least recently used breaks ties), writing back only dirty ones. Fetches
 * run on the compute stream when needed at once, on the pool's copy stream
 * when prefetched; write-backs to host copies on the pool's write-back
 * stream, ordered by events: the evicted storage's device block stays held
 * (a drain, counted resident) until the budget needs it back, when the
 * compute stream waits for its copy, or until the storage is used again,
 * when it takes the block back without a copy. */
#ifndef DLRT_MEM_MANAGED_H
#define DLRT_MEM_MANAGED_H

#include "dlrt.h"

typedef struct dlrt__mpool dlrt__mpool;

/* `bufs` (n entries) is the user's array of device buffers, which the pool
 * reads and writes; `device_budget` bounds the bytes of resident storages
 * (512-byte granules), `host_budget` those of host copies (0: no bound);
 * past it copies go to a file in $DLRT_SPILL_DIR (else $TMPDIR, /tmp),
 * unlinked as soon as it is open. */
int dlrt__mpool_create(dlrt_device_t *dev, dlrt_stream_t *compute, dlrt_buffer_t **bufs, int n,
                       uint64_t device_budget, uint64_t host_budget, dlrt__mpool **out);
/* Frees the host and disk copies once the streams are done; the device
 * buffers in bufs[] stay the user's to free. */
void dlrt__mpool_destroy(dlrt__mpool *p);

/* Declares storage `id` of `bytes`. */
void dlrt__mpool_declare(dlrt__mpool *p, int id, size_t bytes);
/* Moves the current device buffer bufs[id] (the user allocated it) under
 * the pool: it becomes a dirty resident storage. */
int dlrt__mpool_adopt_buffer(dlrt__mpool *p, int id);

/* The clock of the storage's next use (the user's schedule position; larger
 * is later; INT64_MAX: none). */
void dlrt__mpool_next_use(dlrt__mpool *p, int id, int64_t when);
/* Makes the storage resident (fetching its copy, or allocating it fresh)
 * and locks it; `write`: the device copy becomes the only current one. */
int dlrt__mpool_acquire(dlrt__mpool *p, int id, int write);
void dlrt__mpool_release(dlrt__mpool *p, int id);
/* In place: storage `id` takes over the (acquired) device buffer of `from`,
 * whose life ends; `id` is acquired for writing. bufs[from] still names the
 * buffer (the node reads it) until dlrt__mpool_handed_over. */
int dlrt__mpool_take_over(dlrt__mpool *p, int id, int from);
void dlrt__mpool_handed_over(dlrt__mpool *p, int from);
/* The storage's life ended: every copy is freed. */
void dlrt__mpool_discard(dlrt__mpool *p, int id);
/* Best effort: starts copying a storage that is off the device back to it
 * on the copy stream, if the budget has room or room can be made from
 * storages needed later than this one. */
int dlrt__mpool_prefetch(dlrt__mpool *p, int id);
/* Offloads an unlocked storage now (its next use is far): written back if
 * dirty (its buffer held as a drain while the copy runs), else freed. */
int dlrt__mpool_offload(dlrt__mpool *p, int id);

/* A current host copy of the storage for the host to read (write = 0) or
 * to rewrite (write = 1: the device copy is then dropped). Copies back from
 * the device are queued on the compute stream: synchronize it before
 * touching *host. */
int dlrt__mpool_host_view(dlrt__mpool *p, int id, int write, void **host);
/* Ends a view: one made past the host budget goes to the disk tier (when
 * written) and its memory back, so the host budget holds. */
int dlrt__mpool_host_view_end(dlrt__mpool *p, int id, int write);

/* Piecewise residency: a storage used a slice at a time (a chunked block's
 * images). slices_begin makes the host copy the current one (written back
 * from the device, unless `write`: the slices will overwrite all of it),
 * drops the device copy, and gives a device window of `window` bytes that
 * the budget counts and that stays locked until slices_end. dlrt__mpool_slice copies `rows` rows of `width` bytes, `pitch`
 * apart from host offset `at`, packed into the window (out = 0) or back
 * (out = 1), queued on the compute stream. The storage is not otherwise
 * acquired, prefetched or evicted in between. */
int dlrt__mpool_slices_begin(dlrt__mpool *p, int id, int write, size_t window,
                             dlrt_buffer_t **buf);
int dlrt__mpool_slice(dlrt__mpool *p, int id, int out, size_t at, size_t pitch, size_t width,
                      size_t rows);
/* The same copy on the copy engine of its direction (the prefetch stream
 * in, the write-back stream out), after all the compute stream queued so
 * far (its last use of the window): it overlaps the compute that follows.
 * The compute stream waits for it at dlrt__mpool_slice_wait (before its
 * next use of the window) or at slices_end. */
int dlrt__mpool_slice_async(dlrt__mpool *p, int id, int out, size_t at, size_t pitch,
                            size_t width, size_t rows);
int dlrt__mpool_slice_wait(dlrt__mpool *p, int id);
/* Frees the window; `written`: slices went back to the host copy. */
int dlrt__mpool_slices_end(dlrt__mpool *p, int id, int written);

/* Resident bytes now. */
uint64_t dlrt__mpool_resident(const dlrt__mpool *p);
void dlrt__mpool_set_budget(dlrt__mpool *p, uint64_t device_budget);
/* Starts the statistics afresh (the peak from what is resident now). */
void dlrt__mpool_reset_stats(dlrt__mpool *p);
/* Fills out (the stats of the public header). Waits for timed copies. */
int dlrt__mpool_stats(dlrt__mpool *p, dlrt_spill_stats *out);

/* The figures of every pool on `dev` so far (summed; peaks the largest);
 * 0 if it never had one. */
int dlrt__spill_totals(dlrt_device_t *dev, dlrt_spill_stats *out);

#endif
