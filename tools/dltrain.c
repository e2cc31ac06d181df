/* dltrain — trains an image classifier (an MLP, a CNN or a model file) on
 * Fashion-MNIST, an MNIST-style folder or generated data, on any dlrt device,
 * and evaluates it on the test split after every epoch; public API only.
 * Exit status: 0 success, 1 a dlrt call failed (data, model file, checkpoint,
 * training), 2 usage error or a device spec that opens nothing. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <getopt.h>
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

/* The generated stand-in has Fashion-MNIST's sizes. */
enum { GEN_TRAIN = 60000, GEN_TEST = 10000, GEN_CLASSES = 10 };

static void usage(FILE *out) {
  fputs("Usage: dltrain [OPTION]...\n"
        "Trains an image classifier with dlrt and evaluates it on the test set.\n"
        "With no options: an MLP on Fashion-MNIST for one epoch on the default device.\n\n"
        "  -m, --model mlp|cnn|FILE   the network: a preset or a model file (default mlp)\n"
        "      --data fashion-mnist|DIR|FILE|generated\n"
        "                             the images (default fashion-mnist, falling back to\n"
        "                             generated data when the package is not installed);\n"
        "                             DIR holds train.dlrec and test.dlrec (see dlrecord)\n"
        "                             or the MNIST-family IDX files, plain or .gz\n"
        "      --mmap                 map record files instead of reading them (sets\n"
        "                             larger than memory)\n"
        "  -d, --device SPEC          cpu, cpu:0, opencl:N, cuda:N or auto (default:\n"
        "                             $DLRT_DEVICE, else auto)\n"
        "      --pipeline A,B,...     pipeline parallel: the model's layers cut into\n"
        "                             stages on these devices (GPipe schedule)\n"
        "      --micro-batches M      micro-batches per batch with --pipeline (default 4)\n"
        "      --devices A,B,...      data parallel over these devices (any backends):\n"
        "                             each batch split between them in proportion to\n"
        "                             their measured speed, gradients combined, one\n"
        "                             update everywhere\n"
        "  -e, --epochs N             epochs in all, counting resumed ones (default 1)\n"
        "  -b, --batch N              images per step (default 64)\n"
        "      --precision fp32|fp16|bf16\n"
        "                             mixed precision: fp32 master weights and optimizer\n"
        "                             state; matmuls, convolutions and activations in\n"
        "                             fp16 or bf16 (fp32 accumulation); losses, softmax\n"
        "                             and normalisation in fp32 (default fp32)\n"
        "      --loss-scale off|dynamic|INIT[:INTERVAL[:GROWTH[:BACKOFF]]]\n"
        "                             dynamic loss scaling (fp16: on, 65536:2000:2:0.5):\n"
        "                             a step with inf/NaN gradients is skipped and the\n"
        "                             scale times BACKOFF; INTERVAL clean steps in a row\n"
        "                             multiply it by GROWTH\n"
        "      --accum K              accumulate the gradients of K batches of N per\n"
        "                             update: the update of one batch of K x N in the\n"
        "                             memory of N (default 1)\n"
        "      --optimizer sgd|adam|adamw   (default adam)\n"
        "      --lr X                 learning rate (default: the optimizer's, as in\n"
        "                             torch.optim: sgd 0.01, adam and adamw 0.001)\n"
        "      --momentum X           SGD momentum in [0, 1) (default 0)\n"
        "      --weight-decay X       L2 (sgd, adam) or decoupled (adamw; default 0.01)\n"
        "      --label-smoothing X    in [0, 1) (default 0)\n"
        "      --schedule constant|cosine|step:N[:GAMMA]\n"
        "                             learning rate per step: constant (default), cosine\n"
        "                             decay to 0 over the run, or times GAMMA (default\n"
        "                             0.1) every N steps\n"
        "      --warmup N             rise linearly to the learning rate over N steps\n"
        "      --clip-norm X          clip gradients to a global L2 norm of X\n"
        "      --seed N               parameters, shuffling and generated data (default 1)\n"
        "      --threads N            CPU backend threads (0: all cores)\n"
        "      --deterministic        say how the run can be repeated bit for bit (the CPU\n"
        "                             backend is deterministic for a fixed --threads)\n"
        "      --save FILE            write a checkpoint (safetensors) after each epoch\n"
        "      --resume FILE          continue from a checkpoint up to --epochs in all\n"
        "      --checkpoint none|sqrt|every:N|auto\n"
        "                             gradient checkpointing: recompute activations in\n"
        "                             the backward pass, in segments of ceil(sqrt(n))\n"
        "                             or N forward nodes, or the longest segments that\n"
        "                             fit the device (default none)\n"
        "      --mem-limit SIZE       device memory budget of the run (512M, 2G, or 25%\n"
        "                             of the device): storages spill to pinned host\n"
        "                             memory beyond it, moved ahead of need\n"
        "      --host-limit SIZE      with --mem-limit: host copies beyond SIZE go to a\n"
        "                             file in $DLRT_SPILL_DIR (default: no bound)\n"
        "      --offload none|activations|optimizer|all\n"
        "                             with --mem-limit: also move saved activations and/\n"
        "                             or optimizer state off the device until needed\n"
        "                             (default none: only when the budget needs room)\n"
        "      --spill-prefetch N     nodes to look ahead for copies back (default 4;\n"
        "                             0: fetch when needed)\n"
        "      --trace FILE           write a Chrome trace of the run (kernels, spill\n"
        "                             copies, device memory): open it in\n"
        "                             https://ui.perfetto.dev; slows the run down\n"
        "      --workers N            loader threads that decode and augment (default 2;\n"
        "                             0: in the training thread)\n"
        "      --prefetch N           batches made ready ahead in pinned memory and on\n"
        "                             the device (default 2; 0: load each when needed)\n"
        "      --augment              random crop (padding 2) and horizontal flip\n"
        "      --crop-pad N           random crop after padding each side by N pixels\n"
        "      --flip                 random horizontal flip\n"
        "      --erase P              random erasing with probability P\n"
        "      --normalize MEAN,STD   (x - MEAN) / STD on pixels scaled to [0, 1], in\n"
        "                             training and evaluation\n"
        "      --plan                 train nothing: print the memory a training step\n"
        "                             needs (parameters, gradients, optimizer state,\n"
        "                             activations, loader buffers, peak) and the largest\n"
        "                             batch that fits the device\n"
        "      --device-memory SIZE   plan for a device of SIZE (40G, 80G, ...) instead\n"
        "      --what-if N            with --plan: the memory a model of N parameters\n"
        "                             (175e9, 7B) needs per strategy, and the devices\n"
        "      --limit N              use only the first N training and N/6 test images\n"
        "                             (quick runs and tests)\n"
        "  -j, --json                 end stdout with one JSON object of the results (its\n"
        "                             epoch_losses: the epochs this run trained, resumed\n"
        "                             ones left out); the other output goes to stderr\n"
        "  -q, --quiet                no progress display\n"
        "  -h, --help                 show this help and exit\n"
        "  -V, --version              show the dlrt version and exit\n\n"
        "Under mpirun (when built with MPI) each rank trains on its shard of the data with\n"
        "its --batch, gradients are all-reduced (global batch: ranks x N), rank 0 alone\n"
        "reports and saves; DLRT_MPI_TIMEOUT (seconds, default 120) bounds the wait for\n"
        "the other ranks.\n"
        "Environment: DLRT_DEVICE, DLRT_BACKEND, DLRT_MEM_LIMIT (see dlinfo --help);\n"
        "DLRT_TRACE=FILE (as --trace); DLRT_SPILL_DIR (the spill file's folder).\n",
        out);
}

int fail(const char *what, int rc) {
  const char *detail = dlrt_last_error();
  fprintf(stderr, "dltrain: %s%s%s\n", what ? what : "", what ? ": " : "",
          detail && *detail ? detail : dlrt_strerror(rc));
  return STATUS_FAIL;
}

/* An integer in [min, max] for --NAME; says why not on stderr. */
static int parse_int(const char *name, const char *text, long long min, long long max,
                     long long *out) {
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno || end == text || *end || v < min || v > max) {
    fprintf(stderr, "dltrain: --%s needs an integer from %lld to %lld, not '%s'\n", name, min,
            max, text);
    return 0;
  }
  *out = v;
  return 1;
}

/* A finite number in [min, max) for --NAME, or in (min, max) when open_min;
 * `range` says which in words. */
static int parse_real(const char *name, const char *text, double min, double max,
                      int open_min, const char *range, float *out) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (errno || end == text || *end || !isfinite(v) || v < min || (open_min && v == min) ||
      v >= max) {
    fprintf(stderr, "dltrain: --%s needs a number %s, not '%s'\n", name, range, text);
    return 0;
  }
  *out = (float)v;
  return 1;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Loads the training (d[0]) and test (d[1]) splits --data names. A missing
 * Fashion-MNIST package falls back to generated data; a folder named
 * explicitly must load. *generated says which was used. */
static int load_data(const options *o, dlrt_dataset d[2], int *generated) {
  int rc;
  *generated = strcmp(o->data, "generated") == 0;
  if (!*generated) {
    int flags = o->mmap ? DLRT_DATASET_MMAP : 0;
    if ((rc = dlrt_dataset_load_flags(o->data, 0, flags, &d[0])) == DLRT_OK)
      rc = dlrt_dataset_load_flags(o->data, 1, flags, &d[1]);
    if (rc == DLRT_ERR_NOT_FOUND && strcmp(o->data, "fashion-mnist") == 0) {
      fprintf(stderr, "dltrain: Fashion-MNIST not found (%s); training on generated data "
              "instead\n", dlrt_last_error());
      dlrt_dataset_free(&d[0]);
      *generated = 1;
    } else if (rc != DLRT_OK) {
      return fail("cannot load the data", rc);
    }
  }
  /* Different seeds for the two splits: the classes are the same patterns,
   * the samples differ. */
  if (*generated && ((rc = dlrt_dataset_generate(GEN_TRAIN, GEN_CLASSES, o->seed, &d[0])) ||
                     (rc = dlrt_dataset_generate(GEN_TEST, GEN_CLASSES, ~o->seed, &d[1]))))
    return fail("cannot generate data", rc);
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

/* Writes s as a JSON string: quote, backslash and control characters escaped. */
void json_string(const char *s) {
  putchar('"');
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if (*p == '"' || *p == '\\')
      printf("\\%c", *p);
    else if (*p < 0x20 || *p == 0x7f)
      printf("\\u%04x", *p);
    else
      putchar(*p);
  }
  putchar('"');
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
  dlrt_exec_info info;
  double seconds;
  int64_t skipped_steps; /* loss scaling, over this invocation's epochs */
} results;

static void print_json(const options *o, const results *r) {
  const char *keys[] = {"device", "device_name", "model", "data", "data_source",
                        "optimizer"};
  const char *vals[] = {r->device, r->device_name, o->model, r->data, r->train->source,
                        dlrt_optimizer_name(o->opt.kind)};
  putchar('{');
  for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
    printf("\"%s\": ", keys[k]);
    json_string(vals[k]);
    fputs(", ", stdout);
  }
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
         ", \"fetched_bytes\": %" PRIu64, r->last.spilled_bytes, r->last.disk_bytes,
         r->last.fetched_bytes);
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
  printf("], \"seconds\": %.3f}\n", r->seconds);
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
  if (MPI_Iallreduce(MPI_IN_PLACE, values, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
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
  double deadline = now_s() + job->timeout_s;
  for (int done = 0;;) {
    MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (done) {
      free(req);
      return 0;
    }
    if (now_s() > deadline) {
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

/* Parses the command line into *o; 0, or the exit status (-1: exit 0 at once). */
static int parse_options(int argc, char **argv, options *o) {
  enum { OPT_DATA = 256, OPT_OPTIMIZER, OPT_LR, OPT_MOMENTUM, OPT_WEIGHT_DECAY,
         OPT_SMOOTHING, OPT_SEED, OPT_THREADS, OPT_SAVE, OPT_RESUME, OPT_DETERMINISTIC,
         OPT_LIMIT, OPT_SCHEDULE, OPT_WARMUP, OPT_CLIP, OPT_WORKERS, OPT_PREFETCH,
         OPT_AUGMENT, OPT_CROP_PAD, OPT_FLIP, OPT_ERASE, OPT_NORMALIZE, OPT_MMAP, OPT_ACCUM,
         OPT_PLAN, OPT_DEVICE_MEMORY, OPT_WHAT_IF, OPT_CHECKPOINT, OPT_MEM_LIMIT,
         OPT_HOST_LIMIT, OPT_OFFLOAD, OPT_SPILL_PREFETCH, OPT_TRACE, OPT_DEVICES, OPT_PIPELINE,
         OPT_MICRO, OPT_PRECISION, OPT_LOSS_SCALE };
  static const struct option longopts[] = {
      {"model", required_argument, NULL, 'm'},   {"data", required_argument, NULL, OPT_DATA},
      {"device", required_argument, NULL, 'd'},  {"epochs", required_argument, NULL, 'e'},
      {"batch", required_argument, NULL, 'b'},
      {"optimizer", required_argument, NULL, OPT_OPTIMIZER},
      {"lr", required_argument, NULL, OPT_LR},
      {"momentum", required_argument, NULL, OPT_MOMENTUM},
      {"weight-decay", required_argument, NULL, OPT_WEIGHT_DECAY},
      {"label-smoothing", required_argument, NULL, OPT_SMOOTHING},
      {"seed", required_argument, NULL, OPT_SEED},
      {"threads", required_argument, NULL, OPT_THREADS},
      {"save", required_argument, NULL, OPT_SAVE},
      {"resume", required_argument, NULL, OPT_RESUME},
      {"deterministic", no_argument, NULL, OPT_DETERMINISTIC},
      {"limit", required_argument, NULL, OPT_LIMIT},
      {"schedule", required_argument, NULL, OPT_SCHEDULE},
      {"warmup", required_argument, NULL, OPT_WARMUP},
      {"clip-norm", required_argument, NULL, OPT_CLIP},
      {"workers", required_argument, NULL, OPT_WORKERS},
      {"prefetch", required_argument, NULL, OPT_PREFETCH},
      {"augment", no_argument, NULL, OPT_AUGMENT},
      {"crop-pad", required_argument, NULL, OPT_CROP_PAD},
      {"flip", no_argument, NULL, OPT_FLIP},
      {"erase", required_argument, NULL, OPT_ERASE},
      {"normalize", required_argument, NULL, OPT_NORMALIZE},
      {"mmap", no_argument, NULL, OPT_MMAP},
      {"accum", required_argument, NULL, OPT_ACCUM},
      {"plan", no_argument, NULL, OPT_PLAN},
      {"checkpoint", required_argument, NULL, OPT_CHECKPOINT},
      {"mem-limit", required_argument, NULL, OPT_MEM_LIMIT},
      {"host-limit", required_argument, NULL, OPT_HOST_LIMIT},
      {"offload", required_argument, NULL, OPT_OFFLOAD},
      {"spill-prefetch", required_argument, NULL, OPT_SPILL_PREFETCH},
      {"trace", required_argument, NULL, OPT_TRACE},
      {"devices", required_argument, NULL, OPT_DEVICES},
      {"pipeline", required_argument, NULL, OPT_PIPELINE},
      {"micro-batches", required_argument, NULL, OPT_MICRO},
      {"precision", required_argument, NULL, OPT_PRECISION},
      {"loss-scale", required_argument, NULL, OPT_LOSS_SCALE},
      {"device-memory", required_argument, NULL, OPT_DEVICE_MEMORY},
      {"what-if", required_argument, NULL, OPT_WHAT_IF},
      {"json", no_argument, NULL, 'j'},          {"quiet", no_argument, NULL, 'q'},
      {"help", no_argument, NULL, 'h'},          {"version", no_argument, NULL, 'V'},
      {NULL, 0, NULL, 0}};
  /* Learning rate, momentum and weight decay wait for the optimizer's
   * defaults; NAN: not given. */
  float lr = NAN, momentum = NAN, decay = NAN;
  dlrt_optimizer_kind kind = DLRT_OPT_ADAM;
  long long v;
  int c, ok = 1;

  while (ok && (c = getopt_long(argc, argv, "m:d:e:b:jqhV", longopts, NULL)) != -1) {
    switch (c) {
    case 'm': o->model = optarg; break;
    case OPT_DATA: o->data = optarg; break;
    case 'd': o->device = optarg; break;
    case 'e':
      if ((ok = parse_int("epochs", optarg, 0, 1000000, &v))) o->epochs = (int)v;
      break;
    case 'b':
      if ((ok = parse_int("batch", optarg, 1, 1 << 20, &v))) o->batch = v;
      break;
    case OPT_LIMIT:
      if ((ok = parse_int("limit", optarg, 1, INT64_MAX, &v))) o->limit = v;
      break;
    case OPT_SEED:
      if ((ok = parse_int("seed", optarg, 0, INT64_MAX, &v))) o->seed = (uint64_t)v;
      break;
    case OPT_THREADS:
      if ((ok = parse_int("threads", optarg, 0, 4096, &v))) o->threads = (int)v;
      break;
    case OPT_LR: ok = parse_real("lr", optarg, 0, HUGE_VAL, 1, "> 0", &lr); break;
    case OPT_MOMENTUM: ok = parse_real("momentum", optarg, 0, 1, 0, "in [0, 1)", &momentum); break;
    case OPT_WEIGHT_DECAY: ok = parse_real("weight-decay", optarg, 0, HUGE_VAL, 0, ">= 0", &decay); break;
    case OPT_SMOOTHING:
      ok = parse_real("label-smoothing", optarg, 0, 1, 0, "in [0, 1)", &o->label_smoothing);
      break;
    case OPT_OPTIMIZER:
      ok = 0;
      for (int k = DLRT_OPT_SGD; k <= DLRT_OPT_ADAMW && !ok; k++)
        if (strcmp(optarg, dlrt_optimizer_name((dlrt_optimizer_kind)k)) == 0)
          kind = (dlrt_optimizer_kind)k, ok = 1;
      if (!ok)
        fprintf(stderr, "dltrain: unknown optimizer '%s' (sgd, adam or adamw)\n", optarg);
      break;
    case OPT_SCHEDULE: {
      long long n = 0;
      double gamma = 0.1;
      int used = 0;
      if (strcmp(optarg, "constant") == 0) {
        o->schedule = DLRT_LR_CONSTANT;
      } else if (strcmp(optarg, "cosine") == 0) {
        o->schedule = DLRT_LR_COSINE;
      } else if ((sscanf(optarg, "step:%lld%n", &n, &used) == 1 && !optarg[used] && n > 0) ||
                 (sscanf(optarg, "step:%lld:%lf%n", &n, &gamma, &used) == 2 && !optarg[used] &&
                  n > 0 && gamma > 0)) {
        o->schedule = DLRT_LR_STEP;
        o->step_size = n;
        o->gamma = (float)gamma;
      } else {
        fprintf(stderr, "dltrain: --schedule %s: use constant, cosine or step:N[:GAMMA]\n",
                optarg);
        ok = 0;
      }
      break;
    }
    case OPT_WARMUP:
      if ((ok = parse_int("warmup", optarg, 0, INT64_MAX, &v))) o->warmup = v;
      break;
    case OPT_CLIP: ok = parse_real("clip-norm", optarg, 0, HUGE_VAL, 1, "> 0", &o->clip_norm); break;
    case OPT_WORKERS:
      if ((ok = parse_int("workers", optarg, 0, 256, &v))) o->workers = (int)v;
      break;
    case OPT_PREFETCH:
      if ((ok = parse_int("prefetch", optarg, 0, 64, &v))) o->prefetch = (int)v;
      break;
    case OPT_AUGMENT:
      o->augment = 1, o->aug.crop_padding = 2, o->aug.flip = 1;
      break;
    case OPT_CROP_PAD:
      if ((ok = parse_int("crop-pad", optarg, 0, 64, &v))) o->augment = 1, o->aug.crop_padding = (int)v;
      break;
    case OPT_FLIP: o->augment = 1, o->aug.flip = 1; break;
    case OPT_ERASE:
      ok = parse_real("erase", optarg, 0, 1, 0, "in [0, 1)", &o->aug.erase_p);
      o->augment |= ok;
      break;
    case OPT_NORMALIZE: {
      double mean, std;
      int used = 0;
      ok = sscanf(optarg, "%lf,%lf%n", &mean, &std, &used) == 2 && !optarg[used] &&
           isfinite(mean) && isfinite(std) && std > 0;
      if (ok)
        o->aug.mean = (float)mean, o->aug.std = (float)std;
      else
        fprintf(stderr, "dltrain: --normalize needs MEAN,STD with STD > 0, not '%s'\n", optarg);
      break;
    }
    case OPT_MMAP: o->mmap = 1; break;
    case OPT_PLAN: o->plan = 1; break;
    case OPT_MEM_LIMIT: o->mem_limit = optarg; break;
    case OPT_TRACE: o->trace = optarg; break;
    case OPT_DEVICES: o->devices = optarg; break;
    case OPT_PIPELINE: o->pipeline = optarg; break;
    case OPT_MICRO:
      if ((ok = parse_int("micro-batches", optarg, 1, 1 << 20, &v))) o->micro = (int)v;
      break;
    case OPT_PRECISION:
      if (strcmp(optarg, "fp32") == 0 || strcmp(optarg, "f32") == 0)
        o->precision = DLRT_F32;
      else if (strcmp(optarg, "fp16") == 0 || strcmp(optarg, "f16") == 0)
        o->precision = DLRT_F16;
      else if (strcmp(optarg, "bf16") == 0)
        o->precision = DLRT_BF16;
      else {
        fprintf(stderr, "dltrain: --precision %s: use fp32, fp16 or bf16\n", optarg);
        ok = 0;
      }
      break;
    case OPT_LOSS_SCALE: {
      /* off | dynamic | INIT[:INTERVAL[:GROWTH[:BACKOFF]]] */
      dlrt_loss_scaler *ls = &o->loss_scaler;
      double init = 0, growth = 0, backoff = 0;
      long long interval = 0;
      int used = 0, fields = 0;
      if (strcmp(optarg, "off") == 0) {
        ls->enabled = -1;
      } else if (strcmp(optarg, "dynamic") == 0) {
        ls->enabled = 1;
      } else if ((fields = sscanf(optarg, "%lf%n:%lld%n:%lf%n:%lf%n", &init, &used, &interval,
                                  &used, &growth, &used, &backoff, &used)) >= 1 &&
                 !optarg[used] && init > 0 && isfinite(init) &&
                 (fields < 2 || (interval >= 1 && interval <= INT32_MAX)) &&
                 (fields < 3 || (growth >= 1 && isfinite(growth))) &&
                 (fields < 4 || (backoff > 0 && backoff <= 1))) {
        ls->enabled = 1;
        ls->init_scale = (float)init;
        ls->growth_interval = (int)interval;
        ls->growth_factor = (float)growth;
        ls->backoff_factor = (float)backoff;
      } else {
        fprintf(stderr, "dltrain: --loss-scale %s: use off, dynamic, or INIT[:INTERVAL[:GROWTH"
                "[:BACKOFF]]] (such as 65536:2000:2:0.5)\n", optarg);
        ok = 0;
      }
      break;
    }
    case OPT_HOST_LIMIT: o->host_limit = optarg; break;
    case OPT_OFFLOAD: {
      static const char *const names[] = {"none", "activations", "optimizer", "all"};
      ok = 0;
      for (int k = 0; k < 4 && !ok; k++)
        if (strcmp(optarg, names[k]) == 0) o->spill.policy = (dlrt_offload_policy)k, ok = 1;
      if (!ok)
        fprintf(stderr, "dltrain: --offload %s: use none, activations, optimizer or all\n",
                optarg);
      break;
    }
    case OPT_SPILL_PREFETCH:
      if ((ok = parse_int("spill-prefetch", optarg, 0, 1024, &v))) o->spill.prefetch = (int)v;
      break;
    case OPT_CHECKPOINT: {
      long long every = 0;
      int used = 0;
      if (strcmp(optarg, "none") == 0)
        o->checkpoint = 0;
      else if (strcmp(optarg, "sqrt") == 0)
        o->checkpoint = DLRT_CHECKPOINT_SQRT;
      else if (strcmp(optarg, "auto") == 0)
        o->checkpoint = DLRT_CHECKPOINT_AUTO;
      else if (sscanf(optarg, "every:%lld%n", &every, &used) == 1 && !optarg[used] &&
               every >= 1 && every <= 1000000)
        o->checkpoint = (int)every;
      else {
        fprintf(stderr, "dltrain: --checkpoint %s: use none, sqrt, every:N (N >= 1) or auto\n",
                optarg);
        ok = 0;
      }
      break;
    }
    case OPT_DEVICE_MEMORY:
      ok = dlrt_parse_size(optarg, 0, &o->device_memory) == DLRT_OK && o->device_memory > 0;
      if (!ok)
        fprintf(stderr, "dltrain: --device-memory needs a size such as 40G or 512M, not '%s'\n",
                optarg);
      break;
    case OPT_WHAT_IF: {
      char *end;
      double count = strtod(optarg, &end);
      double unit = *end == 'K' ? 1e3 : *end == 'M' ? 1e6 : *end == 'B' || *end == 'G' ? 1e9
                    : *end == 'T' ? 1e12 : 1;
      if (unit != 1) end++;
      ok = end != optarg && !*end && isfinite(count) && count * unit >= 1;
      if (ok)
        o->what_if = count * unit;
      else
        fprintf(stderr, "dltrain: --what-if needs a parameter count such as 175e9 or 7B, not "
                "'%s'\n", optarg);
      break;
    }
    case OPT_ACCUM:
      if ((ok = parse_int("accum", optarg, 1, 65536, &v))) o->accum = (int)v;
      break;
    case OPT_SAVE: o->save = optarg; break;
    case OPT_RESUME: o->resume = optarg; break;
    case OPT_DETERMINISTIC: o->deterministic = 1; break;
    case 'j': o->json = 1; break;
    case 'q': o->quiet = 1; break;
    case 'h': usage(stdout); return -1;
    case 'V':
#ifdef DLRT_HAVE_MPI
      printf("dltrain (dlrt) %s, with MPI\n", dlrt_version_string());
#else
      printf("dltrain (dlrt) %s\n", dlrt_version_string());
#endif
      return -1;
    default: ok = 0; break;
    }
  }
  if (ok && optind < argc) {
    fprintf(stderr, "dltrain: unexpected argument '%s'\n", argv[optind]);
    ok = 0;
  }
  if (ok && (o->devices || o->pipeline) && o->device) {
    fputs("dltrain: give --device, or --devices, or --pipeline\n", stderr);
    ok = 0;
  }
  if (ok && o->pipeline && o->precision != DLRT_F32) {
    fputs("dltrain: --pipeline goes without --precision in this version\n", stderr);
    ok = 0;
  }
  if (ok && o->devices && o->pipeline) {
    fputs("dltrain: give --devices or --pipeline, not both\n", stderr);
    ok = 0;
  }
  if (ok && o->pipeline && (o->mem_limit || o->accum > 1 || o->checkpoint || o->clip_norm > 0)) {
    fputs("dltrain: --pipeline goes without --mem-limit, --accum, --checkpoint and "
          "--clip-norm in this version\n", stderr);
    ok = 0;
  }
  if (ok && o->devices && (o->mem_limit || o->accum > 1 || o->checkpoint)) {
    fputs("dltrain: --devices goes without --mem-limit, --accum and --checkpoint in this "
          "version\n", stderr);
    ok = 0;
  }
  if (ok && (o->host_limit || o->spill.policy != DLRT_OFFLOAD_NONE) && !o->mem_limit) {
    fputs("dltrain: --host-limit and --offload go with --mem-limit\n", stderr);
    ok = 0;
  }
  if (ok && (o->what_if > 0 || o->device_memory > 0) && !o->plan) {
    fputs("dltrain: --what-if and --device-memory go with --plan\n", stderr);
    ok = 0;
  }
  if (ok && !isnan(momentum) && kind != DLRT_OPT_SGD) {
    fputs("dltrain: --momentum applies to --optimizer sgd only\n", stderr);
    ok = 0;
  }
  if (!ok) {
    usage(stderr);
    return STATUS_USAGE;
  }
  o->opt = dlrt_optimizer_defaults(kind);
  if (!isnan(lr)) o->opt.lr = lr;
  if (!isnan(momentum)) o->opt.momentum = momentum;
  if (!isnan(decay)) o->opt.weight_decay = decay;
  return 0;
}

/* Ends the run when a dlrt call fails, saying what failed and why. */
#define TRY(call, what)                                                                   \
  do {                                                                                    \
    if ((rc = (call)) != DLRT_OK) {                                                       \
      status = fail(what, rc);                                                            \
      goto done;                                                                          \
    }                                                                                     \
  } while (0)

int main(int argc, char **argv) {
  options o = {.model = "mlp", .data = "fashion-mnist", .epochs = 1, .threads = -1,
               .batch = 64, .seed = 1, .workers = 2, .prefetch = 2, .accum = 1,
               .spill = {.prefetch = 4}, .micro = 4};
  double start = now_s();
  dlrt_dataset data[2] = {{0}, {0}};
  dlrt_trainer_t *trainer = NULL;
  dlrt_device_t *dev = NULL;
  dlrt_device_props props;
  float *losses = NULL;
  results r = {0};
  int status, rc, generated, done = 0;

  if ((status = parse_options(argc, argv, &o)) != 0)
    return status < 0 ? 0 : status;
  FILE *log = o.json ? stderr : stdout; /* stdout ends with the JSON alone */
  int rank = 0, world = 1;
#ifdef DLRT_HAVE_MPI
  mpi_job job = {0, 120};
  int mpi = launched_by_mpi();
  if (mpi) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    job.rank = rank;
    const char *timeout = getenv("DLRT_MPI_TIMEOUT");
    if (timeout && atof(timeout) > 0) job.timeout_s = atof(timeout);
    if (world > 1 && (o.devices || o.pipeline)) {
      if (rank == 0) fputs("dltrain: --devices and --pipeline are for one process; under "
                           "mpirun give each rank its --device\n", stderr);
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
  dlrt_device_t *replicas[64];
  int n_replicas = 0;
  char device_list[512] = "";
  if (o.devices || o.pipeline) {
    snprintf(device_list, sizeof device_list, "%s", o.devices ? o.devices : o.pipeline);
    for (char *save = NULL, *spec = strtok_r(device_list, ",", &save); spec;
         spec = strtok_r(NULL, ",", &save)) {
      if (n_replicas == 64 || (rc = dlrt_device_open(spec, &replicas[n_replicas])) != DLRT_OK) {
        if (n_replicas == 64) fputs("dltrain: at most 64 devices\n", stderr);
        else fail(NULL, rc), fputs("dltrain: run dlinfo to list devices\n", stderr);
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
  if (o.trace) TRY(dlrt_trace_start(o.trace), "cannot trace");
  if ((rc = dlrt_device_open(o.device, &dev)) != DLRT_OK) {
    fail(NULL, rc);
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
  if ((status = load_data(&o, data, &generated)) != 0)
    goto done;
  dlrt_trainer_config cfg = {.model = o.model, .batch = o.batch, .opt = o.opt,
                             .seed = o.seed, .label_smoothing = o.label_smoothing,
                             .schedule = o.schedule, .warmup_steps = o.warmup,
                             .step_size = o.step_size, .gamma = o.gamma,
                             .total_steps = (int64_t)o.epochs *
                                            (data[0].count / o.batch / o.accum),
                             .accum = o.accum, .checkpoint = o.checkpoint,
                             .rank = rank, .world = world,
                             .spill = o.spill,
                             .clip_norm = o.clip_norm, .channels = data[0].channels,
                             .workers = o.workers, .prefetch = o.prefetch,
                             .augment = o.augment, .aug = o.aug,
                             .precision = o.precision, .loss_scaler = o.loss_scaler};
  if (o.plan) {
    uint64_t limit = dlrt_mem_get_limit(dev);
    uint64_t memory = o.device_memory ? o.device_memory : limit ? limit : props.total_memory;
    status = run_plan(&o, &cfg, &data[0], dlrt_device_spec(dev), memory,
                      o.device_memory ? "--device-memory" : limit ? "the budget" : props.name);
    goto done;
  }
  TRY(dlrt_trainer_create(dev, &cfg, data[0].height, data[0].width, data[0].classes,
                          &trainer), "cannot build the model");
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
    for (int i = 0; i < n; i++)
      fprintf(log, "%s %s layers %d-%d", i ? "," : "", dlrt_device_spec(replicas[i]),
              first[i] + 1, last[i]);
    fprintf(log, "; %d micro-batches of %" PRId64 "\n", o.micro, o.batch / o.micro);
  }
#ifdef DLRT_HAVE_MPI
  if (world > 1 && mpi_cuda_aware() && strcmp(props.backend, "cuda") == 0)
    /* CUDA-aware MPI: the gradients go from device memory, not the host. */
    TRY(dlrt_trainer_set_allreduce_device(trainer, mpi_allreduce_start, mpi_allreduce_wait, &job),
        "cannot train across the MPI ranks");
  else if (world > 1)
    TRY(dlrt_trainer_set_allreduce_async(trainer, mpi_allreduce_start, mpi_allreduce_wait, &job),
        "cannot train across the MPI ranks");
#endif
  TRY(dlrt_trainer_info(trainer, &r.info), "cannot read the trainer's figures");
  if (!(losses = calloc((size_t)o.epochs + 1, sizeof *losses))) {
    fputs("dltrain: out of host memory\n", stderr);
    status = STATUS_FAIL;
    goto done;
  }

  /* Say what was chosen, defaults included. */
  const char *env = getenv("DLRT_DEVICE");
  fprintf(log, "device   %s (%s), %s\n", dlrt_device_spec(dev), props.name,
          o.device && *o.device ? "from --device" : env && *env ? "from $DLRT_DEVICE" : "auto");
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
    fprintf(log, "resumed  %s after %d epoch%s\n", o.resume, done, done == 1 ? "" : "s");
  if (o.deterministic && o.threads >= 0)
    fprintf(log, "deterministic: %d CPU thread%s%s\n", o.threads, o.threads == 1 ? "" : "s",
            strcmp(props.backend, "cpu") ? " (bit for bit on the CPU backend only)" : "");
  else if (o.deterministic)
    fputs("deterministic: CPU threads left as they are; give --threads N as well to repeat "
          "the run on another machine\n", log);

  for (int epoch = done; epoch < o.epochs; epoch++) {
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
  if (r.epochs_run == 0) { /* nothing left to train: evaluate what there is */
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
  if (world > 1)
    fprintf(log, "mpi      %d ranks, %" PRId64 " images per rank per step (%" PRId64
            " per update)\n", world, o.batch, o.batch * world);
  if (o.json && rank == 0) {
    r.device = dlrt_device_spec(dev);
    r.device_name = props.name;
    r.data = generated ? "generated" : o.data;
    r.train = &data[0];
    r.test = &data[1];
    r.losses = losses;
    r.seconds = now_s() - start;
    print_json(&o, &r);
  }

done:
  if (o.trace) dlrt_trace_stop();
  if (quiet_log) fclose(quiet_log);
#ifdef DLRT_HAVE_MPI
  if (mpi) {
    if (status != 0 && world > 1) MPI_Abort(MPI_COMM_WORLD, status); /* the others stop too */
    MPI_Finalize();
  }
#endif
  free(losses);
  dlrt_trainer_destroy(trainer);
  dlrt_dataset_free(&data[0]);
  dlrt_dataset_free(&data[1]);
  dlrt_shutdown();
  return status;
}
