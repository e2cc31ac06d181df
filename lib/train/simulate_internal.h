/* simulate_internal.h — what the two halves of the step replay share
 * (private to them): simulate.c (dlrt_simulate_step: the schedule, each
 * node's time, the dry run of a budget, the offload model) and
 * simulate_stream.c (parameter streaming and its optimizer state on disk,
 * replayed on param_stream.c's and param_disk.c's rules). The small
 * helpers are static inline so that each half keeps its own calls. */
#ifndef DLRT_TRAIN_SIMULATE_INTERNAL_H
#define DLRT_TRAIN_SIMULATE_INTERNAL_H

#include <stdint.h>

#include "device/link_model.h"
#include "exec/exec.h"
#include "train/train.h"

/* A copy of the replay: before position `pos` on the compute stream
 * (on_compute), or issued when `pos` starts on the copy engine and needed
 * by position `need` (-1: by none in this step); pos = the schedule's
 * length: after its last node (the step ends when it does). */
typedef struct {
  int pos, need, dir, on_compute;
  double bytes;
} sim_copy;

/* Bytes the host optimizer streams for update node n: Adam reads the fp32
 * parameter, two moments and the gradient and writes three; SGD one state. */
static inline double host_update_bytes(const dlrt__node *n) {
  double count = (double)n->in[0]->numel;
  return n->op == DLRT__OP_ADAM ? 28.0 * count : 20.0 * count;
}

static inline int is_update(const dlrt__node *n) {
  return n->op == DLRT__OP_SGD || n->op == DLRT__OP_ADAM;
}

/* The replay's clocks: the compute stream, the two copy engines, the host
 * optimizer; what it counts goes to *p in the counted step only. */
typedef struct {
  const dlrt_machine *m;
  double t;             /* the compute stream's clock */
  double engine[2];     /* when each copy engine is free */
  double host_free;     /* the host optimizer's clock */
  dlrt_simulated_step *p;
  int counting;         /* the step that is counted */
} replay;

/* When copy c, issued at `issue`, ends on its engine, taking `seconds`. */
static inline double copy_end_taking(replay *r, double issue, const sim_copy *c,
                                     double seconds) {
  dlrt__link_engine e = {.free_at = r->engine[c->dir]};
  double end = dlrt__link_engine_take(&e, issue, seconds, (uint64_t)c->bytes);
  r->engine[c->dir] = end;
  if (r->counting) {
    r->p->transfer_s += seconds;
    r->p->copies++;
    if (c->dir == DLRT__LINK_H2D) r->p->h2d_bytes += (uint64_t)c->bytes;
    else r->p->d2h_bytes += (uint64_t)c->bytes;
  }
  return end;
}

/* The same at the link model's time. */
static inline double copy_end(replay *r, double issue, const sim_copy *c) {
  return copy_end_taking(r, issue, c, dlrt__link_seconds(r->m->link_bytes_per_s,
                                                         r->m->link_latency_s,
                                                         (uint64_t)c->bytes));
}

/* The compute stream waits until `until`. */
static inline void wait_until(replay *r, double until, double *exposed) {
  if (until > r->t) {
    if (r->counting) *exposed += until - r->t;
    r->t = until;
  }
}


/* --offload params replayed (simulate_stream.c): schedule s of g, each
 * node's seconds, `ahead` nodes of look-ahead, the loader's batch bytes,
 * the host budget of the optimizer state (--host-limit, 0: none) on
 * machine m; the step's figures into *out (its streaming fields, step_s
 * and the host's and disk's). */
int dlrt__sim_stream_replay(const dlrt_graph_t *g, const dlrt__schedule *s,
                            const double *seconds, int ahead, double batch_bytes,
                            uint64_t host_budget, const dlrt_machine *m,
                            dlrt_simulated_step *out);

#endif
