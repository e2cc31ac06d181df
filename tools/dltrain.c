/* dltrain — trains an image classifier (an MLP, a CNN or a model file) on
 * Fashion-MNIST, an MNIST-style folder or generated data, on any dlrt device,
 * and evaluates it on the test split after every epoch; public API only.
 * Exit status: 0 success, 1 a dlrt call failed (data, model file, checkpoint,
 * training), 2 usage error or a device spec that opens nothing. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h" /* DLRT_HAVE_MPI */
#include "dlrt.h"
#include "dltrain.h"
#ifdef DLRT_HAVE_MPI
#include <mpi.h>
#ifdef HAVE_MPI_EXT_H
#include <mpi-ext.h> /* Open MPI: MPIX_Query_cuda_support */
#endif
#endif

const char tool_name[] = "dltrain";

/* The generated stand-in has Fashion-MNIST's sizes. */
enum { GEN_TRAIN = 60000, GEN_TEST = 10000, GEN_CLASSES = 10 };

/* Loads the training (d[0]) and test (d[1]) splits --data names. A missing
 * Fashion-MNIST package falls back to generated data; a folder named
 * explicitly must load. *generated says which was used. */
static int load_data(const options *o, int world, dlrt_dataset d[2], int *generated) {
  int rc;
  *generated = 0;
  if (o->gpt_model) return dltrain_lm_load(o, world, d);
  *generated = strcmp(o->data, "generated") == 0;
  if (!*generated) {
    int flags = o->mmap ? DLRT_DATASET_MMAP : 0;
    /* Both splits, checked against each other before anything trains. */
    rc = dlrt_dataset_load_splits(o->data, flags, d);
    if (rc == DLRT_ERR_NOT_FOUND && strcmp(o->data, "fashion-mnist") == 0) {
      fprintf(stderr, "dltrain: Fashion-MNIST not found (%s); training on generated data "
              "instead\n", dlrt_last_error());
      *generated = 1;
    } else if (rc != DLRT_OK) {
      return tool_fail("cannot load the data", rc);
    }
  }
  /* Different seeds for the two splits: the classes are the same patterns,
   * the samples differ. */
  if (*generated && ((rc = dlrt_dataset_generate(GEN_TRAIN, GEN_CLASSES, o->seed, &d[0])) ||
                     (rc = dlrt_dataset_generate(GEN_TEST, GEN_CLASSES, ~o->seed, &d[1]))))
    return tool_fail("cannot generate data", rc);
  if (o->limit > 0) { /* the arrays stay as they are; only the counts shrink */
    int64_t test = o->limit / 6 > 0 ? o->limit / 6 : 1;
    d[0].count = d[0].count < o->limit ? d[0].count : o->limit;
    d[1].count = d[1].count < test ? d[1].count : test;
  }
  return 0;
}

typedef struct {
  FILE *out;
  int tty;          /* redraw one line in place */
  int epoch, epochs;
  int shown;        /* tenths of the epoch already reported (not a tty) */
  dlrt_device_t *dev;
} progress;

/* The trainer calls this every few steps with the running figures. */
static void on_progress(void *user, int64_t step, int64_t steps, const dlrt_epoch_stats *s) {
  progress *p = user;
  dlrt_mem_stats mem;
  double mib = dlrt_mem_stats_get(p->dev, &mem) == DLRT_OK
                   ? (double)mem.allocated.current / (1024.0 * 1024.0) : 0;
  if (p->tty) {
    static const char bar[] = "==============================";
    int width = (int)sizeof bar - 1, done = (int)(width * step / steps);
    fprintf(p->out, "\r\033[Kepoch %d/%d [%.*s%*s] %" PRId64 "/%" PRId64 " loss %.4f "
            "acc %.1f%% %.0f img/s mem %.1f MiB", p->epoch, p->epochs, done, bar,
            width - done, "", step, steps, s->loss, 100.0 * s->accuracy, s->images_per_s, mib);
  } else {
    int tenth = (int)(step * 10 / steps);
    if (tenth <= p->shown)
      return;
    p->shown = tenth;
    fprintf(p->out, "epoch %d/%d %3d%% step %" PRId64 "/%" PRId64 " loss %.4f acc %.1f%% "
            "%.0f img/s mem %.1f MiB\n", p->epoch, p->epochs, tenth * 10, step, steps,
            s->loss, 100.0 * s->accuracy, s->images_per_s, mib);
  }
  fflush(p->out);
}

/* A number, or null for NaN and infinities (which JSON lacks). The figures
 * are floats: the shortest text that reads back as the same float, so runs
 * compare exactly ("lr": 0.001, not 0.00100000005). */
static void json_number(double v) {
  char text[32];
  if (!isfinite(v)) {
    fputs("null", stdout);
    return;
  }
  for (int digits = 6; digits <= 9; digits++) {
    snprintf(text, sizeof text, "%.*g", digits, v);
    if ((float)strtod(text, NULL) == (float)v)
      break;
  }
  fputs(text, stdout);
}

static const char *checkpoint_name(int every) {
  static char text[32];
  if (every == 0) return "none";
  if (every == DLRT_CHECKPOINT_SQRT) return "sqrt";
  if (every == DLRT_CHECKPOINT_AUTO) return "auto";
  if (every == DLRT_CHECKPOINT_MARKS) return "blocks";
  snprintf(text, sizeof text, "every:%d", every);
  return text;
}

/* What the run measured, for the JSON line. */
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
  dlrt_zero_info zero; /* the model states a replica holds (--zero, or unsharded) */
  dlrt_trainer_t *trainer;
} results;

/* The measured training step, ms (0 when nothing ran). */
static double measured_step_ms(const options *o, const results *r) {
  if (r->lm) return r->lm->steps_run && r->lm->last.tokens_per_s > 0
                        ? 1e3 * (double)(o->batch * r->train->width) / r->lm->last.tokens_per_s
                        : 0;
  return r->epochs_run > 0 && r->last.images_per_s > 0
             ? 1e3 * (double)o->batch / r->last.images_per_s : 0;
}

static void print_json(const options *o, const results *r) {
  const char *keys[] = {"device", "device_name", "model", "data", "data_source",
                        "optimizer"};
  const char *vals[] = {r->device, r->device_name, o->model, r->data, r->train->source,
                        dlrt_optimizer_name(o->opt.kind)};
  putchar('{');
  tool_json_strings(stdout, keys, vals, sizeof keys / sizeof *keys);
  printf("\"train_images\": %" PRId64 ", \"test_images\": %" PRId64 ", \"epochs\": %d, "
         "\"epochs_run\": %d, \"batch\": %" PRId64 ", \"seed\": %" PRIu64 ", \"threads\": ",
         r->train->count, r->test->count, o->epochs, r->epochs_run, o->batch, o->seed);
  if (o->threads >= 0)
    printf("%d", o->threads);
  else
    fputs("null", stdout);
  printf(", \"deterministic\": %s", o->deterministic ? "true" : "false");
  printf(", \"workers\": %d, \"prefetch\": %d, \"augment\": %s, \"accum\": %d, "
         "\"checkpoint\": \"%s\"", o->workers, o->prefetch, o->augment ? "true" : "false",
         o->accum, checkpoint_name(o->checkpoint));
  printf(", \"precision\": \"%s\", \"loss_scale\": ",
         o->precision == DLRT_F32 ? "fp32" : o->precision == DLRT_F16 ? "fp16" : "bf16");
  json_number(r->epochs_run > 0 ? r->last.loss_scale : NAN);
  printf(", \"skipped_steps\": %" PRId64, r->skipped_steps);
  printf(", \"mem_limit\": ");
  if (o->spill.device_budget)
    printf("%" PRIu64, o->spill.device_budget);
  else
    fputs("null", stdout);
  printf(", \"spilled_bytes\": %" PRIu64 ", \"spilled_to_disk_bytes\": %" PRIu64
         ", \"disk_written_bytes\": %" PRIu64 ", \"fetched_bytes\": %" PRIu64
         ", \"spill_slice_images\": %" PRId64, r->last.spilled_bytes, r->last.disk_bytes,
         r->last.disk_written_bytes, r->last.fetched_bytes, r->last.slice_images);
  /* Staging past the pinned pool's limit (DLRT_PINNED_LIMIT). */
  uint64_t pageable_peak = 0;
  for (int i = 0; i < r->n_devices; i++) {
    dlrt_pageable_stats pg;
    if (dlrt_pageable_stats_get(r->devices[i], &pg) == DLRT_OK) pageable_peak += pg.peak;
  }
  printf(", \"pageable_staging_peak_bytes\": %" PRIu64, pageable_peak);
  const char *nums[] = {"lr", "momentum", "weight_decay", "label_smoothing", "final_loss",
                        "final_accuracy", "test_loss", "test_accuracy", "train_images_per_s",
                        "stall_fraction", "loader_images_per_s", "transfer_stall_fraction"};
  int ran = r->epochs_run > 0;
  double vals_n[] = {o->opt.lr, o->opt.momentum, o->opt.weight_decay, o->label_smoothing,
                     ran ? r->last.loss : NAN, ran ? r->last.accuracy : NAN, r->eval.loss,
                     r->eval.accuracy, ran ? r->last.images_per_s : NAN,
                     ran ? r->last.stall_fraction : NAN,
                     ran ? r->last.loader_images_per_s : NAN,
                     ran && r->last.seconds > 0 ? r->last.transfer_ms / (r->last.seconds * 1e3)
                                                : NAN};
  for (size_t k = 0; k < sizeof nums / sizeof *nums; k++) {
    printf(", \"%s\": ", nums[k]);
    json_number(vals_n[k]);
  }
  printf(", \"planned_peak_bytes\": %" PRIu64 ", \"peak_device_bytes\": %" PRIu64
         ", \"params\": %" PRId64 ", \"epoch_losses\": [",
         r->info.planned_peak_bytes, r->info.measured_peak_bytes, r->info.params);
  for (int i = 0; i < r->epochs_run; i++) {
    fputs(i ? ", " : "", stdout);
    json_number(r->losses[i]);
  }
  fputs("], \"devices\": [", stdout);
  for (int i = 0; i < r->n_devices; i++) {
    dlrt_device_props p = {0};
    dlrt_mem_stats mem = {0};
    dlrt_device_props_get(r->devices[i], &p);
    dlrt_mem_stats_get(r->devices[i], &mem);
    const char *dk[] = {"device", "device_name"}, *dv[] = {dlrt_device_spec(r->devices[i]), p.name};
    fputs(i ? ", {" : "{", stdout);
    tool_json_strings(stdout, dk, dv, 2);
    printf("\"rows\": %" PRId64 ", \"peak_device_bytes\": %" PRIu64 "}", r->rows[i],
           mem.allocated.peak);
  }
  /* Tensor parallel: each peer's shard and bytes beside the whole model's
   * (the trainer's plan of one device). */
  fputs("], \"tensor_parallel\": [", stdout);
  for (int i = 0; i < r->n_tp; i++) {
    const dlrt_tp_peer_info *p = &r->tp[i];
    printf("%s{\"device\": \"%s\", \"rank\": %d, \"head_first\": %d, \"heads\": %d, "
           "\"vocab_first\": %" PRId64 ", \"vocab\": %" PRId64 ", \"param_bytes\": %" PRIu64
           ", \"state_bytes\": %" PRIu64 ", \"planned_peak_bytes\": %" PRIu64 "}",
           i ? ", " : "", p->device, p->rank, p->head_first, p->heads, p->vocab_first,
           p->vocab, p->param_bytes, p->state_bytes, p->planned_peak_bytes);
  }
  printf("], \"tensor_parallel_ranks\": %d, \"param_bytes\": %" PRIu64
         ", \"state_bytes\": %" PRIu64, r->tp_ranks, r->info.param_bytes, r->info.state_bytes);
  const dlrt_zero_info *z = &r->zero;
  printf(", \"zero\": {\"stage\": %d, \"replicas\": %d, \"param_bytes\": %" PRIu64
         ", \"grad_bytes\": %" PRIu64 ", \"optimizer_bytes\": %" PRIu64
         ", \"full_param_bytes\": %" PRIu64 ", \"full_grad_bytes\": %" PRIu64
         ", \"full_optimizer_bytes\": %" PRIu64 "}", z->stage, z->replicas, z->param_bytes,
         z->grad_bytes, z->optimizer_bytes, z->full_param_bytes, z->full_grad_bytes,
         z->full_optimizer_bytes);
  if (r->lm) {
    fputs(", \"round_losses\": [", stdout);
    for (int i = 0; i < r->lm->rounds; i++) {
      fputs(i ? ", " : "", stdout);
      json_number(r->lm->round_loss[i]);
    }
    fputs("], \"round_val_losses\": [", stdout);
    for (int i = 0; i < r->lm->rounds; i++) {
      fputs(i ? ", " : "", stdout);
      json_number(r->lm->round_val_loss[i]);
    }
    printf("], \"steps\": %" PRId64 ", \"steps_run\": %" PRId64 ", \"tokens_per_s\": ",
           o->steps, r->lm->steps_run);
    json_number(r->lm->steps_run ? r->lm->last.tokens_per_s : NAN);
    fputs(", \"val_loss\": ", stdout);
    json_number(r->lm->val_loss);
    fputs(", \"val_perplexity\": ", stdout);
    json_number(exp(r->lm->val_loss));
    fputs(", \"val_bpb\": ", stdout);
    json_number(r->lm->val_bpb);
    printf(", \"context\": %" PRId64, r->train->width);
    fputs(", \"seconds\": ", stdout);
  } else {
    fputs(", \"seconds\": ", stdout);
  }
  printf("%.3f", r->seconds);
  /* Parameter streaming (--offload params): its look-ahead as run (the
   * one param_ahead.c chose from the first step's timings unless
   * --spill-prefetch named it) and its traffic over the run; null when
   * nothing streams. */
  dlrt_param_offload_stats ps = {0};
  if (r->trainer) dlrt_exec_param_offload_stats(dlrt_trainer_executor(r->trainer), &ps);
  fputs(", \"stream\": ", stdout);
  if (ps.params_streamed)
    printf("{\"params_streamed\": %d, \"ahead\": %d, \"fetched_bytes\": %" PRIu64
           ", \"gradient_bytes\": %" PRIu64 ", \"peak_param_bytes\": %" PRIu64
           ", \"state_host_bytes\": %" PRIu64 ", \"state_disk_bytes\": %" PRIu64
           ", \"disk_read_bytes\": %" PRIu64 ", \"disk_written_bytes\": %" PRIu64
           ", \"disk_fetch_read_bytes\": %" PRIu64 ", \"disk_fetch_wait_ms\": %.3f}",
           ps.params_streamed, ps.ahead, ps.fetched_bytes, ps.gradient_bytes,
           ps.peak_param_bytes, ps.state_host_bytes, ps.state_disk_bytes, ps.disk_read_bytes,
           ps.disk_written_bytes, ps.disk_fetch_read_bytes, ps.disk_fetch_wait_ms);
  else
    fputs("null", stdout);
  if (r->trainer) {
    fputs(", \"spill_plan\": ", stdout);
    if (!dltrain_spill_plan_json(stdout, r->trainer, measured_step_ms(o, r), 0))
      fputs("null", stdout);
  }
  puts("}");
}

#ifdef DLRT_HAVE_MPI
/* ---------------------------------------------------------------- MPI */

/* Started by mpirun (Open MPI, MPICH or a PMIx launcher)? Only then does
 * dltrain join an MPI job: a plain run stays a plain process. */
static int launched_by_mpi(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

typedef struct {
  int rank;
  double timeout_s; /* DLRT_MPI_TIMEOUT, default 120 */
  /* The ranks this one sums gradients with (its data-parallel group) and
   * those it holds one model with (its tensor-parallel group): both
   * MPI_COMM_WORLD, unless --tensor-parallel N splits the N x R ranks
   * into R replicas of N shards (sub-communicators). */
  MPI_Comm data, tensor;
} mpi_job;

/* The gradient all-reduce, bucket by bucket while the backward pass goes on
 * (dlrt_trainer_set_allreduce_async): each bucket starts an MPI_Iallreduce,
 * and the waits are polled, so that a rank that died (or hangs) stops the
 * others with a message instead of a hang. */
static int mpi_allreduce_start(void *user, float *values, int64_t count, void **request) {
  mpi_job *job = user;
  MPI_Request *req = malloc(sizeof *req); /* freed by the wait */
  if (!req) {
    fprintf(stderr, "dltrain: rank %d: out of host memory\n", job->rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (MPI_Iallreduce(MPI_IN_PLACE, values, (int)count, MPI_FLOAT, MPI_SUM, job->data,
                     req) != MPI_SUCCESS) {
    fprintf(stderr, "dltrain: rank %d: MPI_Iallreduce failed\n", job->rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  *request = req;
  return 0;
}

static int mpi_allreduce_wait(void *user, void *request) {
  mpi_job *job = user;
  MPI_Request *req = request;
  double deadline = tool_now_s() + job->timeout_s;
  for (int done = 0;;) {
    MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (done) {
      free(req);
      return 0;
    }
    if (tool_now_s() > deadline) {
      fprintf(stderr, "dltrain: rank %d: the other ranks did not join the gradient all-reduce "
              "within %.0f s (did one stop? see its messages; DLRT_MPI_TIMEOUT sets the "
              "wait); stopping the job\n", job->rank, job->timeout_s);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    struct timespec pause = {0, 50000}; /* 50 us */
    nanosleep(&pause, NULL);
  }
}
#endif

#ifdef DLRT_HAVE_MPI
/* Tensor parallelism's collective across the ranks (one shard each): the
 * sum or maximum of `count` floats, in place, polled as the gradient
 * all-reduce's waits are (a rank that stopped ends the job with a message). */
static int mpi_collective(void *user, float *values, int64_t count, dlrt_collective_op op,
                          int64_t tag) {
  mpi_job *job = user;
  (void)tag; /* MPI orders the collectives itself */
  MPI_Request *req = malloc(sizeof *req); /* freed by the wait */
  if (!req || MPI_Iallreduce(MPI_IN_PLACE, values, (int)count, MPI_FLOAT,
                             op == DLRT_COLLECTIVE_MAX ? MPI_MAX : MPI_SUM, job->tensor,
                             req) != MPI_SUCCESS) {
    fprintf(stderr, "dltrain: rank %d: the tensor-parallel all-reduce failed\n", job->rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return mpi_allreduce_wait(user, req);
}

/* ZeRO's collectives (dlrt_zero_collectives): a sum to one rank, in place
 * there (MPI_Ireduce), and one rank's values to all (MPI_Ibcast), completed
 * by mpi_allreduce_wait. */
static int mpi_rooted_start(void *user, float *values, int64_t count, int root, void **request,
                            int reduce) {
  mpi_job *job = user;
  MPI_Request *req = malloc(sizeof *req); /* freed by the wait */
  if (!req) {
    fprintf(stderr, "dltrain: rank %d: out of host memory\n", job->rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  /* Over the data-parallel ranks (all of them, or those holding the same
   * tensor-parallel shard); root is a rank among them. */
  int me;
  MPI_Comm_rank(job->data, &me);
  int ok = reduce ? MPI_Ireduce(me == root ? MPI_IN_PLACE : values, values, (int)count,
                                MPI_FLOAT, MPI_SUM, root, job->data, req)
                  : MPI_Ibcast(values, (int)count, MPI_FLOAT, root, job->data, req);
  if (ok != MPI_SUCCESS) {
    fprintf(stderr, "dltrain: rank %d: MPI_I%s failed\n", job->rank, reduce ? "reduce" : "bcast");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  *request = req;
  return DLRT_OK;
}

static int mpi_reduce_start(void *user, float *values, int64_t count, int root, void **request) {
  return mpi_rooted_start(user, values, count, root, request, 1);
}

static int mpi_broadcast_start(void *user, float *values, int64_t count, int root,
                               void **request) {
  return mpi_rooted_start(user, values, count, root, request, 0);
}

/* The all-gather of dlrt_trainer_check_ranks. */
static int mpi_allgather(void *user, const void *mine, void *all, size_t bytes) {
  mpi_job *job = user;
  if (MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, job->data) !=
      MPI_SUCCESS) {
    fprintf(stderr, "dltrain: rank %d: MPI_Allgather failed\n", job->rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 0;
}

/* Whether this MPI reads device memory (a CUDA-aware Open MPI says so at
 * run time). */
static int mpi_cuda_aware(void) {
#if defined(OMPI_HAVE_MPI_EXT_CUDA) && OMPI_HAVE_MPI_EXT_CUDA
  return MPIX_Query_cuda_support();
#else
  return 0;
#endif
}
#endif


/* Ends the run when a dlrt call fails, saying what failed and why. */
#define TRY(call, what)                                                                   \
  do {                                                                                    \
    if ((rc = (call)) != DLRT_OK) {                                                       \
      status = tool_fail(what, rc);                                                       \
      goto done;                                                                          \
    }                                                                                     \
  } while (0)

int main(int argc, char **argv) {
  options o;
  double start = tool_now_s();
  dlrt_dataset data[2] = {{0}, {0}};
  dlrt_trainer_t *trainer = NULL;
  dlrt_device_t *dev = NULL;
  dlrt_device_props props;
  float *losses = NULL;
  results r = {0};
  int status, rc, generated, done = 0;

  if ((status = dltrain_parse_options(argc, argv, &o)) != 0) {
    if (status == TOOL_HELP) dltrain_usage(stdout);
    if (status == TOOL_VERSION) dltrain_version(stdout);
    return status < 0 ? 0 : tool_usage_fail(o.error);
  }
  FILE *log = o.json ? stderr : stdout; /* stdout ends with the JSON alone */
  int rank = 0, world = 1;
#ifdef DLRT_HAVE_MPI
  mpi_job job = {0, 120, MPI_COMM_NULL, MPI_COMM_NULL};
  int mpi = launched_by_mpi(), ranks_agree_to_stop = 0;
  if (mpi) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    job.rank = rank;
    job.data = job.tensor = MPI_COMM_WORLD;
    const char *timeout = getenv("DLRT_MPI_TIMEOUT");
    if (timeout && atof(timeout) > 0) job.timeout_s = atof(timeout);
    if (world > 1 && o.devices) {
      if (rank == 0) fputs("dltrain: --devices is for one process; under mpirun give each "
                           "rank its --device (or its --pipeline stages)\n", stderr);
      MPI_Finalize();
      return STATUS_USAGE;
    }
  }
#endif
  /* Under mpirun only rank 0 reports and saves; every rank trains. */
  FILE *quiet_log = rank > 0 ? fopen("/dev/null", "w") : NULL;
  if (quiet_log) log = quiet_log, o.quiet = 1;
  int tty = !o.quiet && isatty(fileno(log));

  TRY(dlrt_init(), "cannot start dlrt");
  /* A checkpoint that could never be written fails now, not after training. */
  if (o.save && !o.plan && rank == 0)
    TRY(dlrt_save_path_check(o.save), "cannot save the checkpoint there (--save)");
  dlrt_device_t *replicas[64];
  int n_replicas = 0;
  char device_list[512] = "";
  if (o.devices || o.pipeline) {
    snprintf(device_list, sizeof device_list, "%s", o.devices ? o.devices : o.pipeline);
    for (char *save = NULL, *spec = strtok_r(device_list, ",", &save); spec;
         spec = strtok_r(NULL, ",", &save)) {
      if (n_replicas == 64 || (rc = dlrt_device_open(spec, &replicas[n_replicas])) != DLRT_OK) {
        if (n_replicas == 64) fputs("dltrain: at most 64 devices\n", stderr);
        else tool_fail(NULL, rc), fputs("dltrain: run dlinfo to list devices\n", stderr);
        status = STATUS_USAGE;
        goto done;
      }
      n_replicas++;
    }
    if (n_replicas == 0 || (o.pipeline && n_replicas < 2)) {
      fprintf(stderr, "dltrain: --%s needs a list such as cpu,opencl:0%s\n",
              o.devices ? "devices" : "pipeline", o.pipeline ? " (two stages or more)" : "");
      status = STATUS_USAGE;
      goto done;
    }
    o.device = dlrt_device_spec(replicas[0]);
  }
  /* --tensor-parallel: DEV[@WEIGHT],... in this process, or N ranks. */
  dlrt_device_t *tp_devs[DLRT_TP_MAX];
  double tp_weights[DLRT_TP_MAX];
  int n_tp = 0, tp_ranks = 0, tp_weighted = 0;
  if (o.tensor_parallel && isdigit((unsigned char)o.tensor_parallel[0])) {
    char *end;
    long n = strtol(o.tensor_parallel, &end, 10);
    if (*end || n < 2 || world % n != 0) {
      if (rank == 0)
        fprintf(stderr, "dltrain: --tensor-parallel %s: a number is the MPI ranks each model "
                "is split over, a divisor of the ranks (%s%d here; N x R ranks train R "
                "data-parallel replicas); in one process give the devices, such as "
                "--tensor-parallel cpu,opencl:0\n", o.tensor_parallel,
                world > 1 ? "" : "run under mpirun -np N: ", world);
#ifdef DLRT_HAVE_MPI
      /* Every rank reaches the same verdict: all finalize, none aborts
       * (an abort could kill rank 0 before its message is out). */
      ranks_agree_to_stop = 1;
#endif
      status = STATUS_USAGE;
      goto done;
    }
    tp_ranks = (int)n;
#ifdef DLRT_HAVE_MPI
    /* Ranks r * N .. r * N + N - 1 hold replica r's N shards; shard k of
     * every replica sums its gradients with the others'. */
    if (world > tp_ranks) {
      MPI_Comm_split(MPI_COMM_WORLD, rank / tp_ranks, rank, &job.tensor);
      MPI_Comm_split(MPI_COMM_WORLD, rank % tp_ranks, rank, &job.data);
    }
#endif
  } else if (o.tensor_parallel) {
    char list[512];
    snprintf(list, sizeof list, "%s", o.tensor_parallel);
    for (char *save = NULL, *spec = strtok_r(list, ",", &save); spec;
         spec = strtok_r(NULL, ",", &save)) {
      char *at = strchr(spec, '@'), *end = NULL;
      if (at) *at = '\0';
      double w = at ? strtod(at + 1, &end) : 1.0;
      if (n_tp == DLRT_TP_MAX || (at && (*end || !(w > 0) || !isfinite(w)))) {
        fprintf(stderr, "dltrain: --tensor-parallel: %s\n", n_tp == DLRT_TP_MAX
                ? "at most 64 devices" : "a weight must be a positive number (cpu@1,opencl:0@3)");
        status = STATUS_USAGE;
        goto done;
      }
      if ((rc = dlrt_device_open(spec, &tp_devs[n_tp])) != DLRT_OK) {
        tool_fail(NULL, rc), fputs("dltrain: run dlinfo to list devices\n", stderr);
        status = STATUS_USAGE;
        goto done;
      }
      tp_weighted |= at != NULL;
      tp_weights[n_tp++] = w;
    }
    if (n_tp < 2) {
      fputs("dltrain: --tensor-parallel needs two devices or more, such as cpu,opencl:0 "
            "(or a number of MPI ranks)\n", stderr);
      status = STATUS_USAGE;
      goto done;
    }
    o.device = dlrt_device_spec(tp_devs[0]);
  }
  if (o.zero && o.tensor_parallel && (tp_ranks ? world / tp_ranks : world) < 2) {
    if (rank == 0)
      fputs("dltrain: --zero shards a split model's model states over its data-parallel "
            "replicas: run mpirun -np N x R with --tensor-parallel N (R > 1 replicas)\n",
            stderr);
#ifdef DLRT_HAVE_MPI
    ranks_agree_to_stop = 1; /* every rank says so: all finalize */
#endif
    status = STATUS_USAGE;
    goto done;
  }
  if (o.zero && !(o.devices && n_replicas > 1) && world < 2) {
    fputs("dltrain: --zero shards the model states of data-parallel replicas: give "
          "--devices with two devices or more, or run under mpirun -np N\n", stderr);
    status = STATUS_USAGE;
    goto done;
  }
  if (o.trace) TRY(dlrt_trace_start(o.trace), "cannot trace");
  if ((rc = dlrt_device_open(o.device, &dev)) != DLRT_OK) {
    tool_fail(NULL, rc);
    fputs("dltrain: run dlinfo to list devices\n", stderr);
    status = rc == DLRT_ERR_BAD_SPEC || rc == DLRT_ERR_NO_DEVICE ? STATUS_USAGE : STATUS_FAIL;
    goto done;
  }
  TRY(dlrt_device_props_get(dev, &props), "cannot read device properties");
  if (o.threads >= 0)
    TRY(dlrt_set_cpu_threads(o.threads), "cannot set the CPU threads");
  if (o.mem_limit &&
      (dlrt_parse_size(o.mem_limit, props.total_memory, &o.spill.device_budget) != DLRT_OK ||
       o.spill.device_budget == 0)) {
    fprintf(stderr, "dltrain: --mem-limit needs a size such as 512M, 2G or 25%%, not '%s'\n",
            o.mem_limit);
    status = STATUS_USAGE;
    goto done;
  }
  if (o.host_limit && (dlrt_parse_size(o.host_limit, 0, &o.spill.host_budget) != DLRT_OK ||
                       o.spill.host_budget == 0)) {
    fprintf(stderr, "dltrain: --host-limit needs a size such as 512M or 2G, not '%s'\n",
            o.host_limit);
    status = STATUS_USAGE;
    goto done;
  }
  /* Tensor parallel ranks train one model on the same batches: the data is
   * split between the replicas (world / N of them), not the shards. */
  int data_world = tp_ranks ? world / tp_ranks : world;
  int data_rank = tp_ranks ? rank / tp_ranks : rank;
  if ((status = load_data(&o, data_world, data, &generated)) != 0)
    goto done;
  dlrt_trainer_config cfg = {.model = o.model, .batch = o.batch, .opt = o.opt,
                             .seed = o.seed, .label_smoothing = o.label_smoothing,
                             .schedule = o.schedule, .warmup_steps = o.warmup,
                             .step_size = o.step_size, .gamma = o.gamma,
                             .total_steps = (int64_t)o.epochs *
                                            (data[0].count / o.batch / o.accum),
                             .accum = o.accum, .checkpoint = o.checkpoint,
                             .rank = data_rank, .world = data_world,
                             .spill = o.spill,
                             .clip_norm = o.clip_norm, .channels = data[0].channels,
                             .workers = o.workers, .prefetch = o.prefetch,
                             .augment = o.augment, .aug = o.aug,
                             .precision = o.precision, .loss_scaler = o.loss_scaler,
                             .gpt = o.gpt};
  if (o.gpt_model) cfg.total_steps = o.steps;
  if (o.offload_auto) {
    /* --offload auto: the placement for the budget, or the device. */
    uint64_t limit = dlrt_mem_get_limit(dev);
    uint64_t memory = cfg.spill.device_budget ? cfg.spill.device_budget
                      : limit                 ? limit
                                              : props.total_memory;
    if ((status = dltrain_offload_auto(&o, &cfg, &data[0], memory, o.plan ? stderr : log)) != 0)
      goto done;
  }
  if (o.plan && o.mem_limit) {
    /* The spill plan is made on the device: a trainer under the budget
     * (the planner profiles its step there). */
    TRY(dlrt_trainer_create(dev, &cfg, data[0].height, data[0].width, data[0].classes,
                            &trainer), "cannot plan the spilling");
    dltrain_plan_set_trainer(trainer);
  }
  if (o.plan) {
    uint64_t limit = dlrt_mem_get_limit(dev);
    uint64_t memory = o.device_memory ? o.device_memory : limit ? limit : props.total_memory;
    if (o.simulate) {
      status = 0;
      /* A GPT's splits predicted on the machine too (dltrain-split.c): with
       * --json their line before the simulate object's, which stays last. */
      if (o.gpt_model && o.json) status = run_split(&o, &cfg, &data[0], dev, memory, 0);
      if (status == 0) status = run_simulate(&o, &cfg, &data[0], dev);
      if (status == 0 && o.gpt_model && !o.json)
        status = run_split(&o, &cfg, &data[0], dev, memory, 0);
    } else
      status = run_plan(&o, &cfg, &data[0], dlrt_device_spec(dev), memory,
                        o.device_memory ? "--device-memory" : limit ? "the budget" : props.name);
    goto done;
  }
  /* Tensor parallel: the whole model is made (and resumed) in host memory,
   * then cut into the shards, so no device need hold it all at once. */
  dlrt_device_t *whole_on = dev;
  if ((n_tp > 0 || tp_ranks) && dlrt_device_open("cpu", &whole_on) != DLRT_OK) {
    dlrt_clear_error();
    whole_on = dev;
  }
  TRY(dlrt_trainer_create(whole_on, &cfg, data[0].height, data[0].width, data[0].classes,
                          &trainer), "cannot build the model");
  if (!o.quiet) dltrain_spill_plan_text(log, trainer, 0);
  if (o.resume)
    TRY(dlrt_trainer_load(trainer, o.resume, &done), "cannot resume");
  if (n_replicas > 0 && o.devices)
    TRY(dlrt_trainer_set_devices(trainer, replicas, n_replicas, NULL),
        "cannot spread the model over --devices");
  if (n_replicas > 0 && o.pipeline) {
    TRY(dlrt_trainer_set_pipeline(trainer, replicas, n_replicas, o.micro),
        "cannot cut the model into --pipeline stages");
    int first[16], last[16], n = 0;
    dlrt_trainer_stages(trainer, first, last, &n);
    fputs("pipeline", log);
    for (int i = 0; i < n && !o.gpt_model; i++)
      fprintf(log, "%s %s layers %d-%d", i ? "," : "", dlrt_device_spec(replicas[i]),
              first[i] + 1, last[i]);
    /* A GPT's stages: its blocks as the parameter names number them (h.0 ..). */
    for (int i = 0; i < n && o.gpt_model; i++)
      fprintf(log, "%s %s %sblocks %d-%d%s", i ? "," : "", dlrt_device_spec(replicas[i]),
              i == 0 ? "embeddings + " : "", first[i], last[i] - 1, i == n - 1 ? " + head" : "");
    fprintf(log, "; %d micro-batches of %" PRId64 "\n", o.micro, o.batch / o.micro);
  }
#ifdef DLRT_HAVE_MPI
  if (data_world < 2 || n_tp > 0 || tp_ranks) {
    /* One model split over the ranks: no data parallel all-reduce; replicas
     * of a split model take theirs once split (below). */
  } else if (world > 1 && !o.zero && !o.pipeline && mpi_cuda_aware() &&
             strcmp(props.backend, "cuda") == 0)
    /* CUDA-aware MPI: the gradients go from device memory, not the host. */
    TRY(dlrt_trainer_set_allreduce_device(trainer, mpi_allreduce_start, mpi_allreduce_wait, &job),
        "cannot train across the MPI ranks");
  else if (world > 1)
    TRY(dlrt_trainer_set_allreduce_async(trainer, mpi_allreduce_start, mpi_allreduce_wait, &job),
        "cannot train across the MPI ranks");
  if (o.zero && world > 1 && !tp_ranks && !n_tp) {
    dlrt_zero_collectives across = {mpi_reduce_start, mpi_broadcast_start, mpi_allreduce_wait,
                                    &job};
    TRY(dlrt_trainer_set_zero(trainer, o.zero, &across),
        "cannot shard the model states over the ranks (--zero)");
  }
  /* Every rank must train the same: all see the same verdict, so they stop
   * together (rank 0 says why) instead of training apart. */
  /* (Tensor parallel ranks compare within their data-parallel group, the
   * ranks of the same shard, before the split.) */
  if (data_world > 1 &&
      (rc = dlrt_trainer_check_ranks(trainer, &data[0], mpi_allgather, &job)) < 0) {
    status = rank == 0 ? tool_fail("the MPI ranks disagree", rc) : STATUS_FAIL;
    ranks_agree_to_stop = 1;
    goto done;
  }
  if (tp_ranks)
    TRY(dlrt_trainer_set_tensor_parallel_ranks(trainer, dev, rank % tp_ranks, tp_ranks, NULL,
                                               mpi_collective, &job),
        "cannot split the model over the MPI ranks (--tensor-parallel)");
#endif
  if (n_tp > 0)
    TRY(dlrt_trainer_set_tensor_parallel(trainer, tp_devs, n_tp,
                                         tp_weighted ? tp_weights : NULL),
        "cannot split the model over --tensor-parallel");
#ifdef DLRT_HAVE_MPI
  /* Replicas of a split model: each shard's gradients summed with the same
   * shard's of the other replicas, through the host. */
  if (data_world > 1 && (n_tp > 0 || tp_ranks))
    TRY(dlrt_trainer_set_allreduce_async(trainer, mpi_allreduce_start, mpi_allreduce_wait, &job),
        "cannot train the split model's replicas across the MPI ranks");
  /* ZeRO over them: each shard's model states over the ranks that hold it. */
  if (o.zero && data_world > 1 && (n_tp > 0 || tp_ranks)) {
    dlrt_zero_collectives across = {mpi_reduce_start, mpi_broadcast_start, mpi_allreduce_wait,
                                    &job};
    TRY(dlrt_trainer_set_zero(trainer, o.zero, &across),
        "cannot shard the split model's states over its replicas (--zero)");
  }
#endif
  if (o.zero && n_replicas > 0 && o.devices)
    TRY(dlrt_trainer_set_zero(trainer, o.zero, NULL),
        "cannot shard the model states over --devices (--zero)");
  TRY(dlrt_trainer_info(trainer, &r.info), "cannot read the trainer's figures");
  if (!(losses = calloc((size_t)o.epochs + 1, sizeof *losses))) {
    fputs("dltrain: out of host memory\n", stderr);
    status = STATUS_FAIL;
    goto done;
  }

  /* Say what was chosen, defaults included. */
  const char *env = getenv("DLRT_DEVICE");
  if ((rc = dlrt_trainer_tensor_parallel(trainer, r.tp, DLRT_TP_MAX, &r.n_tp)) < 0) {
    status = tool_fail("cannot read the tensor-parallel split", rc);
    goto done;
  }
  r.tp_ranks = tp_ranks;
  if (r.n_tp > 0) {
    fputs("tensor parallel", log);
    for (int i = 0; i < r.n_tp; i++) {
      const dlrt_tp_peer_info *p = &r.tp[i];
      fprintf(log, "%s %s%s heads %d-%d, vocabulary %" PRId64 "-%" PRId64 " (%.1f KiB of "
              "parameters)", i ? "," : "", p->device, tp_ranks ? " of this rank" : "",
              p->head_first, p->head_first + p->heads - 1, p->vocab_first,
              p->vocab_first + p->vocab - 1, (double)p->param_bytes / 1024.0);
    }
    if (tp_ranks) fprintf(log, "; rank %d of %d", rank % tp_ranks, tp_ranks);
    fputc('\n', log);
  }
  if (n_replicas > 0 && o.devices) {
    /* Devices that are CPUs share the host's cores (the cpu backend, PoCL):
     * data parallelism between them only divides those cores. */
    int cpus = 0;
    fputs("devices ", log);
    for (int i = 0; i < n_replicas; i++) {
      dlrt_device_props p = {0};
      dlrt_device_props_get(replicas[i], &p);
      cpus += p.kind == DLRT_DEVICE_CPU;
      fprintf(log, "%s %s (%s)", i ? "," : "", dlrt_device_spec(replicas[i]), p.name);
    }
    fputs(", from --devices\n", log);
    if (cpus > 1)
      fprintf(log, "note     %d of them are CPU devices sharing this host's cores: together "
              "they can train slower than one alone\n", cpus);
  } else {
    fprintf(log, "device   %s (%s), %s\n", dlrt_device_spec(dev), props.name,
            o.device && *o.device ? "from --device" : env && *env ? "from $DLRT_DEVICE" : "auto");
  }
  fprintf(log, "model    %s, %" PRId64 " parameters; %s lr %g, batch %" PRId64, o.model,
          r.info.params, dlrt_optimizer_name(o.opt.kind), o.opt.lr, o.batch);
  if (o.accum > 1)
    fprintf(log, " x %d accumulated (%" PRId64 " per update)", o.accum, o.batch * o.accum);
  fprintf(log, ", seed %" PRIu64 "\n", o.seed);
  if (o.precision != DLRT_F32) {
    dlrt_loss_scale_state ls = {0};
    dlrt_trainer_loss_scale(trainer, &ls);
    fprintf(log, "precision %s compute, fp32 master weights; ", dlrt_dtype_name(o.precision));
    if (ls.scale != 1.0f)
      fprintf(log, "dynamic loss scale from %g\n", ls.scale);
    else
      fputs("no loss scaling\n", log);
  }
  if (o.gpt_model)
    fprintf(log, "data     %s: windows of %" PRId64 " tokens, vocabulary %d%s; %" PRId64
            " validation windows\n", data[0].source, data[0].width, data[0].classes,
            dltrain_lm_byte_tokens() ? " (bytes)" : "", data[1].count);
  else
    fprintf(log, "data     %s: %" PRId64 " training and %" PRId64 " test images, %" PRId64
            " x %" PRId64 " x %" PRId64 ", %d classes%s\n", data[0].source, data[0].count,
            data[1].count, data[0].channels, data[0].height, data[0].width, data[0].classes,
            data[0].mapping ? ", mapped" : "");
  fprintf(log, "loader   %d worker%s, prefetch %d", o.workers, o.workers == 1 ? "" : "s",
          o.prefetch);
  if (o.aug.crop_padding) fprintf(log, ", crop pad %d", o.aug.crop_padding);
  if (o.aug.flip) fputs(", flip", log);
  if (o.aug.erase_p > 0) fprintf(log, ", erase %g", o.aug.erase_p);
  if (o.aug.std > 0) fprintf(log, ", normalize %g,%g", o.aug.mean, o.aug.std);
  fputc('\n', log);
  if (o.resume)
    fprintf(log, "resumed  %s after %d %s%s\n", o.resume, done, o.gpt_model ? "step" : "epoch",
            done == 1 ? "" : "s");
  if (o.deterministic && o.threads >= 0)
    fprintf(log, "deterministic: %d CPU thread%s%s\n", o.threads, o.threads == 1 ? "" : "s",
            strcmp(props.backend, "cpu") ? " (bit for bit on the CPU backend only)" : "");
  else if (o.deterministic)
    fputs("deterministic: CPU threads left as they are; give --threads N as well to repeat "
          "the run on another machine\n", log);

  lm_results lm = {0};
  if (o.gpt_model) {
    /* Tensor parallel ranks all take part in saving (the shards are
     * gathered); rank 0 writes. */
    if ((status = dltrain_lm_train(&o, trainer, data, done, log, tty, dev, data_rank,
                                   &lm)) != 0)
      goto done;
    r.lm = &lm;
    r.last = lm.last;
    r.eval = lm.eval;
    r.skipped_steps = lm.skipped_steps;
  }
  for (int epoch = done; !o.gpt_model && epoch < o.epochs; epoch++) {
    progress p = {log, tty, epoch + 1, o.epochs, 0, dev};
    rc = dlrt_trainer_epoch(trainer, &data[0], epoch, o.quiet ? NULL : on_progress, &p,
                            &r.last);
    if (tty)
      fputs("\r\033[K", log); /* the progress line gives way to the epoch's figures */
    TRY(rc, "training failed");
    losses[r.epochs_run++] = r.last.loss;
    r.skipped_steps += r.last.skipped_steps;
    if (r.last.skipped_steps > 0)
      fprintf(log, "loss scale: %" PRId64 " update%s skipped for inf/NaN gradients this epoch; "
              "scale now %g\n", r.last.skipped_steps, r.last.skipped_steps == 1 ? "" : "s",
              r.last.loss_scale);
    if (n_replicas > 0 && o.devices) {
      int64_t split[64];
      int n = 0;
      dlrt_trainer_split(trainer, split, &n);
      fputs("devices ", log);
      for (int i = 0; i < n; i++)
        fprintf(log, "%s%s %" PRId64 " rows", i ? ", " : " ", dlrt_device_spec(replicas[i]),
                split[i]);
      fprintf(log, " of each batch of %" PRId64 "\n", o.batch);
    }
    TRY(dlrt_trainer_evaluate(trainer, &data[1], &r.eval), "evaluation failed");
    fprintf(log, "epoch %d/%d  train loss %.4f accuracy %.2f%%  %.0f images/s  %.1f s  "
            "stall %.1f%%  |  test loss %.4f accuracy %.2f%%\n", epoch + 1, o.epochs,
            r.last.loss, 100.0 * r.last.accuracy, r.last.images_per_s, r.last.seconds,
            100.0 * r.last.stall_fraction, r.eval.loss, 100.0 * r.eval.accuracy);
    if (o.save && rank == 0)
      TRY(dlrt_trainer_save(trainer, o.save, epoch + 1), "cannot save the checkpoint");
  }
  if (o.gpt_model) {
    /* dltrain_lm_train said it all */
  } else if (r.epochs_run == 0) { /* nothing left to train: evaluate what there is */
    TRY(dlrt_trainer_evaluate(trainer, &data[1], &r.eval), "evaluation failed");
    fprintf(log, "nothing to train (%d of %d epochs done); test loss %.4f accuracy %.2f%%\n",
            done, o.epochs, r.eval.loss, 100.0 * r.eval.accuracy);
  } else if (o.save) {
    fprintf(log, "saved    %s after epoch %d\n", o.save, o.epochs);
  }
  TRY(dlrt_trainer_info(trainer, &r.info), "cannot read the trainer's figures");
  fprintf(log, "memory   planned peak %.1f MiB, measured peak %.1f MiB%s%s\n",
          (double)r.info.planned_peak_bytes / 1048576.0,
          (double)r.info.measured_peak_bytes / 1048576.0, o.checkpoint ? ", checkpointing " : "",
          o.checkpoint ? checkpoint_name(o.checkpoint) : "");
  /* Spilling within --mem-limit, or on its own within 85% of the device's
   * budget (DLRT_MEM_LIMIT), which the copies show. */
  uint64_t env_limit = dlrt_mem_get_limit(dev);
  int spilled = o.spill.device_budget ||
                (env_limit && (r.last.spilled_bytes || r.last.fetched_bytes));
  /* Streamed parameters: their traffic is the stream's, not spilling's.
   * (A GPT trains in steps, not epochs.) */
  int trained = r.epochs_run > 0 || lm.steps_run > 0;
  dlrt_param_offload_stats streamed = {0};
  dlrt_exec_param_offload_stats(dlrt_trainer_executor(trainer), &streamed);
  if (streamed.params_streamed && trained) {
    fprintf(log, "stream   %d parameters, %d nodes ahead: %.1f MiB of parameters in, %.1f MiB "
            "of gradients out (the last round)", streamed.params_streamed, streamed.ahead,
            (double)r.last.fetched_bytes / 1048576.0, (double)r.last.spilled_bytes / 1048576.0);
    if (streamed.state_disk_bytes)
      fprintf(log, "; optimizer state %.1f MiB in host memory, %.1f MiB on disk, %.1f MiB read "
              "and %.1f MiB written in all", (double)streamed.state_host_bytes / 1048576.0,
              (double)streamed.state_disk_bytes / 1048576.0,
              (double)streamed.disk_read_bytes / 1048576.0,
              (double)streamed.disk_written_bytes / 1048576.0);
    fputc('\n', log);
    spilled = 0;
  }
  if (spilled && trained)
    fprintf(log, "spill    budget %.1f MiB%s: %.1f MiB off the device (%.1f of it to disk), "
            "%.1f MiB back; %.1f MiB written to disk in all%s",
            (double)(o.spill.device_budget ? o.spill.device_budget : env_limit / 100 * 85) /
                1048576.0,
            o.spill.device_budget ? "" : " (85% of DLRT_MEM_LIMIT)",
            (double)r.last.spilled_bytes / 1048576.0, (double)r.last.disk_bytes / 1048576.0,
            (double)r.last.fetched_bytes / 1048576.0,
            (double)r.last.disk_written_bytes / 1048576.0, r.last.slice_images ? "" : "\n");
  if (spilled && trained && r.last.slice_images) /* the end of the spill line */
    fprintf(log, "; convolution blocks in slices of %" PRId64 " images\n", r.last.slice_images);
  dlrt_spill_plan sp;
  if (dlrt_exec_spill_plan(dlrt_trainer_executor(trainer), &sp) == DLRT_OK && sp.decisions) {
    r.train = &data[0];
    r.lm = o.gpt_model ? &lm : NULL;
    fprintf(log, "step     predicted %.1f ms (%s), measured %.1f ms\n", sp.predicted.step_ms,
            dlrt_plan_strategy_name(sp.chosen), measured_step_ms(&o, &r));
  }
  TRY(dlrt_trainer_zero_info(trainer, &r.zero), "cannot read the replicas' model states");
  /* (A pipeline's figures are its stages' sum.) */
  if (r.zero.replicas > 1) {
    const dlrt_zero_info *z = &r.zero;
    uint64_t held = z->param_bytes + z->grad_bytes + z->optimizer_bytes;
    uint64_t full = z->full_param_bytes + z->full_grad_bytes + z->full_optimizer_bytes;
    fprintf(log, "zero     stage %d, %d replicas: each holds parameters %.2f MiB, gradients "
            "%.2f MiB, optimizer state %.2f MiB = %.2f MiB (%.3fx of unsharded %.2f MiB)\n",
            z->stage, z->replicas, (double)z->param_bytes / 1048576.0,
            (double)z->grad_bytes / 1048576.0, (double)z->optimizer_bytes / 1048576.0,
            (double)held / 1048576.0, full ? (double)held / (double)full : 0.0,
            (double)full / 1048576.0);
  }
  if (world > 1 && tp_ranks && data_world == 1)
    fprintf(log, "mpi      %d ranks, one shard of the model each, on the same %" PRId64
            " windows per step\n", world, o.batch);
  else if (world > 1 && tp_ranks)
    fprintf(log, "mpi      %d ranks: %d data-parallel replicas of %d shards (one a rank), "
            "%" PRId64 " windows per replica per step (%" PRId64 " per update)\n", world,
            data_world, tp_ranks, o.batch, o.batch * data_world);
  else if (world > 1)
    fprintf(log, "mpi      %d ranks, %" PRId64 " %s per rank per step (%" PRId64
            " per update)\n", world, o.batch, o.gpt_model ? "windows" : "images",
            o.batch * world);
  if (o.json && rank == 0) {
    r.device = dlrt_device_spec(dev);
    r.device_name = props.name;
    r.devices = n_tp > 0 ? tp_devs : n_replicas > 0 ? replicas : &dev;
    r.n_devices = n_tp > 0 ? n_tp : n_replicas > 0 ? n_replicas : 1;
    int n_split = 0;
    dlrt_trainer_split(trainer, r.rows, &n_split);
    for (int i = 0; i < r.n_devices; i++)
      if (!o.devices || i >= n_split) r.rows[i] = o.batch; /* a stage, or the one device */
    r.data = generated ? "generated" : o.data;
    r.train = &data[0];
    r.test = &data[1];
    r.losses = losses;
    r.trainer = trainer;
    r.seconds = tool_now_s() - start;
    print_json(&o, &r);
  }

done:
  if (o.trace) dlrt_trace_stop();
  if (quiet_log) fclose(quiet_log);
#ifdef DLRT_HAVE_MPI
  if (mpi) {
    /* The others stop too (unless all stop on the same verdict). */
    if (status != 0 && world > 1 && !ranks_agree_to_stop) MPI_Abort(MPI_COMM_WORLD, status);
    if (job.data != MPI_COMM_WORLD) MPI_Comm_free(&job.data);
    if (job.tensor != MPI_COMM_WORLD) MPI_Comm_free(&job.tensor);
    MPI_Finalize();
  }
#endif
  free(losses);
  dlrt_trainer_destroy(trainer);
  dlrt_dataset_free(&data[0]);
  dlrt_dataset_free(&data[1]);
  dltrain_lm_free();
  dlrt_shutdown();
  return status;
}
