/* param_stream_internal.h — the state of parameter streaming shared by its
 * two halves (private to them): param_stream.c, the device side (the
 * tables of each schedule, fetches, releases, gradients out, the residency
 * policy, setup), and param_stream_host.c, the host side (gradients in,
 * their sums, the updates on the host thread, the optimizer state on
 * disk); and param_master.c, masters on disk fetched ahead of need. */
#ifndef DLRT_EXEC_PARAM_STREAM_INTERNAL_H
#define DLRT_EXEC_PARAM_STREAM_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "exec/exec.h"
#include "exec/param_stream.h"

/* What is fetched: a parameter's fp32 master, or its 16-bit copy for
 * compute (mixed precision: the forward cast of the master, made on the
 * host after each update instead of on the device, half the bytes). */
typedef struct {
  int id;              /* its storage */
  int param;           /* its parameter: an index in p */
  void *host;
  size_t bytes;
  dlrt_event_t *fetched;
  int in_flight;       /* a fetch is queued: the compute stream waits for `fetched` */
  int counted;         /* its device copy counts in `resident` */
  int recorded;        /* `fetched` has been recorded (a fetch was ever queued) */
} unit;

typedef struct {
  int id, grad;        /* storages: the parameter's and its gradient's (-1: none) */
  int state[2], n_state;
  int unit[2];         /* in u: its master, its 16-bit copy (-1: none) */
  dlrt_dtype low_dtype;
  int low_stale;       /* the 16-bit copy is not the master's cast yet */
  const dlrt__node *update;
  size_t bytes;
  float *host, *host_state[2], *host_grad;
  float *host_sum;     /* accumulation: the running sum of the micro-batches' gradients */
  int64_t sum_at, sq_at; /* its entries among the partial sums of all gradients */
  dlrt_event_t *grad_done;
  int on_disk;         /* its optimizer state is in the spill file (ps->disk) */
  int master_on_disk;  /* its fp32 master too, as state n_state of its place there (host
                          NULL): updated in the slots, fetched ahead (param_master.c) */
  int grad_on_host;    /* the gradient's copy to the host is queued (grad_done) */
  int queued;          /* its job is with the host thread this run */
  int finished;        /* the host thread has done its job this run */
  int arrived;         /* this run's gradient is on the host, folded into the sum */
  int applied;         /* its update ran this run */
} streamed;

/* One schedule's tables, CSR style: for position k the units its node
 * reads (use[use_at[k] .. use_at[k + 1]]) and the parameters whose gradients are
 * complete after it (done[...]); for unit i its use positions in order
 * (pos[pos_at[i] .. pos_at[i + 1]]). */
typedef struct {
  const int *order; /* the schedule these were made for; NULL: none yet */
  int n;
  int *use_at, *use, *done_at, *done, *pos_at, *pos;
  /* ready[ready_at[k] ..]: parameters whose gradient is complete and whose
   * units' last uses have been queued after position k: their jobs may start. */
  int *ready_at, *ready;
} tables;

/* The host thread that takes each gradient as it arrives (sums it, makes
 * its partial sums) and updates its parameter when nothing more is needed
 * (overlap; DLRT_PARAM_OVERLAP=0 turns it off: all of it at the update
 * nodes). */
typedef struct {
  pthread_t thread;
  int started, stop;
  pthread_mutex_t lock;
  pthread_cond_t work, done;
  int *queue, head, tail; /* indices into p, in order (a ring of n) */
  int failed;             /* a job failed: its message in `error` */
  char error[512];
} updater;

/* What a training run does with the gradients, fixed at its start. */
typedef struct {
  int train;           /* the run makes gradients */
  int accum, micro;    /* micro-batches per update; of them run before this one */
  int last;            /* this run's micro-batch ends an update */
  int needs_all;       /* clipping or loss scaling: the updates wait for every gradient */
  float early_scale;   /* the gradient scale of updates made before the update nodes */
} run_kind;

/* Masters on disk fetched ahead of need (param_master.c). */
typedef struct dlrt__pmaster dlrt__pmaster;

struct dlrt__pstream {
  int ahead;
  int n, n_units;
  streamed *p;
  unit *u;
  int *unit_of;        /* storage id -> index in u, or -1 */
  int *param_of;       /* parameter storage id -> index in p, or -1 */
  char *is_state;      /* tensor id -> 1 for the streamed parameters' optimizer state */
  int all_grads;       /* every parameter with a gradient is streamed */
  float *sums, *squares; /* partial sums of all gradients, in tensor order (exec_grads.c's) */
  int64_t n_sums, n_squares;
  tables t[2];         /* DLRT_RUN_FORWARD, DLRT_RUN_TRAIN */
  const tables *now;   /* the running schedule's */
  run_kind run;
  dlrt_stream_t *copy;
  dlrt_event_t *mark;
  dlrt_param_offload_stats st;
  uint64_t resident;   /* parameter bytes on the device now */
  dlrt_exec_t *e;      /* for the host thread: steps, lr (fixed during a run) */
  int overlap;
  updater up;
  /* Optimizer state on disk (dlrt_exec_param_state_limit): the file and
   * its slots, and the run's expected order of the updates of those
   * parameters (seq; seq_pos[i]: where i is in it), for reading ahead. */
  dlrt__pdisk *disk;
  int *seq, *seq_pos, n_seq;
  uint64_t state_host_bytes;
  dlrt__pmaster *master; /* masters on disk: their fetches' plan and staging (else NULL) */
  /* A master on disk being given its initial values (dlrt__pstream_init_host
   * hands out one buffer at a time): parameter init_pending (-1: none),
   * written to disk before anything else reads or writes streamed values. */
  int init_pending;
  float *init_buf;
  /* The look-ahead chosen (dlrt_exec_offload_params with 0): the first
   * training run times its nodes (node_ms, by position), the next run
   * chooses from them and the link. */
  int choose, profiling;
  double *node_ms, t0, predicted_ms;
};

/* param_stream.c: parameter i's device copies freed (stale after its
 * update: the next uses fetch them); next_use: the position of unit i's
 * next use after k in tables t, or INT32_MAX. */
void dlrt__pstream_release_param(dlrt_exec_t *e, int i);
int dlrt__pstream_next_use(const tables *t, int i, int k);

/* param_stream_host.c. make_low: parameter i's 16-bit copy made from its
 * master where stale. enqueue: its gradient (whose copy is queued) handed
 * to the host thread. join_all: every job of the run done (its gradients
 * taken). host_update: its update at its update node. plan_disk_reads:
 * the order of this run's updates of parameters with state on disk, the
 * first reads started. state_on_disk: 1 where storage id is a state on
 * disk (*i its parameter, *at its offset in that parameter's state). */
int dlrt__pstream_make_low(dlrt__pstream *ps, int i);
int dlrt__pstream_enqueue(dlrt__pstream *ps, int i);
int dlrt__pstream_join_all(dlrt_exec_t *e);
int dlrt__pstream_host_update(dlrt_exec_t *e, int i);
void dlrt__pstream_plan_disk_reads(dlrt__pstream *ps);
int dlrt__pstream_state_on_disk(const dlrt__pstream *ps, int id, int *i, size_t *at);
/* Masters on disk: flush_init writes the pending initial values (above). */
int dlrt__pstream_flush_init(dlrt__pstream *ps);

/* param_master.c, masters on disk. create: the staging (after the file);
 * plan: this run's fetches of them in order, the first reads started (at
 * the run's start, its releases made); ahead: more reads started where
 * stages have come free (at each node); fetch: parameter i's master
 * queued to device buffer dst on the copy stream from its reads (waiting
 * only for those not done yet); drop: what is staged forgotten (a master
 * was written). */
int dlrt__pmaster_create(dlrt_exec_t *e);
void dlrt__pmaster_destroy(dlrt__pstream *ps);
int dlrt__pmaster_plan(dlrt_exec_t *e);
int dlrt__pmaster_ahead(dlrt_exec_t *e);
int dlrt__pmaster_fetch(dlrt__pstream *ps, int i, dlrt_buffer_t *dst);
int dlrt__pmaster_drop(dlrt__pstream *ps);

#endif
