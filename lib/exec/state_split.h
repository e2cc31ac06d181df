/* state_split.h — where streamed parameters' optimizer state lives under a
 * host budget (--offload params --host-limit): the rule of
 * dlrt_exec_param_state_limit (param_stream.c, param_disk.c), in one place
 * for the runtime, the placement (lib/train/plan.c) and the replay of a
 * step (lib/train/simulate.c), so that what is planned is what runs. */
#ifndef DLRT_EXEC_STATE_SPLIT_H
#define DLRT_EXEC_STATE_SPLIT_H

#include <stdint.h>

#include "exec/param_disk.h"
#include "graph/graph.h"

/* The host slots the state on disk passes through (param_disk.c: one
 * chunk updated, two read ahead, one written back). The step's replay
 * (simulate.c) moves whole states through as many slots: the same bytes
 * a step, in larger pieces than the runtime's chunks. */
#define DLRT__STATE_SLOTS DLRT__PDISK_SLOTS

typedef struct {
  uint64_t host_bytes;       /* state kept in host memory (with masters on disk, the
                                masters kept too), the slots not counted */
  uint64_t slot_bytes;       /* one slot: a chunk of each state (0: none on disk) */
  int n_slots;               /* slots (0: none on disk) */
  uint64_t stage_bytes;      /* masters on disk: their fetches' staging (pinned) */
  uint64_t disk_bytes;       /* state on disk (with masters on disk, their masters too) */
  int masters;               /* 1: the masters and the state's slots exceed the budget:
                                each master goes to disk with its state */
  uint64_t master_disk_bytes; /* of disk_bytes, the masters' */
  uint64_t least_host_bytes; /* the smallest budget that streams the state */
  int on_disk;               /* parameters whose state is on disk */
  int fits;                  /* 1: the budget holds the state kept and the slots */
} dlrt__state_split;

/* The split of n states (bytes[i], of n_state[i] tensors each: Adam 2, SGD
 * 1) under `budget` bytes of host memory (0: all in host memory), by the
 * runtime's own rule (dlrt__param_disk_fit_masters, param_disk.h: the
 * budget holds the fp32 masters and the state together). disk[i] (may be
 * NULL) is set to 1 for those on disk, else 0. DLRT_ERR_OOM: out of host
 * memory. */
int dlrt__state_split_make(int n, const uint64_t *bytes, const int *n_state, uint64_t budget,
                           char *disk, dlrt__state_split *out);

/* The parameters of g that streaming puts on the host, as
 * dlrt_exec_offload_params picks them (each fp32 root parameter an SGD or
 * Adam update node trains, once, in node order): *n of them, (*id)[i] its
 * tensor and (*bytes)[i] its optimizer state's bytes (SGD's momentum, or
 * Adam's two moments: the parameter's bytes each), (*n_state)[i] how many
 * tensors that state is (1 or 2). The caller frees *id, *bytes and
 * *n_state. */
int dlrt__streamed_states(const dlrt_graph_t *g, int *n, int **id, uint64_t **bytes,
                          int **n_state);

#endif
