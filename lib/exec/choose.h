/* choose.h — the planner that chooses, under a device budget, for every
 * activation the backward pass reads: keep it, swap it (off the device
 * after its last forward use, prefetched in time for its backward use) or
 * recompute it (from the nearest storages that stay), from per-node costs
 * measured on the device (op_costs.c) and the device's link model; each
 * choice is priced by replaying the schedule on a model of the spill pool
 * (choose_model.c), and the pure strategies are choices too (internal). */
#ifndef DLRT_EXEC_CHOOSE_H
#define DLRT_EXEC_CHOOSE_H

#include "exec/schedule.h"

/* Measured costs (op_costs.c). */
typedef struct {
  double *node_ms;           /* by graph node index: a kernel's time, ms */
  int n_nodes;
  double memcpy_bytes_per_s; /* the host's memcpy rate */
  double copy_bytes_per_s;   /* the spill pool's own copies in the profiling pass
                                (without a link model), 0 when it moved too little */
  int cached;                /* 0 measured now, 1 from the process, 2 from the file */
  double profile_ms;         /* the profiling pass's time (0 when cached) */
  int passes;                /* counted passes: each node's time is their median */
  double spread;             /* the passes' step totals: (q3 - q1) / median */
  double handoff_ms;         /* the step's stream hand-offs, left out of the nodes */
  double nodes_ms;           /* a pass's nodes, summed: the median over the passes */
  double step_ms;            /* the step queued whole, as training runs it (one wait) */
  double dispatch_ms;        /* its excess over its pass's nodes (median), per position */
  double exchange_ms;        /* the caller's exchange around a whole step (median; 0
                                without one): dlrt__step_exchange's before and after */
} dlrt__op_costs;

/* What a training loop does around each step beyond the executor's run,
 * passed down by the caller (lib/train knows its inputs and what it reads
 * back): `prepare` once, untimed, after the profile has filled the inputs;
 * then `before` each whole step (the next batch's inputs queued) and
 * `after` it (the loss read back, a classifier's logits), both timed. The
 * device waits through them: a loop that reads its loss after every step
 * pays them once a step. */
typedef struct {
  int (*prepare)(void *user, dlrt_exec_t *e);
  int (*before)(void *user, dlrt_exec_t *e);
  int (*after)(void *user, dlrt_exec_t *e);
  void *user;
} dlrt__step_exchange;

/* Times the nodes of the executor's training schedule (spilling on): a
 * warm-up run, then at least `reps` more (more for a short step, within a
 * bounded time), the median of each; each node between two events on the
 * compute stream (its kernels, without the hand-off to and from the
 * stream that a training run pipelines), over inputs filled like a batch;
 * the storages hold garbage afterwards (the caller initialises them
 * again). */
int dlrt__op_costs_measure(dlrt_exec_t *e, int reps, dlrt__op_costs *c);
/* The same, and with whole_steps, beside each pass the step queued whole
 * as training runs it (its excess over the nodes: dispatch_ms; without,
 * dispatch_ms is 0 and step_ms the nodes' nodes_ms), with the caller's
 * exchange x around it when x is not NULL (its time: exchange_ms; the
 * whole step is timed from its run, the inputs x queued running first).
 * A whole step trains: the executor's step count, loss scale and optimizer
 * state move, so it is for an executor made to be profiled and thrown
 * away (--simulate this), not a trainer's. */
int dlrt__op_costs_measure_steps(dlrt_exec_t *e, int reps, int whole_steps,
                                const dlrt__step_exchange *x, dlrt__op_costs *c);
void dlrt__op_costs_free(dlrt__op_costs *c);

/* The spill pool's model (choose_model.c): one training step of schedule s
 * replayed on the pool's rules (acquire and lock, Belady eviction with
 * write-back on the compute stream, prefetch on the copy stream, one copy
 * engine per direction) and the measured costs. */
typedef struct {
  const dlrt_graph_t *g;
  const dlrt__schedule *s;
  const double *node_ms;
  const uint64_t *bytes;      /* by storage id: the pool's granules (what the budget counts) */
  const uint64_t *size;       /* by storage id: its bytes (what a copy moves) */
  uint64_t budget;
  double bytes_per_s, latency_s; /* the link, per direction */
  double floor_bytes_per_s;   /* no copy goes faster (0: none) */
  int lookahead;              /* the executor's prefetch distance, nodes */
  int slicing;                /* chunked blocks move their image storages in slices */
  int overlap;                /* and copy them on the copy streams (dlrt__slice_overlap) */
  dlrt_offload_policy policy;
  const char *swap_out;       /* by storage id, or NULL */
  int first_backward;         /* the schedule's first backward position */
  int *const *prefetch_at;    /* by position: storages to prefetch after it, or NULL */
  const int *inputs;          /* storages the host writes before each step, -1 ended */
  /* Copies that a node's profiled time holds (the executor's chunked
   * blocks, timed whole with their slices and fetches, the link off)
   * were made at this rate (B/s; the
   * host's memcpy on a device that shares host memory; 0: unknown): they
   * add only the link's time past it (dlrt__link_seconds_past) and
   * block_gate_s. blocks_held: the blocks' times hold theirs (0: a
   * schedule the profile did not run, its blocks' nodes whole-batch times). */
  double held_bytes_per_s;
  int blocks_held;
  double link_latency_s;      /* of latency_s, the link's own (the rest: the stream's) */
  double block_gate_s;        /* the link model's notice and gate, a copy */
} dlrt__pool_model;

/* copy_costs.c: what a 512-byte copy waited for costs past its modelled
 * time on `dev` (the stream's hand-offs), s; and what the link model's
 * notice and gate add to a queued copy, s (leaves the link as `spec`).
 * 0 when they cannot be measured. */
double dlrt__copy_overhead_s(dlrt_device_t *dev);
double dlrt__link_gate_s(dlrt_device_t *dev, const char *spec);

typedef struct {
  int feasible;               /* 0: some node finds no room (the run fails) */
  double step_ms, compute_ms, recompute_ms, exposed_ms;
  uint64_t fetched_bytes, spilled_bytes, peak_resident;
} dlrt__model_step;

/* The second of two steps (the first starts with everything on the host,
 * as spilling does). */
int dlrt__model_step_run(const dlrt__pool_model *m, dlrt__model_step *out);

/* What the planner chose and predicted (choose.c), kept by the executor. */
typedef struct {
  int tensor;                 /* the group's first storage (its name) */
  int node;                   /* its producer */
  uint64_t bytes;
  int choice;                 /* DLRT_SPILL_KEEP, _SWAP, _RECOMPUTE */
  double swap_ms, recompute_ms; /* each option's own cost, alone */
} dlrt__decision;

typedef struct {
  int on;
  dlrt_plan_strategy strategy;  /* what runs */
  dlrt_spill_plan plan;
  dlrt__decision *decisions;
  int n_decisions;
  /* For the run: swap_out[id], prefetch_at[position] (-1 ended), the
   * training schedule's first backward position. */
  char *swap_out;
  int **prefetch_at;
  int n_positions;
  int first_backward;
} dlrt__exec_choice;

void dlrt__exec_choice_free(dlrt__exec_choice *c);

#endif
