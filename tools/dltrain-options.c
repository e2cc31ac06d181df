/* dltrain-options.c — dltrain's command line: --help and the parsing of
 * every option into `options` (dltrain.h), with a message on stderr for
 * each bad value. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h" /* DLRT_HAVE_MPI */
#include "dlrt.h"
#include "dltrain.h"

static void usage(FILE *out) {
  fputs("Usage: dltrain [OPTION]...\n"
        "Trains an image classifier with dlrt and evaluates it on the test set.\n"
        "With no options: an MLP on Fashion-MNIST for one epoch on the default device.\n\n"
        "  -m, --model mlp|cnn|FILE   the network: a preset or a model file (default mlp)\n"
        "      --data fashion-mnist|DIR|FILE|generated\n"
        "                             the images (default fashion-mnist, falling back to\n"
        "                             generated data when the package is not installed);\n"
        "                             DIR holds train.dlrec and test.dlrec (see dlrecord)\n"
        "                             or the MNIST-family IDX files, plain or .gz; a\n"
        "                             record FILE alone: its last tenth is the test split\n"
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
        "                             fit the device (default none); segments of\n"
        "                             conv/relu/maxpool run a chunk of images at a time\n"
        "      --mem-limit SIZE       device memory budget of the run (512M, 2G, or 25%\n"
        "                             of the device): storages spill to pinned host\n"
        "                             memory beyond it, moved ahead of need; with\n"
        "                             --checkpoint, conv/relu/maxpool segments move\n"
        "                             their batch tensors a chunk at a time if they must\n"
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
        "      --plan                 train nothing: print the memory a training run\n"
        "                             needs at its peak, a step's or an evaluation's\n"
        "                             (parameters, gradients, optimizer state,\n"
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

/* Parses the command line into *o; 0, or the exit status (-1: exit 0 at once). */
int parse_options(int argc, char **argv, options *o) {
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
      if ((ok = tool_parse_int("epochs", optarg, 0, 1000000, &v))) o->epochs = (int)v;
      break;
    case 'b':
      if ((ok = tool_parse_int("batch", optarg, 1, 1 << 20, &v))) o->batch = v;
      break;
    case OPT_LIMIT:
      if ((ok = tool_parse_int("limit", optarg, 1, INT64_MAX, &v))) o->limit = v;
      break;
    case OPT_SEED:
      if ((ok = tool_parse_int("seed", optarg, 0, INT64_MAX, &v))) o->seed = (uint64_t)v;
      break;
    case OPT_THREADS:
      if ((ok = tool_parse_int("threads", optarg, 0, 4096, &v))) o->threads = (int)v;
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
      if ((ok = tool_parse_int("warmup", optarg, 0, INT64_MAX, &v))) o->warmup = v;
      break;
    case OPT_CLIP: ok = parse_real("clip-norm", optarg, 0, HUGE_VAL, 1, "> 0", &o->clip_norm); break;
    case OPT_WORKERS:
      if ((ok = tool_parse_int("workers", optarg, 0, 256, &v))) o->workers = (int)v;
      break;
    case OPT_PREFETCH:
      if ((ok = tool_parse_int("prefetch", optarg, 0, 64, &v))) o->prefetch = (int)v;
      break;
    case OPT_AUGMENT:
      o->augment = 1, o->aug.crop_padding = 2, o->aug.flip = 1;
      break;
    case OPT_CROP_PAD:
      if ((ok = tool_parse_int("crop-pad", optarg, 0, 64, &v)))
        o->augment = 1, o->aug.crop_padding = (int)v;
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
      if ((ok = tool_parse_int("micro-batches", optarg, 1, 1 << 20, &v))) o->micro = (int)v;
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
      if ((ok = tool_parse_int("spill-prefetch", optarg, 0, 1024, &v))) o->spill.prefetch = (int)v;
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
      if ((ok = tool_parse_int("accum", optarg, 1, 65536, &v))) o->accum = (int)v;
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
