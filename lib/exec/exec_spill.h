/* exec_spill.h — the executor's spilling part, owned by exec_spill.c: how
 * schedules fit a budget, and the spill pool around a run's nodes and
 * chunked blocks (internal). */
#ifndef DLRT_EXEC_SPILL_H
#define DLRT_EXEC_SPILL_H

#include "exec/schedule.h"
#include "mem/managed.h"

/* Spilling (exec_spill.c): NULL pool when off. */
typedef struct {
  dlrt__mpool *pool;
  dlrt_spill_config cfg;
  /* Spilling in slices, when whole-batch storages do not fit the budget: a
   * chunked block moves its whole-batch image storages a chunk's images at
   * a time between their host copies and device windows (windows[id]
   * during the block, which kernels use for the storage), and its kernels
   * see them as the chunk's own (block_local[id] = 3; else s->local). */
  int slicing;
  dlrt_buffer_t **windows;
  char *block_local;
  struct dlrt__slice {
    int id, read, written;
    size_t rows, row_image_bytes, pitch; /* per channel row: one image's bytes */
    /* On a copy stream, overlapping the chunks' compute (a segment's
     * block, not a slice block's one node): a slice read and not written
     * comes in for the next chunk after `last_read`, the block's last
     * position reading it; one written first goes out after its chunk. */
    int overlap, last_read;
  } *slices;
  int n_slices;
  const dlrt__chunk_block *slice_block; /* the block running in slices */
  int overlap; /* its slices on the copy streams (dlrt__slice_overlap) */
} dlrt__exec_spill;

/* Whether a segment's block copies its slices on the copy streams,
 * overlapping its chunks: DLRT_SLICE_OVERLAP=1 or 0 says; unset, on a GPU
 * (copy engines beside its compute) and not on a device that computes on
 * the host's cores (`host_cores`: the cpu device, PoCL), whose copy
 * streams are more threads on those cores. exec_spill.c. */
int dlrt__slice_overlap(int host_cores);

/* The most one node (or chunked block) of the schedules holds on the
 * device at once: no smaller spill budget can work (*worst: that node, or
 * -2 - the first node of that block). `slices`: blocks hold their
 * whole-batch image storages a chunk at a time. exec_spill.c. */
uint64_t dlrt__least_spill_budget(const dlrt_graph_t *g, const dlrt__schedule *plans, int n_plans,
                                  dlrt_offload_policy policy, int slices, int *worst);
/* How the schedules spill within `budget` (0: in as little as they can):
 * whole-batch storages whole and chunks as planned if that fits, else in
 * slices, halving the chunk of the block that needs the most (left set)
 * until it fits. Returns the least budget of the choice (*slices). */
uint64_t dlrt__spill_fit(const dlrt_graph_t *g, dlrt__schedule *plans, int n_plans,
                         dlrt_offload_policy policy, uint64_t budget, int *slices, int *worst);

/* The residency policy of the executor's runs (residency.h): spilling's
 * while a budget is set, else the plain one. */
typedef struct dlrt__residency dlrt__residency;
const dlrt__residency *dlrt__exec_residency(const dlrt_exec_t *e);

/* Spilling around the nodes of a run (exec_spill.c). begin makes the
 * node's storages resident (taking over in place), end releases them,
 * frees what ends there, offloads by policy and prefetches ahead. */
void dlrt__spill_begin_run(dlrt_exec_t *e, const dlrt__schedule *s);
int dlrt__spill_begin_node(dlrt_exec_t *e, const dlrt__schedule *s, int k, int *done_on_host);
int dlrt__spill_end_node(dlrt_exec_t *e, const dlrt__schedule *s, int k);
/* Chunked blocks while spilling: begin locks the whole-batch storages the
 * block touches for all its chunks; chunk_outputs acquires a position's
 * own (chunk) outputs, chunk_done frees the chunk's storages that end
 * there; end unlocks, tells the pool their next uses, frees those whose
 * lives end in the block and prefetches ahead. */
int dlrt__spill_begin_block(dlrt_exec_t *e, const dlrt__schedule *s, const dlrt__chunk_block *b);
/* In slices: before a chunk's positions (out = 0) the slices of images
 * [b0, b0 + nb) it reads come in; after them (out = 1) those it wrote go
 * back to the host copies. */
int dlrt__spill_slices(dlrt_exec_t *e, int out, int64_t b0, int64_t nb);
int dlrt__spill_chunk_outputs(dlrt_exec_t *e, const dlrt__schedule *s, int k);
void dlrt__spill_chunk_done(dlrt_exec_t *e, const dlrt__schedule *s, const dlrt__chunk_block *b,
                           int k);
int dlrt__spill_end_block(dlrt_exec_t *e, const dlrt__schedule *s, const dlrt__chunk_block *b);
/* A tensor's storage made resident (and locked) for host I/O or the
 * executor's own kernels; a no-op without spilling. */
int dlrt__exec_use(dlrt_exec_t *e, const dlrt_tensor_t *t, int write);
void dlrt__exec_unuse(dlrt_exec_t *e, const dlrt_tensor_t *t);

#endif
