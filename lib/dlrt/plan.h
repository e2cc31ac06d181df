/*
 * dlrt/plan.h — planning memory and predicting steps: the planner, --simulate
 * on a model of a machine, placements, and splits of a GPT across devices.
 * Included by dlrt.h, which programs include (lib/dlrt.h tells the
 * conventions).
 */
#ifndef DLRT_PLAN_H
#define DLRT_PLAN_H

#include "dlrt/parallel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Memory planning                                                           */
/* ------------------------------------------------------------------------ */

/* What a classifier (dlrt_trainer_create's model) holds on the device at
 * the peak of its training run, in the allocator's blocks: the executor's
 * own plan, made without a device, so it matches the measured peak. The
 * peak is a training step's, or an evaluation's when its forward pass with
 * its own loader beside the training one's holds more. */
typedef struct {
  int64_t batch;
  int64_t param_count;
  uint64_t params, grads, optimizer_state;
  uint64_t activations;   /* intermediates live at the peak */
  uint64_t activation_peak; /* the most intermediates live at any one time (the end
                               of the forward pass, or a recomputed segment's) */
  uint64_t inputs;        /* the batch in the graph, and kept outputs (logits) */
  uint64_t accumulators;  /* gradient accumulation's running sums */
  uint64_t loader;        /* the loaders' device slots (prefetch x a batch each) */
  uint64_t peak;          /* all of it */
  int evaluation_at_peak; /* the peak is an evaluation's (two loaders) */
  /* The least device memory training can do with spilling and the
   * optimizer on the host (--mem-limit --offload optimizer): what one
   * operation holds at once, plus the loaders. */
  uint64_t spill_least;
} dlrt_memory_plan;

/* A split GPT's plan (dltrain --plan --tensor-parallel): each peer's shard
 * (as dlrt_trainer_set_tensor_parallel makes them: heads in proportion to
 * `weights`, NULL for even shares) and what its training step holds on its
 * device, planned as its executor plans it (the peer takes the whole batch
 * from the host: no loader slots; --accum's running sums beside), so that
 * plan.peak is the peer's dlrt_tp_peer_info.planned_peak_bytes. `width`:
 * the windows' tokens. checkpoint_every: the forward nodes a segment on
 * every peer (DLRT_CHECKPOINT_MARKS for a GPT's blocks, 0 none);
 * config.checkpoint DLRT_CHECKPOINT_AUTO chooses it on the first peer's
 * graph for device_memory, as the split does. out: n entries. */
typedef struct {
  dlrt_gpt_shard shard;
  int checkpoint_every;
  dlrt_memory_plan plan;
} dlrt_tp_plan;
DLRT_API int dlrt_plan_tensor_parallel(const dlrt_trainer_config *cfg, int64_t width, int n,
                                       const double *weights, uint64_t device_memory,
                                       dlrt_tp_plan *out);
/* The largest batch (windows) whose every peer's planned peak fits
 * device_memory (0: not even one). */
DLRT_API int dlrt_plan_tensor_parallel_max_batch(const dlrt_trainer_config *cfg, int64_t width,
                                                 int n, const double *weights,
                                                 uint64_t device_memory, int64_t *batch);

/* Plans `cfg` (model, batch, optimizer, accum, prefetch) for images of
 * channels x height x width in `classes` classes. */
DLRT_API int dlrt_plan_memory(const dlrt_trainer_config *cfg, int64_t channels, int64_t height,
                              int64_t width, int classes, dlrt_memory_plan *out);
/* The largest batch whose planned peak fits `budget` bytes, and its plan
 * (out->batch 0: not even a batch of 1 fits; out then plans a batch of 1).
 * With cfg->spill.policy DLRT_OFFLOAD_OPTIMIZER or _ALL the batch whose
 * spill_least fits instead. */
DLRT_API int dlrt_plan_max_batch(const dlrt_trainer_config *cfg, int64_t channels,
                                 int64_t height, int64_t width, int classes, uint64_t budget,
                                 dlrt_memory_plan *out);

/* What-if for a model of any size, from bytes per parameter of its states. */
typedef struct {
  const char *strategy;
  double device_bytes;  /* model states on the devices, in all */
  double host_bytes;    /* and on the host */
  double devices;       /* the fewest devices of the given size that hold the
                           device side split between them (pipeline stages,
                           ZeRO-3 shards) */
  int fits_one;         /* fits whole on one device (plain data parallelism) */
} dlrt_what_if;

/* Fills up to 8 rows for a model of `params` parameters and devices of
 * `device_bytes`; activations are not counted. */
DLRT_API int dlrt_plan_what_if(double params, uint64_t device_bytes, dlrt_what_if *out, int *n);

/* ------------------------------------------------------------------------ */
/* Predicting a step on a model of a machine (--simulate)                    */
/* ------------------------------------------------------------------------ */

/* The figures of a machine a step is replayed on: rates as the model uses
 * them (what large kernels reach, not the datasheets' peaks; README
 * "Predicting a step" lists the presets' published figures and sources). */
typedef struct {
  char name[64];            /* "h200-pcie5", "this", or the file's name= */
  char about[160];          /* "NVIDIA H200 SXM on PCIe 5.0 x16", how measured */
  /* GEMM rate by compute type, FLOP/s: [DLRT_F32], [DLRT_F16], [DLRT_BF16]. */
  double matmul_flops[3];
  double matmul_overhead_s; /* a fixed time per GEMM on top of FLOPs / rate */
  double vector_flops;      /* elementwise fp32 arithmetic, FLOP/s */
  double memory_bytes_per_s; /* device memory, read + write, B/s */
  /* Kernels of their own, where they reach another rate than a GEMM or a
   * stream (0: the GEMM rate, the memory bandwidth): the fused attention
   * kernel's FLOP/s, a convolution's (im2col and its GEMM), and the bytes
   * per second of reductions across rows (bias and norm gradients). */
  double attention_flops, conv_flops, reduce_bytes_per_s;
  double launch_s;          /* per kernel launch */
  double link_bytes_per_s;  /* host link per direction (one copy engine each) */
  double link_latency_s;    /* per copy */
  double host_bytes_per_s;  /* host memory as the host optimizer streams it */
  uint64_t device_memory, host_memory; /* bytes */
  /* Published peaks, for MFU (the dense 16-bit tensor peak) and display. */
  double peak_matmul_flops_bf16, peak_memory_bytes_per_s;
  /* Between devices (dlrt_split_predict): the peer rate of one device to
   * the others of its node, per direction (NVLink through NVSwitch, xGMI,
   * or PCIe peer copies), and its latency per message; the devices of a
   * node; the node's network to the other nodes, per direction, all its
   * adapters together, and its latency. 0: not known (a file without them;
   * a split across devices is then not predicted). */
  double peer_bytes_per_s, peer_latency_s;
  int devices_per_node;
  double network_bytes_per_s, network_latency_s;
  /* The disk behind host memory (the spill folder's): sequential reads and
   * writes of large blocks, B/s, as one thread's synchronous I/O reaches
   * them (the disk tier has one I/O thread). 0: not known (the disk's time
   * is then not replayed). */
  double disk_read_bytes_per_s, disk_write_bytes_per_s;
} dlrt_machine;

/* The presets: the host link presets' names (dlrt_link_preset_get), each
 * with its compute, memory and host figures. DLRT_ERR_INVALID_ARG naming
 * the presets for another name. */
DLRT_API int dlrt_machine_preset(const char *name, dlrt_machine *out);
/* A file of "key = value" lines ('#' starts a comment): base = PRESET
 * first to start from one, then any of matmul_fp32, matmul_fp16,
 * matmul_bf16, vector_fp32 (FLOP/s: 7.9e14 or 791.5T), memory_bandwidth,
 * host_bandwidth, reduce_bandwidth (B/s: 4.3TB/s), attention, conv (FLOP/s),
 * link (a rate and latency as --link takes them: 55GB/s:10us), launch,
 * matmul_overhead (10us), disk_read, disk_write (B/s), device_memory,
 * host_memory (141G), name, about. Without a base every rate, the link and
 * device_memory are needed. DLRT_ERR_INVALID_ARG naming the file, the line
 * and the fault (an unknown key lists the keys). */
DLRT_API int dlrt_machine_load(const char *path, dlrt_machine *out);
/* This machine's figures, measured on `dev` (a few seconds): GEMM rates
 * per precision at two sizes (the rate and the overhead per GEMM), the
 * bandwidth of an elementwise kernel, the rate of GELU's arithmetic, a
 * small kernel's launch, the device's link model if it has one (else its
 * measured host-to-device copies), host memory through the host optimizer,
 * the spill folder's disk through the disk tier's own reads and writes
 * (whole 16 MiB slots, the page cache taking part as it does in a run). */
DLRT_API int dlrt_machine_measure(dlrt_device_t *dev, dlrt_machine *out);
/* A preset name, "this" or "local" (measured on dev), or a file. */
DLRT_API int dlrt_machine_get(const char *spec, dlrt_device_t *dev, dlrt_machine *out);

/* A step replayed on a machine: each node of the executor's training
 * schedule takes the roofline time of its FLOPs and bytes (lib/graph/cost.c)
 * plus its launches, one after another on one compute stream; copies take
 * the link, on one engine per direction, overlapping compute unless the
 * compute waits for them; the host optimizer's updates take host memory
 * time. Times are seconds per training step. */
typedef struct {
  double step_s;
  double compute_s;          /* the nodes' times (forward_s + backward_s + update_s) */
  double forward_s, backward_s, update_s;
  double transfer_s;         /* the link's busy time, both directions */
  double exposed_transfer_s; /* of it, time the compute stream waited */
  double host_update_s;      /* the host optimizer's time (0 on the device) */
  double exposed_host_s;     /* of it, time the compute stream waited (the step's
                                waits are split: a wait for a parameter updated on
                                the host is the host's until its update ends, the
                                link's after) */
  /* With the optimizer on the host: the fraction of the host update that
   * runs while the backward pass computes, when each parameter's update
   * starts as soon as its gradient is on the host (ZeRO-Offload's overlap). */
  double host_hidden_fraction;
  double host_hidden_s;      /* that time in seconds (of backward_s, it is the part
                                the host update runs beside) */
  double flops;              /* the step's FLOPs, matmul and vector */
  double mfu;                /* model FLOPs / step / the 16-bit tensor peak */
  double samples_per_s, tokens_per_s; /* tokens: GPT models (else 0) */
  uint64_t h2d_bytes, d2h_bytes, copies;
  int nodes, launches;
  /* Where the copies came from: "none" (everything on the device), "a dry
   * run of the executor on DEVICE" (--mem-limit), "the optimizer on the
   * host" (the offload model), or "parameters streamed from the host, N
   * nodes ahead" (--offload params). */
  char copies_from[96];
  /* Parameter streaming (spill.policy DLRT_OFFLOAD_PARAMS; else 0): the
   * parameters streamed, the look-ahead in nodes (spill.prefetch, default
   * 4), and the most parameter and gradient bytes on the device at once. */
  int params_streamed, ahead;
  uint64_t param_peak_bytes, grad_peak_bytes;
  /* 1: the nodes' times were measured on the device at the model's own
   * shapes (machine "this" with a device: the planner's profiling pass),
   * 0: the roofline of the machine's figures. */
  int nodes_measured;
  /* Streamed parameters' optimizer state on disk (spill.host_budget, the
   * split of dlrt_exec_param_state_limit): the parameters whose state is
   * there, its bytes, the bytes read ahead of their updates and written
   * back behind them in the step, the disk's busy time (one I/O thread,
   * at the machine's disk_read / disk_write rates), the time the host
   * updates waited for reads, and the disk's cost to the step: step_s
   * beyond the same step with all the state in host memory (a second
   * replay; the compute waits for it through the host's updates, so it is
   * part of exposed_host_s too). */
  int params_on_disk;
  uint64_t state_disk_bytes, disk_read_bytes, disk_written_bytes;
  double disk_s, disk_wait_s, exposed_disk_s;
  /* The trainer's exchange with the host between steps, the device idle
   * through it (part of step_s): the loss read back, and a classifier's
   * logits, and the next batch's inputs copied into the graph's. On "this"
   * machine as the profile timed it beside its steps; elsewhere a link
   * latency a read plus the inputs' bytes at memory bandwidth. */
  double exchange_s;
} dlrt_simulated_step;

/* Predicts cfg's training step (the classifier or GPT of dlrt_plan_memory)
 * on machine m. With cfg->spill.device_budget the copies are those the
 * executor makes under that budget in one step of a dry run on `dev` (the
 * model is built and run there: it must be small enough); with
 * spill.policy DLRT_OFFLOAD_OPTIMIZER and no budget, the updates run on
 * the host with each gradient copied out as it is made and each parameter
 * copied back in for the next forward pass (ZeRO-Offload); with
 * DLRT_OFFLOAD_PARAMS, parameter streaming's schedule (each fp32 parameter
 * fetched spill.prefetch nodes ahead of its forward and backward uses on
 * the host-to-device engine, its gradient out as soon as it is complete,
 * its update on the host thread beside the rest of the backward pass; the
 * budget, if any, is not replayed: it bounds the allocator). No device
 * memory is allocated otherwise: any model, gpt3-175b too, in well under
 * a second. */
DLRT_API int dlrt_simulate_step(const dlrt_trainer_config *cfg, int64_t channels, int64_t height,
                                int64_t width, int classes, const dlrt_machine *m,
                                dlrt_device_t *dev, dlrt_simulated_step *out);

/* Where a training run's memory lives when the model may not fit the
 * device (dlrt_plan_placement): parameters' fp32 masters, their 16-bit
 * compute copies (mixed precision), gradients, optimizer state and
 * activations, each in bytes per tier. */
typedef enum {
  DLRT_PART_MASTER,       /* fp32 parameters */
  DLRT_PART_COMPUTE_COPY, /* their 16-bit copies for compute (fp16/bf16; else 0) */
  DLRT_PART_GRADIENTS,
  DLRT_PART_OPTIMIZER,    /* momentum, Adam's moments */
  DLRT_PART_ACTIVATIONS,  /* intermediates, inputs, loader slots at the peak */
  DLRT_PARTS_
} dlrt_placement_part_id;

typedef struct {
  uint64_t device, pinned, pageable, disk; /* bytes in each tier */
  const char *how;        /* a phrase: "on the device", "on the host, fetched ..." */
} dlrt_placement_part;

typedef struct {
  int fits;               /* 1: the placement below fits device, host and disk */
  int rung;               /* 0 everything on the device, 1 checkpointed activations,
                             2 optimizer state on the host, 3 parameters streamed,
                             4 states spilled to host and disk; -1 none fits */
  const char *strategy;   /* the rung in words */
  /* What realises it (dlrt_placement_apply sets these in a config): */
  dlrt_offload_policy policy;
  int checkpoint;         /* cfg->checkpoint's value */
  uint64_t mem_limit;     /* spill.device_budget (0: none needed): spilling's 85% of
                             the device; streaming's the whole device (it bounds the
                             allocator, whose segments take the rest) */
  uint64_t host_limit;    /* spill.host_budget (0: none needed) */
  int ahead;              /* streaming's look-ahead, nodes (spill.prefetch) */
  char flags[256];        /* the same as dltrain flags: "--offload params --mem-limit 8G" */
  dlrt_placement_part part[DLRT_PARTS_];
  uint64_t device_need;   /* the placement's device bytes at the peak */
  uint64_t host_need, pinned_need, disk_need;
  uint64_t device_memory, host_memory; /* what was planned for */
  uint64_t device_usable, host_usable; /* 85% of the device, 80% of the host */
  int64_t param_count;
  char why[512];          /* why each cheaper rung does not fit */
} dlrt_placement;

/* Chooses where cfg's model trains on a device of `device_memory` bytes with
 * `host_memory` bytes of host memory (0: this machine's RAM): the first of
 * these that fits, in order of cost: everything on the device (the plan's
 * peak within 80% of it, the trainer's own slack); activations checkpointed
 * (a GPT's blocks, else segments of sqrt(n)); the optimizer state on the
 * host (--offload optimizer: parameters, gradients and activations within
 * 85% of the device); parameters, gradients and state on the host, the
 * parameters streamed to the device around each use (--offload params: its
 * device peak from the streaming schedule, dlrt_simulate_step's, within
 * 85% of the device and, rounded up to the allocator's 2 MiB segments,
 * within the device; its 16 B a
 * parameter with Adam within 80% of the host; one process (no data
 * parallelism); its look-ahead cfg->spill.prefetch, or where that is 0 the one
 * of 1 .. 32 nodes whose step replayed on machine m is shortest, without m
 * the longest that fits); everything spilled by the pool within the device (--offload
 * all), host copies beyond 80% of the host on disk (--host-limit). Pinned
 * host bytes are those within DLRT_PINNED_LIMIT's default, half of the host;
 * the rest is pageable. fits 0 and rung -1 when none fits; `why` says what
 * each rung needs. Nothing is allocated: any model, gpt3-175b too. */
DLRT_API int dlrt_plan_placement(const dlrt_trainer_config *cfg, int64_t channels,
                                 int64_t height, int64_t width, int classes,
                                 uint64_t device_memory, uint64_t host_memory,
                                 const dlrt_machine *m, dlrt_placement *out);
/* Sets cfg's spill policy, budget, host budget, look-ahead and
 * checkpointing to those of placement p. */
DLRT_API void dlrt_placement_apply(const dlrt_placement *p, dlrt_trainer_config *cfg);
/* ------------------------------------------------------------------------ */
/* Splitting a GPT across devices (--plan: tensor x pipeline x data)          */
/* ------------------------------------------------------------------------ */

/* One way to train a GPT on devices of one size (lib/train/split.c): the
 * degrees of tensor parallelism (Megatron: heads and the vocabulary split
 * over `tensor` devices of a node), pipeline parallelism (`pipeline` stages
 * cut at block boundaries as dlrt_trainer_set_pipeline cuts them, GPipe
 * over `micro` micro-batches of `micro_batch` windows) and data parallelism
 * (`data` replicas, ZeRO stage `zero`), with or without activation
 * checkpointing (a block per segment), on tensor x pipeline x data devices.
 * The bytes are one device's, of its largest stage, counted on the graph
 * of that stage's shard as the planner counts any graph (the executor's
 * own plan, in allocator blocks) and divided as dlrt divides them: ZeRO 1
 * the optimizer state over the replicas, 2 the gradients too, 3 the
 * parameters too (plus the two largest parameters, the one in use and the
 * one fetched ahead). dlrt's GPipe runs a micro-batch's forward pass as an
 * evaluation and keeps the stages' inputs on the host, recomputing in the
 * backward pass: a device holds one micro-batch's activations, and the
 * host the micro-batches in flight. */
typedef struct {
  int tensor, pipeline, data, zero, checkpoint;
  int micro;              /* micro-batches per replica and step (1 without a pipeline) */
  int64_t micro_batch;    /* windows per micro-batch */
  int stage_blocks;       /* blocks of the largest stage */
  int64_t stage_params;   /* parameters of one device's shard of that stage */
  /* After ZeRO's division; the gradients those live at the step's peak, and
   * with micro-batches the stage's running sums of every gradient too. */
  uint64_t param_bytes, grad_bytes, optimizer_bytes;
  uint64_t activation_bytes; /* one micro-batch's, at the step's peak, with its inputs */
  uint64_t device_bytes;  /* all of it: what has to fit */
  uint64_t host_bytes;    /* pinned host memory per device: ZeRO's whole copy of the
                             stage's parameters, the pipeline's micro-batches in flight */
  int devices;            /* tensor x pipeline x data */
  int fits;               /* device_bytes <= the device's memory */
  int runs_now;           /* dltrain runs this split in this version */
  char flags[224];        /* the dltrain command line */
  char needs[384];        /* what this version lacks for it ("" when runs_now) */
  /* dlrt_split_predict, per training step: compute of the slowest stage
   * (forward, recomputation, backward, update; the executor's schedule
   * replayed on the machine's roofline), the tensor-parallel all-reduces
   * (on the node's peer links), the pipeline's boundary copies (dlrt passes
   * them through the host: out and in over the host link), the GPipe
   * bubble ((pipeline - 1) micro-batch slots of the slowest stage), the
   * data-parallel gradient all-reduce or ZeRO's reduce-scatter and gathers
   * (on the node's network, a device's share of it; staged through the
   * host as dlrt's collectives are; not overlapped), and the trainer's
   * exchange with the host between steps (exchange_s, below: the loss read
   * back, the next batch copied in). */
  double step_s, compute_s, tensor_s, pipeline_s, bubble_s, data_s;
  double serial_step_s;   /* the stages one after another, no micro-batch
                             overlapping another */
  double tokens_per_s;
  double model_tflops;    /* per device, FLOPs counted as Narayanan et al. (2021)
                             count them (their Equation 3: matmuls, recomputation
                             included) */
  double mfu;             /* model_tflops / the 16-bit tensor peak */
  int host_fits;          /* host_bytes x devices per node <= the host's memory */
  double exchange_s;      /* the trainer's exchange between steps (part of step_s) */
} dlrt_split;

/* What to search. */
typedef struct {
  uint64_t device_memory;  /* bytes per device (required) */
  int max_devices;         /* 0: 4096 */
  int max_tensor;          /* 0: the machine's devices per node, else 8 (tensor degrees
                              also divide the heads) */
  int max_pipeline;        /* 0: 16, dlrt_trainer_set_pipeline's bound */
  int max_zero;            /* the highest ZeRO stage tried, 0 to 3 */
  int runs_now_only;       /* only the splits this version of dltrain runs */
  /* With a machine: rank by tokens per second in all (for a target of
   * max_devices), not per device (the default: the most from each device,
   * fewer devices first among equals). */
  int by_total;
} dlrt_split_limits;

/* Fills split s of cfg's GPT (cfg->batch windows per step, all replicas
 * together, of `context` tokens; cfg->precision, cfg->opt), whose tensor,
 * pipeline, data, zero, checkpoint and micro_batch are set (micro is
 * computed: cfg->batch / data / micro_batch; without a pipeline
 * micro_batch is the replica's whole batch, whatever was set), for
 * devices of `device_memory`; and with machine m (NULL: memory only) its
 * predicted step. The memory figures come from the planner's plans of the
 * shard's graphs of one and two blocks at micro-batches of one and two
 * windows, which a stage of any size extends linearly (exactly, for the
 * blocks). DLRT_ERR_INVALID_ARG naming the fault: not a GPT, a degree that
 * does not divide (heads, batch), more stages than blocks, a machine
 * without the peer or network figures a split across devices needs. */
DLRT_API int dlrt_split_eval(const dlrt_trainer_config *cfg, int64_t context,
                             uint64_t device_memory, const dlrt_machine *m, dlrt_split *s);
/* Every split within `limits`: tensor degrees dividing the heads and
 * max_tensor (a node's devices: a group never spans nodes), pipeline
 * degrees up to max_pipeline and the blocks, data degrees dividing the
 * batch, ZeRO 0 to max_zero (with data > 1), checkpointing off and on,
 * micro-batches of 1, 2, 4 and 8 windows with a pipeline (the whole
 * replica's batch without); at most max_devices devices. The best `max` in
 * best (*n_best of them): those that fit first, then with machine m by
 * predicted tokens per second per device (or in all: by_total; highest
 * first), else by devices (fewest first), then by device bytes.
 * *enumerated and *fitting count all (either may be NULL). */
DLRT_API int dlrt_split_search(const dlrt_trainer_config *cfg, int64_t context,
                               const dlrt_split_limits *limits, const dlrt_machine *m,
                               dlrt_split *best, int max, int *n_best, int *enumerated,
                               int *fitting);

#ifdef __cplusplus
}
#endif

#endif /* DLRT_PLAN_H */
