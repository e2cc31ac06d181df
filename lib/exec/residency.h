/* residency.h — how a run's storages are on the device around its nodes
 * (internal). dlrt_exec_run walks its schedule and asks a residency policy
 * for memory and nothing else, so it has one path:
 *  - plain (resident.c): no budget; a node's outputs are allocated just
 *    before it runs and each storage is freed right after its last use —
 *    the trivial policy;
 *  - spilling (exec_spill.c): the storages live in lib/mem's managed pool
 *    under a budget, acquired and locked around each node, evicted to the
 *    host and prefetched ahead by their next uses.
 * Positions k are those of schedule s; ids are tensor (storage) ids. */
#ifndef DLRT_EXEC_RESIDENCY_H
#define DLRT_EXEC_RESIDENCY_H

#include "exec/exec.h"

struct dlrt__residency {
  void (*begin_run)(dlrt_exec_t *e, const dlrt__schedule *s);
  /* Before position k: its storages on the device, outputs allocated.
   * *done_on_host: the policy ran the node itself on the host (an update
   * of optimizer state that lives there). */
  int (*begin_node)(dlrt_exec_t *e, const dlrt__schedule *s, int k, int *done_on_host);
  /* After position k, also when it failed: what ends there goes. */
  int (*end_node)(dlrt_exec_t *e, const dlrt__schedule *s, int k);
  /* A chunked block: begin before its first chunk (*local: which storages
   * hold a chunk's images, for the kernels), chunk_in before each chunk's
   * positions (images [b0, b0 + nb)), chunk_outputs before each position,
   * chunk_done after each one that ran, end after the last chunk (also
   * after a failure). */
  int (*begin_block)(dlrt_exec_t *e, const dlrt__schedule *s, const dlrt__chunk_block *b,
                     const char **local);
  int (*chunk_in)(dlrt_exec_t *e, int64_t b0, int64_t nb);
  int (*chunk_outputs)(dlrt_exec_t *e, const dlrt__schedule *s, int k, const dlrt__chunk *c);
  int (*chunk_done)(dlrt_exec_t *e, const dlrt__schedule *s, const dlrt__chunk_block *b, int k,
                    const dlrt__chunk *c);
  int (*end_block)(dlrt_exec_t *e, const dlrt__schedule *s, const dlrt__chunk_block *b);
  /* A storage whose contents are no longer wanted (a skipped update's
   * inputs, intermediates after a failure). */
  void (*discard)(dlrt_exec_t *e, int id);
};

extern const dlrt__residency dlrt__residency_plain;
extern const dlrt__residency dlrt__residency_spill;

#endif
