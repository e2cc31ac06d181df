/* param_disk.h — streamed parameters' optimizer state on disk behind a
 * host budget (param_disk.c; internal). The planner's question, whether
 * and how a model's state fits a --host-limit (dlrt__param_disk_fit), and
 * the file with its I/O thread that parameter streaming
 * (param_stream_host.c) reads ahead and writes behind, chunk by chunk. */
#ifndef DLRT_EXEC_PARAM_DISK_H
#define DLRT_EXEC_PARAM_DISK_H

#include <stddef.h>
#include <stdint.h>

/* Slots of host memory for the state on disk: one chunk being updated,
 * two read ahead, one being written back. */
enum { DLRT__PDISK_SLOTS = 4 };
/* Masters on disk: their fp32 fetches read the master's part of each chunk
 * alone, ahead of need, into DLRT__PDISK_STAGES staging buffers of a chunk
 * of one state each (param_master.c), outside the slots; at most
 * DLRT__PDISK_PARTS such reads are queued at once. */
enum { DLRT__PDISK_STAGES = 4, DLRT__PDISK_PARTS = 8 };
/* A chunk, elements of each state: at most DLRT_PARAM_DISK_CHUNK bytes /
 * 4 (default 4 Mi elements: 16 MiB of each of Adam's moments), smaller
 * where the budget needs it, never below 64 elements; a multiple of 64, so
 * that a chunk starts where the whole tensor's vector lanes would. */
enum { DLRT__PDISK_CHUNK_DEFAULT = 4 << 20, DLRT__PDISK_CHUNK_LEAST = 64 };

/* How the optimizer state of n streamed parameters (numel[i] elements and
 * n_state[i] states of them each: Adam 2, SGD with momentum 1) fits a host
 * budget of host_limit bytes (0: no budget, all in host memory). The
 * state of the largest parameters stays in host memory while it fits
 * beside the slots; the rest lives on disk and passes through the slots in
 * chunks. The chunk is the largest (up to chunk_most elements, 0: the
 * default or DLRT_PARAM_DISK_CHUNK) whose slots fit the budget. */
typedef struct {
  int fits;                  /* host_limit suffices (else least_host_bytes says what does) */
  int n_on_disk;             /* parameters whose state is on disk */
  int64_t chunk;             /* elements of each state per chunk (0: none on disk) */
  int n_slots;               /* DLRT__PDISK_SLOTS, 0 when none is on disk */
  uint64_t state_bytes;      /* all of the state */
  uint64_t host_bytes;       /* in host memory: the state kept there and the slots */
  uint64_t slot_bytes;       /* of that, the slots' */
  uint64_t stage_bytes;      /* of that, the masters' staging (with masters on disk) */
  uint64_t disk_bytes;       /* in the spill file */
  uint64_t least_host_bytes; /* the smallest host_limit that streams (the least chunks' slots) */
} dlrt__param_disk_fit_t;
/* 0, or <0 (out of host memory); on_disk (n flags, may be NULL) says which
 * parameters' state goes to disk. */
int dlrt__param_disk_fit(int n, const int64_t *numel, const int *n_state, uint64_t host_limit,
                         int64_t chunk_most, dlrt__param_disk_fit_t *out, char *on_disk);
/* The rule of --host-limit (dlrt_exec_param_state_limit): host_limit bytes
 * hold the fp32 masters (numel[i] x 4 bytes each) and the state together.
 * The masters stay in host memory while the state streams beside them
 * (the fit above under host_limit less the masters; *masters 0, out's
 * bytes the state's); where even that does not fit, each parameter counts
 * n_state[i] + 1 parts, and one whose state goes to disk takes its master
 * along, as the last part of its place in the file (*masters 1, out's
 * bytes the masters' and the state's; beside the slots, the masters'
 * staging: DLRT__PDISK_STAGES chunks of one state, in stage_bytes). The
 * executor and the planner both follow it. */
int dlrt__param_disk_fit_masters(int n, const int64_t *numel, const int *n_state,
                                 uint64_t host_limit, int64_t chunk_most,
                                 dlrt__param_disk_fit_t *out, char *on_disk, int *masters);
/* The chunk limit from DLRT_PARAM_DISK_CHUNK (bytes of one state), else
 * the default; in elements. */
int64_t dlrt__param_disk_chunk_most(void);

/* The file: parameter i's n_state[i] states of numel[i] elements each
 * (numel 0: not on disk), in host memory only chunk by chunk, in one of
 * n_slots slots of n_state x chunk floats around its update. prefetch
 * starts reading chunk c of parameter i ahead (where a slot is free, or
 * holds a chunk already handed out this round); get hands it out (reading
 * it now if need be): state j of its elements [c * chunk, ...) at
 * *state + j * chunk, *count of them; put writes it back behind (its slot
 * stays readable); new_round starts a run's updates; io reads or writes
 * `bytes` at byte `at` of parameter i's states one after the other (a
 * checkpoint). */
typedef struct dlrt__pdisk dlrt__pdisk;
typedef struct {
  uint64_t disk_bytes, slot_bytes;   /* reserved in the file; the slots' host memory */
  uint64_t read_bytes, written_bytes;
  uint64_t prefetches, misses;       /* reads started ahead; reads an update waited for */
  uint64_t part_reads;               /* part reads (masters' fetches) */
  uint64_t part_read_bytes;          /* of read_bytes, theirs */
  uint64_t part_slot_bytes;          /* their bytes taken from slots instead (not read) */
  double read_ms, write_ms, wait_ms; /* the I/O thread's; an update's waiting */
} dlrt__pdisk_stats;
int dlrt__pdisk_create(int n, const int64_t *numel, const int *n_state, int64_t chunk,
                       int n_slots, dlrt__pdisk **out);
void dlrt__pdisk_destroy(dlrt__pdisk *d);
/* Chunks of parameter i (0: its state is not on disk). */
int dlrt__pdisk_chunks(const dlrt__pdisk *d, int i);
void dlrt__pdisk_prefetch(dlrt__pdisk *d, int i, int c);
int dlrt__pdisk_get(dlrt__pdisk *d, int i, int c, float **state, int64_t *count);
int dlrt__pdisk_put(dlrt__pdisk *d, int i, int c);
/* A read of part `part` (a state, or a master on disk: the last part) of
 * chunk c of parameter i into dst (room for a chunk of one state) by the
 * I/O thread, before the slots' reads and writes queued: from the chunk's
 * slot where one holds it (as new as the file, or newer: a write-back not
 * done yet; an update's slot is waited for), else from the file. start
 * queues it (the caller keeps r and dst until it is done; at most
 * DLRT__PDISK_PARTS queued), wait waits for it (r->count: the elements
 * read). */
typedef struct {
  int i, c, part;
  float *dst;
  int64_t count;
  int done;
} dlrt__pdisk_part;
int dlrt__pdisk_part_start(dlrt__pdisk *d, dlrt__pdisk_part *r);
int dlrt__pdisk_part_wait(dlrt__pdisk *d, dlrt__pdisk_part *r);
void dlrt__pdisk_new_round(dlrt__pdisk *d);
int dlrt__pdisk_io(dlrt__pdisk *d, int i, size_t at, void *buf, size_t bytes, int write);
void dlrt__pdisk_stats_get(dlrt__pdisk *d, dlrt__pdisk_stats *out);
int64_t dlrt__pdisk_chunk(const dlrt__pdisk *d);

#endif
