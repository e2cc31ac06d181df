/* state_split.h — where streamed parameters' optimizer state lives under a
 * host budget (--offload params --host-limit): the rule of
 * dlrt_exec_param_state_limit (param_stream.c, param_disk.c), in one place
 * for the runtime, the placement (lib/train/plan.c) and the replay of a
 * step (lib/train/simulate.c), so that what is planned is what runs. */
#ifndef DLRT_EXEC_STATE_SPLIT_H
#define DLRT_EXEC_STATE_SPLIT_H

#include <stdint.h>

#include "graph/graph.h"

/* The host slots the state on disk passes through: one updated, one read
 * ahead, one written back (param_disk.c). Each holds a whole state. */
#define DLRT__STATE_SLOTS 3

typedef struct {
  uint64_t host_bytes;  /* state kept in host memory, the slots not counted */
  uint64_t slot_bytes;  /* one slot: the largest state on disk (0: none on disk) */
  uint64_t disk_bytes;  /* state on disk */
  int on_disk;          /* parameters whose state is on disk */
  int fits;             /* 1: host_bytes + DLRT__STATE_SLOTS slots within the budget */
} dlrt__state_split;

/* The split of n states of bytes[i] each under `budget` bytes of host
 * memory (0: all in host memory): largest first (ties in index order), a
 * state stays in host memory while it fits beside the slots for what goes
 * to disk (slots the size of the next state down until one goes, then of
 * the largest that went); the rest goes to disk. disk[i] (may be NULL) is
 * set to 1 for those on disk, else 0. DLRT_ERR_OOM: out of host memory
 * (the sort's scratch). */
int dlrt__state_split_make(int n, const uint64_t *bytes, uint64_t budget, char *disk,
                           dlrt__state_split *out);

/* The parameters of g that streaming puts on the host, as
 * dlrt_exec_offload_params picks them (each fp32 root parameter an SGD or
 * Adam update node trains, once, in node order): *n of them, (*id)[i] its
 * tensor and (*bytes)[i] its optimizer state's bytes (SGD's momentum, or
 * Adam's two moments: the parameter's bytes each). The caller frees *id
 * and *bytes. */
int dlrt__streamed_states(const dlrt_graph_t *g, int *n, int **id, uint64_t **bytes);

#endif
