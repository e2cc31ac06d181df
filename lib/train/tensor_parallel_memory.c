/* tensor_parallel_memory.c — a split model's peers under the memory
 * options (issue 22: tensor parallelism composes with spilling and the
 * offloads): each peer's executor spills within its own device's budget,
 * or streams its parameters from the host, as one device's executor does
 * (trainer.c's dlrt__spill_budget, the same rule), and DLRT_CHECKPOINT_AUTO
 * chooses one set of segments for all the peers.
 *
 * Why the peers still meet: a spilling executor runs the same schedule,
 * fetching and evicting storages between the nodes, so each collective
 * node comes in the same place of every peer's order, later perhaps but
 * never in another order. Recomputed segments hold collectives too
 * (dlrt_tp_copy and dlrt_tp_reduce inside each block), so every peer must
 * recompute the same segments: the automatic choice is made once, on the
 * first peer's graph and budget (across processes: the shortest segments
 * any rank chose), and given to all. Accumulation alone sums the
 * micro-batches on each peer's device (DLRT_RUN_TRAIN runs). The updates
 * that go through the host (clipping's global norm, fp16's overflow
 * verdict) take gradient runs, whose sums a spilling executor keeps on its
 * device beside its pool (exec_grads.c): the budget given to the pool is
 * the peer's less their bytes, so the update must be known at the split
 * (data-parallel replicas, whose all-reduce is set after it, by
 * config.world > 1). Streamed parameters make no gradient runs, and ZeRO
 * is refused with the memory options (tensor_parallel_update.c). */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "exec/exec.h"
#include "train/tensor_parallel_internal.h"
#include "train/train.h"
#include "util/status.h"

int dlrt_trainer_set_tensor_parallel_memory(dlrt_trainer_t *t, const dlrt_spill_config *spill,
                                            int checkpoint) {
  DLRT__CHECK_ARG(t && spill && (checkpoint >= DLRT_CHECKPOINT_AUTO ||
                                 checkpoint == DLRT_CHECKPOINT_MARKS),
                  "dlrt_trainer_set_tensor_parallel_memory: trainer or spill is NULL, or "
                  "checkpointing %d", checkpoint);
  if (t->tp)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_trainer_set_tensor_parallel_memory: the model "
                           "is split already; give the peers' memory options before the split");
  t->tp_memory_set = 1;
  t->tp_spill = *spill;
  t->tp_checkpoint = checkpoint;
  return DLRT_OK;
}

static const dlrt_spill_config *peer_spill(const dlrt_trainer_t *t) {
  return t->tp_memory_set ? &t->tp_spill : &t->cfg.spill;
}

static int peer_checkpoint(const dlrt_trainer_t *t) {
  return t->tp_memory_set ? t->tp_checkpoint : t->cfg.checkpoint;
}

int dlrt__tp_memory_update(dlrt_trainer_t *t) {
  dlrt__tp *tp = t->tp;
  const dlrt_spill_config *s = peer_spill(t);
  /* Asked for explicitly: a device budget, an offload or a host budget. A
   * device's DLRT_MEM_LIMIT alone leaves the peers as before (unspilled). */
  int asked = s->device_budget || s->policy != DLRT_OFFLOAD_NONE || s->host_budget;
  if (tp->update == HOST_UPDATE) {
    if ((asked && s->policy == DLRT_OFFLOAD_PARAMS) || dlrt__tp_streams(t))
      return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "the peers of a split model stream their "
                             "parameters (--offload params) without updates through the host "
                             "in this version: not with --clip-norm, fp16 loss scaling, "
                             "data-parallel replicas or ZeRO (a streaming executor makes no "
                             "gradient runs); --mem-limit with another --offload works");
    if (tp->device_accum || (dlrt__tp_spills(t) && !tp->host_sums))
      return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "the peers of a split model spill within "
                             "budgets that left no room for the gradient sums of an update "
                             "through the host: decide it before the split (the trainer's "
                             "config: clip_norm, fp16 loss scaling, or world > 1 for "
                             "data-parallel replicas whose all-reduce comes after the split)");
    if (asked) tp->memory = 1, tp->host_sums = 1;
    return DLRT_OK;
  }
  if (asked) tp->memory = 1;
  /* Data-parallel replicas (config.world > 1) set their all-reduce after
   * the split, which takes the update through the host: their sums get
   * room in the budgets from the start (and accumulation then sums in the
   * gradient runs). Streamed parameters make none. */
  if (tp->memory && t->cfg.world > 1 && s->policy != DLRT_OFFLOAD_PARAMS) {
    tp->host_sums = 1;
    return DLRT_OK;
  }
  /* Accumulation: each peer sums its micro-batches on its device. */
  if (tp->update == GRADIENT_RUNS && (tp->memory || tp->device_accum))
    tp->update = 0, tp->device_accum = 1;
  return DLRT_OK;
}

/* DLRT_CHECKPOINT_AUTO: peer 0 chooses on its graph and budget; across
 * processes every rank does on its own shard and all take the shortest
 * segments (a rank's shard may hold more vocabulary rows). */
static int auto_segments(dlrt_trainer_t *t, tp_peer *p, uint64_t budget, uint64_t outside) {
  dlrt__tp *tp = t->tp;
  if (tp->chosen) return dlrt_exec_set_checkpointing(p->e, tp->checkpoint);
  int every;
  int rc = dlrt__choose_checkpoint_every(p->e, p->g, p->dev, budget, outside, &every);
  if (rc < 0) return rc;
  if (tp->fn) {
    /* The most of the ranks' negated segment lengths: the shortest (none
     * counts as the longest). Tag -3: a figure of the setup. */
    float v = -(float)(every == 0 ? 1 << 24 : every);
    if ((rc = tp->fn(tp->user, &v, 1, DLRT_COLLECTIVE_MAX, -3)) < 0) return rc;
    int shortest = (int)-v;
    if (shortest >= 1 << 24) shortest = 0;
    if (shortest != every && (rc = dlrt_exec_set_checkpointing(p->e, shortest)) < 0) return rc;
    every = shortest;
  }
  tp->checkpoint = every, tp->chosen = 1;
  return DLRT_OK;
}

int dlrt__tp_peer_memory(dlrt_trainer_t *t, tp_peer *p) {
  dlrt__tp *tp = t->tp;
  const dlrt_spill_config *spill = peer_spill(t);
  int checkpoint = peer_checkpoint(t), rc = DLRT_OK;
  dlrt_exec_info info;
  if ((rc = dlrt_exec_info_get(p->e, &info)) < 0) return rc;
  /* On the device beside the executor's storages: the accumulators, of
   * accumulation or of the gradient runs of a host update (the loaders are
   * the host's: every peer takes the whole batch from it). */
  uint64_t outside = tp->device_accum || tp->host_sums ? info.param_bytes + 64 * 512 : 0;
  uint64_t budget = tp->memory ? spill->device_budget : 0;
  if (checkpoint == DLRT_CHECKPOINT_AUTO) rc = auto_segments(t, p, budget, outside);
  else if (checkpoint != 0) rc = dlrt_exec_set_checkpointing(p->e, checkpoint);
  if (rc == DLRT_OK && tp->device_accum) rc = dlrt_exec_set_accumulation(p->e, t->accum);
  if (rc == DLRT_OK && tp->memory && spill->policy == DLRT_OFFLOAD_PARAMS) {
    /* The parameters on the host; the budget binds the device's allocator
     * once every peer is built (dlrt__tp_memory_limits). */
    rc = dlrt_exec_offload_params(p->e, spill->prefetch);
    if (rc == DLRT_OK && spill->host_budget)
      rc = dlrt_exec_param_state_limit(p->e, spill->host_budget);
    p->streams = rc == DLRT_OK;
    p->spill_budget = spill->device_budget;
  } else if (rc == DLRT_OK && tp->memory) {
    dlrt_spill_config c = {0};
    char note[160] = "";
    rc = dlrt__spill_budget(p->e, p->dev, spill, outside, &c, note, sizeof note);
    if (rc == DLRT_OK && c.device_budget) {
      rc = dlrt_exec_set_spill(p->e, &c);
      p->spill_budget = c.device_budget + outside;
    }
    if (rc < 0)
      return dlrt__set_error(rc, "tensor parallel peer %d on %s (heads %d-%d): %s%s",
                             tp->ranks ? tp->rank : p->index, dlrt_device_spec(p->dev),
                             p->shard.head_first, p->shard.head_first + p->shard.heads - 1,
                             dlrt_last_error(), c.device_budget ? note : "");
  }
  if (rc == DLRT_OK) rc = dlrt__exec_materialize(p->e);
  return rc;
}

int dlrt__tp_memory_limits(dlrt_trainer_t *t) {
  dlrt__tp *tp = t->tp;
  int rc = DLRT_OK;
  /* A trainer made with config.spill spilled the whole model; its executor
   * now holds nothing, and the peers spill (their figures are the run's). */
  t->spilling = t->streaming = 0;
  /* The peers' measured peaks count from here: until now the device may
   * have held the whole model too (made there, or on the host's CPU device
   * that a peer shares), which is gone, and each executor's base was what
   * the device held at its making (the earlier peers'). From here the
   * peers' devices hold the peers' storages alone, so a peer's measured
   * peak is its device's (peers on one device share it). */
  for (int i = 0; i < tp->n && rc == DLRT_OK; i++) {
    tp->peers[i].e->plan.peak_base = 0;
    rc = dlrt_mem_reset_peak(tp->peers[i].dev);
  }
  for (int i = 0; i < tp->n && rc == DLRT_OK; i++) {
    tp_peer *p = &tp->peers[i];
    if (!p->streams || !p->spill_budget) continue;
    /* Peers on one device share its allocator: a budget each. */
    int sharing = 0, first = i;
    for (int k = 0; k < tp->n; k++)
      if (tp->peers[k].dev == p->dev && tp->peers[k].streams) {
        sharing++;
        if (k < first) first = k;
      }
    if (first == i) rc = dlrt_mem_set_limit(p->dev, p->spill_budget * (uint64_t)sharing);
  }
  return rc;
}

int dlrt__tp_spills(const dlrt_trainer_t *t) {
  for (int i = 0; t->tp && i < t->tp->n; i++)
    if (t->tp->peers[i].spill_budget && !t->tp->peers[i].streams) return 1;
  return 0;
}

int dlrt__tp_streams(const dlrt_trainer_t *t) {
  for (int i = 0; t->tp && i < t->tp->n; i++)
    if (t->tp->peers[i].streams) return 1;
  return 0;
}

int dlrt__tp_memory_stats(dlrt_trainer_t *t, dlrt_spill_stats *spill,
                          dlrt_param_offload_stats *stream) {
  memset(spill, 0, sizeof *spill);
  memset(stream, 0, sizeof *stream);
  int rc = DLRT_OK;
  for (int i = 0; i < t->tp->n && rc == DLRT_OK; i++) {
    tp_peer *p = &t->tp->peers[i];
    if (p->streams) {
      dlrt_param_offload_stats s;
      if ((rc = dlrt_exec_param_offload_stats(p->e, &s)) < 0) break;
      stream->fetches += s.fetches, stream->fetched_bytes += s.fetched_bytes;
      stream->gradient_bytes += s.gradient_bytes, stream->updates += s.updates;
      stream->disk_read_bytes += s.disk_read_bytes;
      stream->disk_written_bytes += s.disk_written_bytes;
      if (s.peak_param_bytes > stream->peak_param_bytes)
        stream->peak_param_bytes = s.peak_param_bytes;
    } else if (p->spill_budget) {
      dlrt_spill_stats s;
      if ((rc = dlrt_exec_spill_stats(p->e, &s)) < 0) break;
      dlrt__spill_stats_add(spill, &s);
    }
  }
  return rc;
}
