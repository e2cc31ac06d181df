/* dltrain — trains an image classifier (an MLP, a CNN or a model file) on
 * Fashion-MNIST, an MNIST-style folder or generated data, on any dlrt device,
 * and evaluates it on the test split after every epoch; public API only.
 * Exit status: 0 success, 1 a dlrt call failed (data, model file, checkpoint,
 * training), 2 usage error or a device spec that opens nothing.
 * main() runs the phases below in turn on one `run` (dltrain.h): each
 * returns 0 to go on, or 1 to stop with s->status, and main() frees
 * everything the run holds whichever phase stopped it. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h" /* DLRT_HAVE_MPI */
#include "dlrt.h"
#include "dltrain.h"

const char tool_name[] = "dltrain";

/* The --devices or --pipeline list, opened (replicas); then --tensor-parallel:
 * DEV[@WEIGHT],... in this process, or N ranks (tp_devs, or tp_ranks). */
static int open_lists(run *s) {
  options *o = &s->o;
  int rc;
  TRY(dlrt_init(), "cannot start dlrt");
  /* A checkpoint that could never be written fails now, not after training. */
  if (o->save && !o->plan && s->rank == 0)
    TRY(dlrt_save_path_check(o->save), "cannot save the checkpoint there (--save)");
  if (o->devices || o->pipeline) {
    snprintf(s->device_list, sizeof s->device_list, "%s",
             o->devices ? o->devices : o->pipeline);
    for (char *save = NULL, *spec = strtok_r(s->device_list, ",", &save); spec;
         spec = strtok_r(NULL, ",", &save)) {
      /* --devices A@W: rows of each batch in proportion to W, not timed. */
      char *at = o->devices ? strchr(spec, '@') : NULL, *end = NULL;
      if (at) *at = '\0';
      double w = at ? strtod(at + 1, &end) : 1.0;
      if (at && (*end || !(w > 0) || !isfinite(w))) {
        fputs("dltrain: --devices: a weight must be a positive number (cpu@1,opencl:0@3)\n",
              stderr);
        s->status = STATUS_USAGE;
        return 1;
      }
      if (s->n_replicas == 64 ||
          (rc = dlrt_device_open(spec, &s->replicas[s->n_replicas])) != DLRT_OK) {
        if (s->n_replicas == 64) fputs("dltrain: at most 64 devices\n", stderr);
        else tool_fail(NULL, rc), fputs("dltrain: run dlinfo to list devices\n", stderr);
        s->status = STATUS_USAGE;
        return 1;
      }
      s->replicas_weighted |= at != NULL;
      s->replica_weights[s->n_replicas++] = w;
    }
    if (s->n_replicas == 0 || (o->pipeline && s->n_replicas < 2)) {
      fprintf(stderr, "dltrain: --%s needs a list such as cpu,opencl:0%s\n",
              o->devices ? "devices" : "pipeline", o->pipeline ? " (two stages or more)" : "");
      s->status = STATUS_USAGE;
      return 1;
    }
    o->device = dlrt_device_spec(s->replicas[0]);
  }
  if (o->tensor_parallel && isdigit((unsigned char)o->tensor_parallel[0])) {
    char *end;
    long n = strtol(o->tensor_parallel, &end, 10);
    /* --plan plans the N shards without the ranks. */
    if (*end || n < 2 || (s->world % n != 0 && !o->plan)) {
      if (s->rank == 0)
        fprintf(stderr, "dltrain: --tensor-parallel %s: a number is the MPI ranks each model "
                "is split over, a divisor of the ranks (%s%d here; N x R ranks train R "
                "data-parallel replicas); in one process give the devices, such as "
                "--tensor-parallel cpu,opencl:0\n", o->tensor_parallel,
                s->world > 1 ? "" : "run under mpirun -np N: ", s->world);
#ifdef DLRT_HAVE_MPI
      /* Every rank reaches the same verdict: all finalize, none aborts
       * (an abort could kill rank 0 before its message is out). */
      s->ranks_agree_to_stop = 1;
#endif
      s->status = STATUS_USAGE;
      return 1;
    }
    s->tp_ranks = (int)n;
#ifdef DLRT_HAVE_MPI
    /* Ranks r * N .. r * N + N - 1 hold replica r's N shards; shard k of
     * every replica sums its gradients with the others'. */
    if (s->world > s->tp_ranks) dltrain_mpi_split(s->job, s->rank, s->tp_ranks);
#endif
  } else if (o->tensor_parallel) {
    char list[512];
    snprintf(list, sizeof list, "%s", o->tensor_parallel);
    for (char *save = NULL, *spec = strtok_r(list, ",", &save); spec;
         spec = strtok_r(NULL, ",", &save)) {
      char *at = strchr(spec, '@'), *end = NULL;
      if (at) *at = '\0';
      double w = at ? strtod(at + 1, &end) : 1.0;
      if (s->n_tp == DLRT_TP_MAX || (at && (*end || !(w > 0) || !isfinite(w)))) {
        fprintf(stderr, "dltrain: --tensor-parallel: %s\n", s->n_tp == DLRT_TP_MAX
                ? "at most 64 devices" : "a weight must be a positive number (cpu@1,opencl:0@3)");
        s->status = STATUS_USAGE;
        return 1;
      }
      if ((rc = dlrt_device_open(spec, &s->tp_devs[s->n_tp])) != DLRT_OK) {
        tool_fail(NULL, rc), fputs("dltrain: run dlinfo to list devices\n", stderr);
        s->status = STATUS_USAGE;
        return 1;
      }
      s->tp_weighted |= at != NULL;
      s->tp_weights[s->n_tp++] = w;
    }
    if (s->n_tp < 2) {
      fputs("dltrain: --tensor-parallel needs two devices or more, such as cpu,opencl:0 "
            "(or a number of MPI ranks)\n", stderr);
      s->status = STATUS_USAGE;
      return 1;
    }
    o->device = dlrt_device_spec(s->tp_devs[0]);
  }
  return 0;
}

/* The checks that need the lists, then the device (dev, props) and the
 * limits sized from it. */
static int open_device(run *s) {
  options *o = &s->o;
  int rc;
  if (o->zero && o->tensor_parallel && (s->tp_ranks ? s->world / s->tp_ranks : s->world) < 2) {
    if (s->rank == 0)
      fputs("dltrain: --zero shards a split model's model states over its data-parallel "
            "replicas: run mpirun -np N x R with --tensor-parallel N (R > 1 replicas)\n",
            stderr);
#ifdef DLRT_HAVE_MPI
    s->ranks_agree_to_stop = 1; /* every rank says so: all finalize */
#endif
    s->status = STATUS_USAGE;
    return 1;
  }
  if (o->zero && !(o->devices && s->n_replicas > 1) && s->world < 2) {
    fputs(o->pipeline ? "dltrain: --zero shards each pipeline stage's model states over the "
                       "data-parallel ranks: run under mpirun -np R (R > 1) with --pipeline\n"
                     : "dltrain: --zero shards the model states of data-parallel replicas: "
                       "give --devices with two devices or more, or run under mpirun -np N\n",
          stderr);
    s->status = STATUS_USAGE;
    return 1;
  }
  if (o->trace) TRY(dlrt_trace_start(o->trace), "cannot trace");
  if ((rc = dlrt_device_open(o->device, &s->dev)) != DLRT_OK) {
    tool_fail(NULL, rc);
    fputs("dltrain: run dlinfo to list devices\n", stderr);
    s->status = rc == DLRT_ERR_BAD_SPEC || rc == DLRT_ERR_NO_DEVICE ? STATUS_USAGE : STATUS_FAIL;
    return 1;
  }
  TRY(dlrt_device_props_get(s->dev, &s->props), "cannot read device properties");
  if (o->threads >= 0)
    TRY(dlrt_set_cpu_threads(o->threads), "cannot set the CPU threads");
  if (o->mem_limit &&
      (dlrt_parse_size(o->mem_limit, s->props.total_memory, &o->spill.device_budget) != DLRT_OK ||
       o->spill.device_budget == 0)) {
    fprintf(stderr, "dltrain: --mem-limit needs a size such as 512M, 2G or 25%%, not '%s'\n",
            o->mem_limit);
    s->status = STATUS_USAGE;
    return 1;
  }
  if (o->host_limit && (dlrt_parse_size(o->host_limit, 0, &o->spill.host_budget) != DLRT_OK ||
                       o->spill.host_budget == 0)) {
    fprintf(stderr, "dltrain: --host-limit needs a size such as 512M or 2G, not '%s'\n",
            o->host_limit);
    s->status = STATUS_USAGE;
    return 1;
  }
  return 0;
}

/* The data, the trainer's configuration and --plan (which stops here), else
 * the trainer, resumed, over --devices or --pipeline. */
static int build_trainer(run *s) {
  options *o = &s->o;
  dlrt_dataset *data = s->data;
  FILE *log = s->log;
  int rc;
  /* Tensor parallel ranks train one model on the same batches: the data is
   * split between the replicas (world / N of them), not the shards. */
  s->data_world = s->tp_ranks ? s->world / s->tp_ranks : s->world;
  s->data_rank = s->tp_ranks ? s->rank / s->tp_ranks : s->rank;
  if (s->data_world < 1) s->data_world = 1; /* --plan --tensor-parallel N outside mpirun */
  if ((s->status = dltrain_load_data(o, s->data_world, data, &s->generated)) != 0)
    return 1;
  s->cfg = (dlrt_trainer_config){.model = o->model, .batch = o->batch, .opt = o->opt,
                                .seed = o->seed, .label_smoothing = o->label_smoothing,
                                .schedule = o->schedule, .warmup_steps = o->warmup,
                                .step_size = o->step_size, .gamma = o->gamma,
                                .total_steps = (int64_t)o->epochs *
                                               (data[0].count / o->batch / o->accum),
                                .accum = o->accum, .checkpoint = o->checkpoint,
                                .rank = s->data_rank, .world = s->data_world,
                                .spill = o->spill,
                                .clip_norm = o->clip_norm, .channels = data[0].channels,
                                .workers = o->workers, .prefetch = o->prefetch,
                                .augment = o->augment, .aug = o->aug,
                                .precision = o->precision, .loss_scaler = o->loss_scaler,
                                .gpt = o->gpt};
  if (o->gpt_model) s->cfg.total_steps = o->steps;
  if (o->offload_auto) {
    /* --offload auto: the placement for the budget, or the device. */
    uint64_t limit = dlrt_mem_get_limit(s->dev);
    uint64_t memory = s->cfg.spill.device_budget ? s->cfg.spill.device_budget
                      : limit                 ? limit
                                              : s->props.total_memory;
    s->status = dltrain_offload_auto(o, &s->cfg, &data[0], memory, o->plan ? stderr : log);
    if (s->status != 0)
      return 1;
  }
  if (o->plan && (s->n_tp > 0 || s->tp_ranks)) {
    /* Each peer's shard planned (no device needed): --tensor-parallel N's
     * N shards alike on --device. */
    dlrt_device_t *same[DLRT_TP_MAX];
    for (int i = 0; i < s->tp_ranks; i++) same[i] = s->dev;
    s->status = s->rank > 0 ? 0
                : run_plan_tp(o, &s->cfg, &data[0], s->n_tp ? s->tp_devs : same,
                              s->n_tp ? s->n_tp : s->tp_ranks,
                              s->tp_weighted ? s->tp_weights : NULL);
    return 1;
  }
  if (o->plan && o->mem_limit) {
    /* The spill plan is made on the device: a trainer under the budget
     * (the planner profiles its step there). */
    TRY(dlrt_trainer_create(s->dev, &s->cfg, data[0].height, data[0].width, data[0].classes,
                            &s->trainer), "cannot plan the spilling");
    dltrain_plan_set_trainer(s->trainer);
  }
  if (o->plan) {
    uint64_t limit = dlrt_mem_get_limit(s->dev);
    uint64_t memory = o->device_memory ? o->device_memory
                      : limit          ? limit
                                       : s->props.total_memory;
    if (o->simulate) {
      s->status = 0;
      /* A GPT's splits predicted on the machine too (dltrain-split.c): with
       * --json their line before the simulate object's, which stays last. */
      if (o->gpt_model && o->json)
        s->status = run_split(o, &s->cfg, &data[0], s->dev, memory, 0);
      if (s->status == 0) s->status = run_simulate(o, &s->cfg, &data[0], s->dev);
      if (s->status == 0 && o->gpt_model && !o->json)
        s->status = run_split(o, &s->cfg, &data[0], s->dev, memory, 0);
    } else
      s->status = run_plan(o, &s->cfg, &data[0], dlrt_device_spec(s->dev), memory,
                           o->device_memory ? "--device-memory"
                           : limit          ? "the budget"
                                            : s->props.name);
    return 1;
  }
  /* Tensor parallel: the whole model is made (and resumed) in host memory,
   * then cut into the shards, so no device need hold it all at once. */
  /* So is a pipeline's under --mem-limit: its stages spill, each on its
   * device (dlrt_trainer_set_pipeline_memory, before the cut). */
  int stages_spill = o->pipeline && !s->tp_ranks && s->cfg.spill.device_budget;
  /* And --devices' under --mem-limit: each replica spills on its device
   * (dlrt_trainer_set_devices_memory, before the replicas). */
  int replicas_spill = o->devices && s->cfg.spill.device_budget;
  dlrt_device_t *whole_on = s->dev;
  if ((s->n_tp > 0 || s->tp_ranks || stages_spill || replicas_spill) &&
      dlrt_device_open("cpu", &whole_on) != DLRT_OK) {
    dlrt_clear_error();
    whole_on = s->dev;
  }
  /* Its peers spill and choose --checkpoint auto each on its device
   * (dlrt_trainer_set_tensor_parallel_memory, before the split): the whole
   * model waits for the split without them. */
  dlrt_trainer_config whole = s->cfg;
  if (stages_spill || replicas_spill) whole.spill = (dlrt_spill_config){0};
  if (s->n_tp > 0 || s->tp_ranks) {
    whole.spill = (dlrt_spill_config){0};
    if (whole.checkpoint == DLRT_CHECKPOINT_AUTO) whole.checkpoint = 0;
  }
  TRY(dlrt_trainer_create(whole_on, &whole, data[0].height, data[0].width, data[0].classes,
                          &s->trainer), "cannot build the model");
  if (!o->quiet) dltrain_spill_plan_text(log, s->trainer, 0);
  if (o->resume)
    TRY(dlrt_trainer_load(s->trainer, o->resume, &s->done), "cannot resume");
  if (s->n_replicas > 0 && replicas_spill)
    TRY(dlrt_trainer_set_devices_memory(s->trainer, &s->cfg.spill),
        "cannot give the replicas of --devices their budget");
  /* Weighted: each device's rows rounded down (at least one), the rest to
   * the first devices a row each. */
  int64_t split[64], given = 0;
  double weights = 0;
  for (int i = 0; i < s->n_replicas; i++) weights += s->replica_weights[i];
  for (int i = 0; i < s->n_replicas && s->replicas_weighted; i++) {
    split[i] = (int64_t)((double)o->batch * s->replica_weights[i] / weights);
    if (split[i] < 1) split[i] = 1;
    given += split[i];
  }
  for (int i = 0; given < o->batch && s->replicas_weighted; i = (i + 1) % s->n_replicas)
    split[i]++, given++;
  if (s->replicas_weighted && o->devices && given > o->batch) {
    fprintf(stderr, "dltrain: --devices: a batch of %" PRId64 " cannot give each of %d "
            "devices a row\n", o->batch, s->n_replicas);
    s->status = STATUS_USAGE;
    return 1;
  }
  if (s->n_replicas > 0 && o->devices)
    TRY(dlrt_trainer_set_devices(s->trainer, s->replicas, s->n_replicas,
                                 s->replicas_weighted ? split : NULL),
        "cannot spread the model over --devices");
  if (s->n_replicas > 0 && o->pipeline && s->tp_ranks) {
#ifdef DLRT_HAVE_MPI
    /* Tensor x pipeline: this rank's shard of every stage, the stages'
     * collectives over its tensor-parallel ranks. */
    TRY(dlrt_trainer_set_pipeline_tensor_parallel(s->trainer, s->replicas, s->n_replicas,
                                                  o->micro, s->rank % s->tp_ranks, s->tp_ranks,
                                                  NULL, dltrain_mpi_collective, s->job),
        "cannot cut the model into --pipeline stages split over --tensor-parallel ranks");
#endif
  } else if (s->n_replicas > 0 && o->pipeline) {
    if (stages_spill)
      TRY(dlrt_trainer_set_pipeline_memory(s->trainer, &s->cfg.spill),
          "cannot give the pipeline's stages their budget");
    TRY(dlrt_trainer_set_pipeline(s->trainer, s->replicas, s->n_replicas, o->micro),
        "cannot cut the model into --pipeline stages");
  }
  if (s->n_replicas > 0 && o->pipeline) {
    int first[16], last[16], n = 0;
    dlrt_trainer_stages(s->trainer, first, last, &n);
    fputs("pipeline", log);
    for (int i = 0; i < n && !o->gpt_model; i++)
      fprintf(log, "%s %s layers %d-%d", i ? "," : "", dlrt_device_spec(s->replicas[i]),
              first[i] + 1, last[i]);
    /* A GPT's stages: its blocks as the parameter names number them (h.0 ..). */
    for (int i = 0; i < n && o->gpt_model; i++)
      fprintf(log, "%s %s %sblocks %d-%d%s", i ? "," : "", dlrt_device_spec(s->replicas[i]),
              i == 0 ? "embeddings + " : "", first[i], last[i] - 1, i == n - 1 ? " + head" : "");
    fprintf(log, "; %d micro-batches of %" PRId64, o->micro, o->batch / o->micro);
    dlrt_stage_info st;
    if (s->tp_ranks && dlrt_trainer_stage_info(s->trainer, &st, 1, &n) == DLRT_OK && n > 0)
      fprintf(log, "; each stage split over %d ranks, this one's heads %d-%d, vocabulary %"
              PRId64 "-%" PRId64, st.ranks, st.head_first, st.head_first + st.heads - 1,
              st.vocab_first, st.vocab_first + st.vocab - 1);
    fputc('\n', log);
  }
  return 0;
}

/* The parallelism across MPI ranks and --tensor-parallel devices, --zero;
 * then the figures the report starts from and the epochs' loss array. */
static int set_parallelism(run *s) {
  options *o = &s->o;
  dlrt_trainer_t *trainer = s->trainer;
  results *r = &s->r;
  int rc;
#ifdef DLRT_HAVE_MPI
  if (s->data_world < 2 || s->n_tp > 0 || s->tp_ranks) {
    /* One model split over the ranks: no data parallel all-reduce; replicas
     * of a split model take theirs once split (below). */
  } else if (s->world > 1 && !o->zero && !o->pipeline && !o->devices && o->accum == 1 &&
             !o->mem_limit && dltrain_mpi_cuda_aware() &&
             strcmp(s->props.backend, "cuda") == 0)
    /* CUDA-aware MPI: the gradients go from device memory, not the host. */
    TRY(dlrt_trainer_set_allreduce_device(trainer, dltrain_mpi_allreduce_start,
                                          dltrain_mpi_allreduce_wait, s->job),
        "cannot train across the MPI ranks");
  else if (s->world > 1)
    TRY(dlrt_trainer_set_allreduce_async(trainer, dltrain_mpi_allreduce_start,
                                         dltrain_mpi_allreduce_wait, s->job),
        "cannot train across the MPI ranks");
  if (o->zero && s->world > 1 && !s->tp_ranks && !s->n_tp) {
    dlrt_zero_collectives across = {dltrain_mpi_reduce_start, dltrain_mpi_broadcast_start,
                                    dltrain_mpi_allreduce_wait, s->job};
    TRY(dlrt_trainer_set_zero(trainer, o->zero, &across),
        "cannot shard the model states over the ranks (--zero)");
  }
  /* Every rank must train the same: all see the same verdict, so they stop
   * together (rank 0 says why) instead of training apart. */
  /* (Tensor parallel ranks compare within their data-parallel group, the
   * ranks of the same shard, before the split.) */
  if (s->data_world > 1 &&
      (rc = dlrt_trainer_check_ranks(trainer, &s->data[0], dltrain_mpi_allgather, s->job)) < 0) {
    s->status = s->rank == 0 ? tool_fail("the MPI ranks disagree", rc) : STATUS_FAIL;
    s->ranks_agree_to_stop = 1;
    return 1;
  }
  /* (With --pipeline the split is made in build_trainer.) */
  if (s->tp_ranks && !o->pipeline)
    TRY(dlrt_trainer_set_tensor_parallel_memory(trainer, &s->cfg.spill, s->cfg.checkpoint),
        "cannot give the split model's peers their memory options");
  if (s->tp_ranks && !o->pipeline)
    TRY(dlrt_trainer_set_tensor_parallel_ranks(trainer, s->dev, s->rank % s->tp_ranks,
                                               s->tp_ranks, NULL, dltrain_mpi_collective,
                                               s->job),
        "cannot split the model over the MPI ranks (--tensor-parallel)");
#endif
  if (s->n_tp > 0)
    TRY(dlrt_trainer_set_tensor_parallel_memory(trainer, &s->cfg.spill, s->cfg.checkpoint),
        "cannot give the split model's peers their memory options");
  if (s->n_tp > 0)
    TRY(dlrt_trainer_set_tensor_parallel(trainer, s->tp_devs, s->n_tp,
                                         s->tp_weighted ? s->tp_weights : NULL),
        "cannot split the model over --tensor-parallel");
#ifdef DLRT_HAVE_MPI
  /* Replicas of a split model: each shard's gradients summed with the same
   * shard's of the other replicas, through the host. */
  if (s->data_world > 1 && (s->n_tp > 0 || s->tp_ranks))
    TRY(dlrt_trainer_set_allreduce_async(trainer, dltrain_mpi_allreduce_start,
                                         dltrain_mpi_allreduce_wait, s->job),
        "cannot train the split model's replicas across the MPI ranks");
  /* ZeRO over them: each shard's model states over the ranks that hold it. */
  if (o->zero && s->data_world > 1 && (s->n_tp > 0 || s->tp_ranks)) {
    dlrt_zero_collectives across = {dltrain_mpi_reduce_start, dltrain_mpi_broadcast_start,
                                    dltrain_mpi_allreduce_wait, s->job};
    TRY(dlrt_trainer_set_zero(trainer, o->zero, &across),
        "cannot shard the split model's states over its replicas (--zero)");
  }
#endif
  if (o->zero && s->n_replicas > 0 && o->devices)
    TRY(dlrt_trainer_set_zero(trainer, o->zero, NULL),
        "cannot shard the model states over --devices (--zero)");
  TRY(dlrt_trainer_info(trainer, &r->info), "cannot read the trainer's figures");
  if (!(s->losses = calloc((size_t)o->epochs + 1, sizeof *s->losses))) {
    fputs("dltrain: out of host memory\n", stderr);
    s->status = STATUS_FAIL;
    return 1;
  }
  return 0;
}

/* Frees what the run holds, whichever phase stopped it, and leaves the MPI
 * job (aborting the other ranks when this one failed alone). */
static void clean_up(run *s) {
  if (s->o.trace) dlrt_trace_stop();
  if (s->quiet_log) fclose(s->quiet_log);
#ifdef DLRT_HAVE_MPI
  if (s->job) dltrain_mpi_end(s->job, s->status, s->world, s->ranks_agree_to_stop);
#endif
  free(s->losses);
  dlrt_trainer_destroy(s->trainer);
  dlrt_dataset_free(&s->data[0]);
  dlrt_dataset_free(&s->data[1]);
  dltrain_lm_free();
  dlrt_shutdown();
}

int main(int argc, char **argv) {
  static run run_state; /* large (lm_results' rounds): off the stack */
  run *s = &run_state;
  s->start = tool_now_s();
  options *o = &s->o;
  int status;

  if ((status = dltrain_parse_options(argc, argv, o)) != 0) {
    if (status == TOOL_HELP) dltrain_usage(stdout);
    if (status == TOOL_VERSION) dltrain_version(stdout);
    return status < 0 ? 0 : tool_usage_fail(o->error);
  }
  s->log = o->json ? stderr : stdout; /* stdout ends with the JSON alone */
  s->world = 1;
#ifdef DLRT_HAVE_MPI
  if (dltrain_mpi_launched()) {
    s->job = dltrain_mpi_start(&argc, &argv, &s->rank, &s->world);
    /* Each rank's replicas combine their gradients in the process, then
     * over the ranks; ZeRO shards over one or the other. */
    if (s->world > 1 && o->devices && o->zero) {
      if (s->rank == 0) fputs("dltrain: --devices under mpirun goes without --zero in this "
                              "version: ZeRO shards over the ranks (a --device each) or over "
                              "one process's --devices\n", stderr);
      /* Every rank says the same: all finalize, none aborts. */
      dltrain_mpi_end(s->job, STATUS_USAGE, s->world, 1);
      return STATUS_USAGE;
    }
  }
#endif
  /* Under mpirun only rank 0 reports and saves; every rank trains. */
  s->quiet_log = s->rank > 0 ? fopen("/dev/null", "w") : NULL;
  if (s->quiet_log) s->log = s->quiet_log, o->quiet = 1;
  s->tty = !o->quiet && isatty(fileno(s->log));

  /* In order; the first that stops ends the run (the rest are skipped). */
  if (!open_lists(s) && !open_device(s) && !build_trainer(s) && !set_parallelism(s) &&
      !dltrain_describe(s) && !dltrain_train(s))
    dltrain_summarize(s);
  clean_up(s);
  return s->status;
}
