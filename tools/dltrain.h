/* dltrain.h — what dltrain.c (options, training, JSON) and dltrain-plan.c
 * (--plan) share. */
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
  const char *devices;      /* --devices A,B,... (data parallel) */
  const char *pipeline;     /* --pipeline A,B,... (pipeline parallel) */
  int micro;                /* --micro-batches */
  dlrt_spill_config spill;
  uint64_t device_memory;   /* --device-memory (0: the device's) */
  double what_if;           /* --what-if parameters (0: none) */
  dlrt_augment aug;
  dlrt_dtype precision;     /* --precision (DLRT_F32: off) */
  dlrt_loss_scaler loss_scaler; /* --loss-scale (zeros: the defaults) */
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

#endif
