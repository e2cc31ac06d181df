/* dltrain.h — what dltrain's files share: dltrain.c (main's phases: set up,
 * build the trainer and its parallelism, clean up), dltrain-options.c (the
 * command line), dltrain-train.c (the data, the epochs), dltrain-report.c
 * (the run's summary and --json), dltrain-mpi.c (MPI), dltrain-plan.c,
 * dltrain-simulate.c and dltrain-split.c (--plan), dltrain-lm.c (GPT). */
#ifndef DLTRAIN_H
#define DLTRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "dlrt.h"
#include "tool-common.h" /* STATUS_*, TOOL_*, tool_fail, tool_json_string */

typedef struct {
  const char *model, *data, *device, *save, *resume;
  int epochs, threads; /* threads < 0: the library's default */
  int64_t batch, limit; /* limit 0: every image */
  dlrt_optimizer opt;
  float label_smoothing, clip_norm;
  dlrt_lr_schedule schedule;
  int64_t warmup, step_size;
  float gamma;
  uint64_t seed;
  int deterministic, json, quiet;
  int workers, prefetch, augment, mmap, accum, checkpoint;
  int plan;                 /* --plan: plan memory, train nothing */
  const char *mem_limit, *host_limit; /* --mem-limit, --host-limit (sizes or %) */
  const char *trace;        /* --trace FILE */
  const char *link;         /* --link SPEC (set as DLRT_LINK for every device) */
  const char *plan_strategy; /* --plan-strategy (set as DLRT_PLAN_STRATEGY) */
  const char *simulate;     /* --simulate PRESET|FILE|this (with --plan) */
  const char *spill_dir;    /* --spill-dir DIR (set as DLRT_SPILL_DIR) */
  int spill_prefetch_given; /* --spill-prefetch N was given (else --offload params chooses
                               after its first step; --plan: the placement's look-ahead) */
  const char *devices;      /* --devices A,B,... (data parallel) */
  const char *pipeline;     /* --pipeline A,B,... (pipeline parallel) */
  const char *tensor_parallel; /* --tensor-parallel A,B,... or N (MPI ranks) */
  int micro;                /* --micro-batches */
  int zero;                 /* --zero 0|1|2|3: ZeRO sharding over the replicas */
  dlrt_spill_config spill;
  uint64_t device_memory;   /* --device-memory (0: the device's) */
  uint64_t host_memory;     /* --host-memory (0: this machine's RAM, or --simulate's) */
  int offload_auto;         /* --offload auto: the placement's (dlrt_plan_placement) */
  double what_if;           /* --what-if parameters (0: none) */
  int splits;               /* --splits N: a GPT's best splits --plan shows (0: none) */
  int max_devices;          /* --max-devices N: the splits' bound (0: 4096) */
  int splits_given;         /* --splits was given */
  dlrt_augment aug;
  dlrt_dtype precision;     /* --precision (DLRT_F32: off) */
  dlrt_loss_scaler loss_scaler; /* --loss-scale (zeros: the defaults) */
  /* GPT models (--model gpt-mini ...): sizes replacing the preset's where
   * not 0 (--layers --heads --embd --context --vocab --dropout), and
   * training by steps with an evaluation every eval_every. */
  dlrt_gpt_config gpt;
  int gpt_model;            /* --model is a GPT preset */
  int64_t steps, eval_every, eval_batches;
  int batch_given;          /* --batch was given (a GPT's default batch is 32) */
  int steps_given;          /* --steps was given (0 is a count then: no training) */
  int data_given;           /* --data was given */
  char error[TOOL_ERROR_MAX]; /* why the command line is wrong ("" when it is not) */
} options;

/* Fills *o (all of it: the defaults, then argv's options) from the command
 * line (dltrain-options.c): 0; TOOL_HELP or TOOL_VERSION (print them with
 * dltrain_usage, dltrain_version); or STATUS_USAGE with the reason in
 * o->error. Prints nothing and never exits; argv is left as it was; the
 * strings in *o point into argv. Callable again in the same process. */
int dltrain_parse_options(int argc, char *const argv[], options *o);
void dltrain_usage(FILE *out);
void dltrain_version(FILE *out);
/* --plan: the planner's breakdown for the batch asked for, the largest batch
 * for each strategy, and the what-if table (dltrain-plan.c). */
int run_plan(const options *o, const dlrt_trainer_config *cfg, const dlrt_dataset *d,
             const char *device, uint64_t memory, const char *memory_from);
/* --plan --tensor-parallel: each of the n peers' shards planned against its
 * device (devs[i]) and the largest batch every peer fits (dltrain-plan-tp.c). */
int run_plan_tp(const options *o, const dlrt_trainer_config *cfg, const dlrt_dataset *d,
                dlrt_device_t *const *devs, int n, const double *weights);
/* --plan --simulate: the step replayed on o->simulate's machine
 * (dltrain-simulate.c); dev measures "this" and runs a budget's dry run. */
int run_simulate(const options *o, const dlrt_trainer_config *cfg, const dlrt_dataset *d,
                 dlrt_device_t *dev);

/* Where the model trains on a device of `device_memory` bytes and a host of
 * `host_memory` (0: this machine's RAM) (dlrt_plan_placement; dltrain-plan.c):
 * as text, or as JSON (a value: the object, no key); with a machine m the
 * placed step predicted on it (--simulate). 0, or a status for a failure
 * (its message printed). */
int dltrain_placement_print(FILE *out, const options *o, const dlrt_trainer_config *cfg,
                            const dlrt_dataset *d, uint64_t device_memory,
                            uint64_t host_memory, const char *memory_from,
                            const dlrt_machine *m, int json);
/* --offload auto (dltrain-plan.c): cfg placed by dlrt_plan_placement for the
 * budget (or the device's memory); a line on `log` says which. */
int dltrain_offload_auto(const options *o, dlrt_trainer_config *cfg, const dlrt_dataset *d,
                         uint64_t device_memory, FILE *log);
/* --plan for a GPT: its best tensor x pipeline x data splits over devices of
 * `memory` (o->simulate: predicted on that machine, ranked by tokens per
 * second; its memory unless --device-memory), as text or, with --json, as
 * a "splits" member (json_member: inside the caller's object) or an object
 * of its own on a line (dltrain-split.c). dev measures "this". */
int run_split(const options *o, const dlrt_trainer_config *cfg, const dlrt_dataset *d,
              dlrt_device_t *dev, uint64_t memory, int json_member);

/* The planner's keep / swap / recompute of a trainer made under a budget
 * with DLRT_PLAN_STRATEGY (dltrain-plan.c): as JSON (an object: the
 * predictions, the measured step when > 0, the decisions when asked) or
 * text; 0 when the trainer has no plan (nothing printed). --plan shows the
 * set trainer's with its own figures. */
int dltrain_spill_plan_json(FILE *out, dlrt_trainer_t *t, double measured_ms, int decisions);
int dltrain_spill_plan_text(FILE *out, dlrt_trainer_t *t, int decisions);
void dltrain_plan_set_trainer(dlrt_trainer_t *t);

/* GPT models (dltrain-lm.c). */
typedef struct {
  dlrt_epoch_stats last, eval; /* the last round of training, the last evaluation */
  int64_t steps_run;           /* by this invocation */
  int64_t skipped_steps;
  double val_loss, val_bpb;    /* NaN: none (bpb: byte tokens only) */
  /* Each round's (--eval-every steps') mean train loss and validation loss,
   * for --json (the first LM_ROUNDS_MAX). */
#define LM_ROUNDS_MAX 4096
  float round_loss[LM_ROUNDS_MAX], round_val_loss[LM_ROUNDS_MAX];
  int rounds;
} lm_results;
/* The training and validation windows of --data (default Debian's
 * fortunes), split 9:1; 0 or an exit status after saying why. */
int dltrain_lm_load(const options *o, int world, dlrt_dataset d[2]);
void dltrain_lm_free(void);
/* 1 when the tokens are bytes of text (vocabulary 256). */
int dltrain_lm_byte_tokens(void);
/* Trains from step `start` to --steps, evaluating every --eval-every steps
 * (and saving after each when --save); 0 or an exit status. */
int dltrain_lm_train(const options *o, dlrt_trainer_t *t, dlrt_dataset d[2], int start,
                     FILE *log, int tty, dlrt_device_t *dev, int rank, lm_results *out);

/* What the run measured, for the JSON line (dltrain-report.c). */
typedef struct {
  const char *device, *device_name, *data;
  const dlrt_dataset *train, *test;
  const float *losses; /* train loss of each epoch run by this invocation */
  int epochs_run;
  dlrt_epoch_stats last, eval;
  const lm_results *lm; /* a GPT's figures, else NULL */
  dlrt_exec_info info;
  double seconds;
  int64_t skipped_steps; /* loss scaling, over this invocation's epochs */
  /* Every device the run used (--devices, --pipeline, else the one), with
   * the rows of each batch it took (its share under --devices). */
  dlrt_device_t *const *devices;
  int n_devices;
  int64_t rows[64];
  /* --tensor-parallel: this process's peers (their shards and bytes). */
  dlrt_tp_peer_info tp[DLRT_TP_MAX];
  int n_tp, tp_ranks;
  dlrt_stage_info stages[16]; /* --pipeline's stages (of this rank's shard) */
  int n_stages;
  dlrt_zero_info zero; /* the model states a replica holds (--zero, or unsharded) */
  dlrt_trainer_t *trainer;
} results;

/* --checkpoint as --json and the memory line name it ("none", "sqrt",
 * "every:N" ...); the text lives until the next call. */
const char *dltrain_checkpoint_name(int every);
/* The measured training step, ms (0 when nothing ran): r->lm's tokens or
 * r->last's images per second over one batch. */
double dltrain_measured_step_ms(const options *o, const results *r);
/* The run's JSON object on one line of stdout (--json, rank 0 only). */
void dltrain_print_json(const options *o, const results *r);

/* One run of dltrain, from the command line to the cleanup: what main()'s
 * phases (dltrain.c) and the report's (dltrain-report.c) share. Zeros
 * first: whatever a phase did not reach stays 0 / NULL for the cleanup. */
typedef struct {
  options o;
  double start;             /* tool_now_s() as main began (--json's "seconds") */
  int status;               /* the exit status */
  FILE *log;                /* the lines: stdout; stderr under --json; /dev/null ranks > 0 */
  FILE *quiet_log;          /* that /dev/null (closed at the end), else NULL */
  int tty;                  /* log redraws a progress line in place */
  int rank, world;          /* MPI_COMM_WORLD's (0 and 1 without mpirun) */
  int data_rank, data_world; /* among the data-parallel replicas (--tensor-parallel N's) */
  struct mpi_job *job;      /* dltrain-mpi.c's; NULL: not launched by mpirun */
  int ranks_agree_to_stop;  /* every rank stops on the same verdict: none aborts */
  dlrt_device_t *dev;       /* --device (or the first of the lists) */
  dlrt_device_props props;
  dlrt_device_t *replicas[64]; /* --devices or --pipeline */
  int n_replicas;
  double replica_weights[64]; /* --devices A@W,...: fixed shares of each batch */
  int replicas_weighted;
  char device_list[512];    /* their specs, cut in place by strtok_r */
  dlrt_device_t *tp_devs[DLRT_TP_MAX]; /* --tensor-parallel DEV[@WEIGHT],... */
  double tp_weights[DLRT_TP_MAX];
  int n_tp, tp_weighted;    /* tp_weighted: a @WEIGHT was given */
  int tp_ranks;             /* --tensor-parallel N: the MPI ranks one model is split over */
  dlrt_dataset data[2];     /* training and test (a GPT's: validation) */
  int generated;            /* the data was generated (or fell back to it) */
  dlrt_trainer_config cfg;
  dlrt_trainer_t *trainer;
  int done;                 /* the epochs (a GPT: steps) --resume's checkpoint had done */
  float *losses;            /* each epoch's train loss, for --json */
  lm_results lm;            /* a GPT's figures */
  results r;
} run;

/* Ends one of main()'s phases when a dlrt call fails: s->status says what
 * failed and why, and 1 stops the run (rc: the phase's). */
#define TRY(call, what)                                                                   \
  do {                                                                                    \
    if ((rc = (call)) != DLRT_OK) {                                                       \
      s->status = tool_fail(what, rc);                                                    \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)

/* The run's lines before training, what it chose, defaults included
 * (dltrain-report.c); after it, the figures and --json's object. Both 0,
 * or 1 with s->status set. */
int dltrain_describe(run *s);
int dltrain_summarize(run *s);

/* The training (d[0]) and test (d[1]) splits --data names, over `world`
 * data-parallel ranks (dltrain-train.c). A missing Fashion-MNIST package
 * falls back to generated data; a folder named explicitly must load.
 * *generated says which was used. 0, or an exit status after saying why. */
int dltrain_load_data(const options *o, int world, dlrt_dataset d[2], int *generated);
/* The epochs from s->done to --epochs, each evaluated (and saved with
 * --save), or a GPT's steps (dltrain_lm_train); 0, or 1 with s->status. */
int dltrain_train(run *s);

#ifdef DLRT_HAVE_MPI
/* MPI glue (dltrain-mpi.c; config.h's DLRT_HAVE_MPI). The job is opaque:
 * mpi.h is for dltrain-mpi.c alone, so the files including this header
 * (tests/test-options.c among them) need no MPI flags. */
typedef struct mpi_job mpi_job;
/* Started by mpirun (Open MPI, MPICH or a PMIx launcher)? */
int dltrain_mpi_launched(void);
/* MPI_Init; this rank and the world's size. The job's groups are both
 * MPI_COMM_WORLD, its wait DLRT_MPI_TIMEOUT seconds (default 120). */
mpi_job *dltrain_mpi_start(int *argc, char ***argv, int *rank, int *world);
/* --tensor-parallel N over N x R ranks: ranks r * N .. r * N + N - 1 hold
 * replica r's N shards; shard k of every replica sums its gradients with
 * the others' (the job's tensor and data groups). */
void dltrain_mpi_split(mpi_job *job, int rank, int tp_ranks);
/* Leaves the job: a failed rank aborts the others (unless all ranks agree
 * to stop), the groups are freed, MPI_Finalize. */
void dltrain_mpi_end(mpi_job *job, int status, int world, int ranks_agree_to_stop);
/* Whether this MPI reads device memory (a CUDA-aware Open MPI). */
int dltrain_mpi_cuda_aware(void);
/* The trainer's collectives over the job (user: the mpi_job); a rank that
 * stops ends the job with a message instead of a hang. The gradient
 * all-reduce over the data group, started per bucket and polled: */
int dltrain_mpi_allreduce_start(void *user, float *values, int64_t count, void **request);
int dltrain_mpi_allreduce_wait(void *user, void *request);
/* Tensor parallelism's sum or maximum over the tensor group, in place: */
int dltrain_mpi_collective(void *user, float *values, int64_t count, dlrt_collective_op op,
                           int64_t tag);
/* ZeRO's (dlrt_zero_collectives): a sum to one rank, one rank's to all: */
int dltrain_mpi_reduce_start(void *user, float *values, int64_t count, int root,
                             void **request);
int dltrain_mpi_broadcast_start(void *user, float *values, int64_t count, int root,
                                void **request);
/* dlrt_trainer_check_ranks's all-gather over the data group: */
int dltrain_mpi_allgather(void *user, const void *mine, void *all, size_t bytes);
#endif

#endif
