/* simulate_stream.c — --offload params replayed (dlrt__sim_stream_replay,
 * simulate_internal.h): param_stream.c's fetches, releases, gradients out
 * and host updates on the replay's clocks, and the optimizer state on disk
 * behind a host budget on param_disk.c's rules (one I/O thread, slots read
 * ahead and written behind; masters on disk read ahead of their fetches,
 * param_master.c). simulate.c calls it for a streamed step. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "exec/state_split.h"
#include "train/simulate_internal.h"
#include "util/status.h"

/* ---------------------------------------------------------------- streaming */

/* --offload params (lib/exec/param_stream.c), replayed on its own rules:
 * each parameter an fp32 SGD or Adam update trains lives on the host; at
 * the start of position k the parameters of positions k .. k + ahead that
 * are not on the device are fetched on the host-to-device engine (issued
 * when the compute stream reaches k: the copy waits for what was queued
 * before it), and k waits for its own; after a use whose next use is more
 * than `ahead` positions away the copy is freed, so the forward and the
 * backward pass each fetch a block's weights. A gradient goes out on the
 * device-to-host engine when the last node that touches it ends; its
 * update runs on the host thread (one at a time, at host memory speed)
 * once the gradient is there and the parameter's last use has run; the
 * update nodes at the step's end wait for them. Steps do not overlap (the
 * update nodes join the host thread), so one step after a first is the
 * steady state. With the optimizer state of some on disk (a host budget:
 * stream_disk below) the disk's I/O runs on across steps, so two steps
 * after a first are. */
typedef struct {
  int id, grad;           /* storages */
  double bytes;           /* the fp32 parameter's (and its gradient's) */
  double host_s;          /* its update on the host */
  int grad_made, grad_last, ready; /* positions: the gradient's first write, its last
                                      touch, and when its update may start */
  int resident;           /* on the device now */
  double fetched, grad_out, host_begin, host_done;
  /* Its optimizer state on disk: the state's bytes (else 0), where it is
   * in the round's order of disk updates, whether its file slot holds
   * data yet, and when its update waited for its read. */
  double state_bytes;     /* its master's too where the master is on disk */
  int seq_pos, written;
  int master_on_disk;     /* its fp32 fetches read its master there, ahead */
} streamed_param;

/* ---------------------------------------------------------- the state on disk */

/* param_disk.c's rules, replayed: one I/O thread takes reads and writes in
 * the order they are queued, at the machine's disk rates (a slot never
 * written reads as zeros: no disk time); DLRT__STATE_SLOTS host slots. At a
 * round's start (the forward pass) the first two states in update order
 * are read ahead into free slots; an update takes its state (read now if
 * it is in no slot: a miss, into the least recently used clean slot,
 * waiting for one if none is), reads the next two ahead into slots that
 * are free or hold a state handed out this round and clean by then, and
 * writes its state back behind it. */
typedef struct {
  int owner;        /* streamed parameter, -1: none */
  int in_use;       /* handed out to an update, not yet put back */
  double clean_at;  /* when its read or write ends */
  uint64_t last;    /* when it was last handed out (least recently used goes first) */
} disk_slot;

typedef struct {
  const dlrt_machine *m;
  streamed_param *p;
  int *slot_of;     /* per streamed parameter: its slot, -1: none */
  uint64_t *used;   /* per streamed parameter: the round it was last handed out in */
  int *seq, n_seq;  /* the round's order of updates with state on disk */
  disk_slot s[DLRT__STATE_SLOTS];
  double io_free;   /* when the I/O thread is free */
  uint64_t round, clock;
  dlrt_simulated_step *out;
  int counting;
} stream_disk;

/* One read or write of parameter i's state queued at `issue`: when it ends. */
static double disk_io(stream_disk *d, int i, double issue, int write) {
  double begin = issue > d->io_free ? issue : d->io_free, bytes = d->p[i].state_bytes;
  double seconds = write ? bytes / d->m->disk_write_bytes_per_s
                   : d->p[i].written ? bytes / d->m->disk_read_bytes_per_s : 0;
  d->io_free = begin + seconds;
  if (d->counting) {
    d->out->disk_s += seconds;
    if (write) d->out->disk_written_bytes += (uint64_t)bytes;
    else if (d->p[i].written) d->out->disk_read_bytes += (uint64_t)bytes;
  }
  if (write) d->p[i].written = 1;
  return d->io_free;
}

/* A master's read for its fetch queued at `issue`: `bytes` read, when it ends. */
static double disk_fetch(stream_disk *d, double bytes, double issue) {
  double begin = issue > d->io_free ? issue : d->io_free;
  double seconds = bytes / d->m->disk_read_bytes_per_s;
  d->io_free = begin + seconds;
  if (d->counting) d->out->disk_s += seconds, d->out->disk_read_bytes += (uint64_t)bytes;
  return d->io_free;
}

/* param_master.c's reads, replayed: the step's fetches of masters on disk
 * in order (of parameter param[j]), each read (its master's bytes alone,
 * on the I/O thread) as soon as the staging has room: at most
 * DLRT__PDISK_STAGES read and not yet fetched (the runtime's staging holds
 * chunks, here whole masters). end[j]: when read j ends. */
typedef struct {
  int *param, n, issued, used;
  double *end;
} master_reads;

static void master_reads_start(stream_disk *d, master_reads *mr, double t) {
  for (; mr->issued < mr->n && mr->issued - mr->used < DLRT__PDISK_STAGES; mr->issued++)
    mr->end[mr->issued] = disk_fetch(d, d->p[mr->param[mr->issued]].bytes, t);
}

/* A slot at time t (param_disk.c's slot_for): a free one, else the least
 * recently used clean one (for a read ahead, only one whose state was
 * handed out this round); -1: none. */
static int disk_slot_for(stream_disk *d, double t, int ahead) {
  int best = -1;
  for (int k = 0; k < DLRT__STATE_SLOTS; k++) {
    const disk_slot *x = &d->s[k];
    if (x->owner < 0) return k;
    if (x->in_use || x->clean_at > t || (ahead && d->used[x->owner] != d->round)) continue;
    if (best < 0 || x->last < d->s[best].last) best = k;
  }
  return best;
}

static void disk_read_into(stream_disk *d, int i, int k, double t) {
  disk_slot *x = &d->s[k];
  if (x->owner >= 0) d->slot_of[x->owner] = -1;
  x->owner = i, d->slot_of[i] = k;
  x->clean_at = disk_io(d, i, t, 0);
}

static void disk_prefetch(stream_disk *d, int pos, double t) {
  if (pos >= d->n_seq || d->slot_of[d->seq[pos]] >= 0) return;
  int k = disk_slot_for(d, t, 1);
  if (k >= 0) disk_read_into(d, d->seq[pos], k, t);
}

static void disk_new_round(stream_disk *d, double t) {
  d->round++;
  /* The runtime's slots hold chunks, not whole states: nothing read in one
   * round is still there in the next, and every state on disk is read
   * again (behind its write-back, the I/O thread taking both in order). */
  for (int k = 0; k < DLRT__STATE_SLOTS; k++)
    if (d->s[k].owner >= 0 && !d->s[k].in_use) {
      d->slot_of[d->s[k].owner] = -1;
      d->s[k].owner = -1;
    }
  for (int pos = 0; pos < 2; pos++) disk_prefetch(d, pos, t);
}

/* Parameter i's update wants its state at `want`: when it has it. */
static double disk_get(stream_disk *d, int i, double want) {
  double t = want;
  for (;;) {
    int k = d->slot_of[i];
    if (k >= 0) {
      if (d->s[k].clean_at > t) t = d->s[k].clean_at;
      d->s[k].in_use = 1, d->s[k].last = ++d->clock;
      d->used[i] = d->round;
      break;
    }
    if ((k = disk_slot_for(d, t, 0)) >= 0) {
      disk_read_into(d, i, k, t);
      continue;
    }
    /* Every slot busy: until the first of them is clean. */
    double next = INFINITY;
    for (int j = 0; j < DLRT__STATE_SLOTS; j++)
      if (!d->s[j].in_use && d->s[j].clean_at < next) next = d->s[j].clean_at;
    if (!isfinite(next)) break; /* cannot happen: one update at a time */
    t = next;
  }
  for (int pos = d->p[i].seq_pos + 1; pos <= d->p[i].seq_pos + 2; pos++) disk_prefetch(d, pos, t);
  return t;
}

static void disk_put(stream_disk *d, int i, double t) {
  int k = d->slot_of[i];
  if (k < 0) return;
  d->s[k].in_use = 0;
  d->s[k].clean_at = disk_io(d, i, t, 1);
}

/* Parameter q's update on the host thread from `begin` on (its state read
 * first where it is on disk, written back behind it). */
static void host_update(stream_disk *d, streamed_param *q, double begin, double *host_free) {
  double start = begin;
  if (d && q->state_bytes > 0) {
    start = disk_get(d, (int)(q - d->p), begin);
    if (d->counting) d->out->disk_wait_s += start - begin;
  }
  q->host_begin = start, q->host_done = *host_free = start + q->host_s;
  if (d && q->state_bytes > 0) disk_put(d, (int)(q - d->p), q->host_done);
}

/* Whether node n is the forward cast of a streamed master into its 16-bit
 * copy, itself streamed (of_id >= 0 for both): param_stream.c makes that
 * copy on the host after each update, so the node does not run. */
static int is_host_cast(const int *of_id, const dlrt__node *n) {
  return n->op == DLRT__OP_CAST && n->phase == DLRT__PHASE_FORWARD &&
         of_id[n->in[0]->owner->id] >= 0 && of_id[n->out[0]->id] >= 0;
}

/* The streamed parameter that node n reads as input j (once per node), or -1. */
static int stream_param_of(const int *of_id, const dlrt__node *n, int j) {
  if (is_update(n) || is_host_cast(of_id, n)) return -1;
  int i = of_id[n->in[j]->owner->id];
  for (int j2 = 0; j2 < j && i >= 0; j2++)
    if (of_id[n->in[j2]->owner->id] == i) i = -1;
  return i;
}

int dlrt__sim_stream_replay(const dlrt_graph_t *g, const dlrt__schedule *s,
                            const double *seconds, int ahead, double batch_bytes,
                            uint64_t host_budget, const dlrt_machine *m,
                            dlrt_simulated_step *out) {
  int n = s->n, np = 0, rc = DLRT_OK;
  int *of_id = malloc(sizeof(int) * (size_t)(g->n_tensors ? g->n_tensors : 1));
  streamed_param *p = calloc((size_t)(n ? n : 1), sizeof *p);
  int *update_of = malloc(sizeof(int) * (size_t)(n ? n : 1));
  /* Uses, CSR style: position k reads use[use_at[k] .. use_at[k + 1]], and
   * use_next[u] is that parameter's next use after k (INT32_MAX: none). */
  int *use_at = calloc((size_t)n + 1, sizeof(int)), *use = NULL, *use_next = NULL, *seen = NULL;
  int *seen_grad = malloc(sizeof(int) * (size_t)(g->n_tensors ? g->n_tensors : 1));
  stream_disk disk = {.m = m, .p = p, .out = out}, *dk = NULL;
  master_reads mr = {0};
  if (!of_id || !p || !update_of || !use_at || !seen_grad) {
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory replaying a step");
    goto done;
  }
  for (int i = 0; i < g->n_tensors; i++) of_id[i] = -1;
  /* The streamed parameters, as dlrt_exec_offload_params picks them. */
  for (int k = 0; k < n; k++) {
    const dlrt__node *nd = g->nodes[s->order[k]];
    update_of[k] = -1;
    if (!is_update(nd)) continue;
    const dlrt_tensor_t *param = nd->in[0];
    if (param->owner != param || param->dtype != DLRT_F32) continue;
    if (of_id[param->id] >= 0) continue; /* the executor streams it once */
    int states = nd->op == DLRT__OP_SGD ? 1 : 2;
    streamed_param *q = &p[np];
    q->id = param->id;
    q->grad = nd->in[states + 1]->owner->id;
    q->bytes = (double)dlrt__tensor_bytes(param);
    q->host_s = host_update_bytes(nd) / m->host_bytes_per_s;
    q->grad_made = q->grad_last = q->ready = -1;
    update_of[k] = np;
    of_id[q->id] = np++;
  }
  /* Mixed precision: a master's 16-bit copy (the first forward cast of it
   * into an f16 or bf16 tensor of its own) is streamed in its place to
   * every node that reads the copy, at 2 B a parameter; the master itself
   * only to fp32 readers (layer norms, a tied embedding's fp32 head). The
   * copy has no gradient; the host casts it after the update. */
  int masters = np;
  for (int i = 0; i < masters; i++) {
    for (int k = 0; k < n; k++) {
      const dlrt__node *nd = g->nodes[s->order[k]];
      if (nd->op != DLRT__OP_CAST || nd->phase != DLRT__PHASE_FORWARD ||
          nd->in[0]->id != p[i].id)
        continue;
      const dlrt_tensor_t *low = nd->out[0];
      if (low->owner != low || (low->dtype != DLRT_F16 && low->dtype != DLRT_BF16) ||
          of_id[low->id] >= 0)
        continue;
      streamed_param *q = &p[np];
      q->id = low->id;
      q->grad = -1;
      q->bytes = (double)dlrt__tensor_bytes(low);
      q->grad_made = q->grad_last = q->ready = -1;
      p[i].host_s += (p[i].bytes + q->bytes) / m->host_bytes_per_s;
      of_id[q->id] = np++;
      break;
    }
  }
  /* The optimizer state on disk under the host budget, split by the
   * runtime's rule; replayed where the machine has disk figures. */
  if (host_budget) {
    int ns = 0, *sid = NULL, *sstates = NULL;
    uint64_t *sbytes = NULL;
    char *on_disk = NULL;
    dlrt__state_split split;
    rc = dlrt__streamed_states(g, &ns, &sid, &sbytes, &sstates);
    if (rc == DLRT_OK && !(on_disk = malloc((size_t)(ns ? ns : 1))))
      rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory replaying a step");
    if (rc == DLRT_OK)
      rc = dlrt__state_split_make(ns, sbytes, sstates, host_budget, on_disk, &split);
    for (int j = 0; rc == DLRT_OK && j < ns; j++)
      if (on_disk[j] && of_id[sid[j]] >= 0) {
        streamed_param *q = &p[of_id[sid[j]]];
        /* A master on disk is one part more of its state's place. */
        q->state_bytes = (double)sbytes[j] + (split.masters ? q->bytes : 0);
        q->master_on_disk = q->written = split.masters; /* the master is there from the start */
        out->params_on_disk++;
        out->state_disk_bytes += (uint64_t)q->state_bytes;
      }
    free(sid), free(sbytes), free(sstates), free(on_disk);
    if (rc == DLRT_OK && !split.fits)
      rc = dlrt__set_error(DLRT_ERR_OOM, "a host budget of %.3f MiB is too small for the "
                           "optimizer state%s of the streamed parameters: give at least %.3f "
                           "MiB (its slots of the least chunks)",
                           (double)host_budget / 1048576.0, split.masters ? " and masters" : "",
                           (double)split.least_host_bytes / 1048576.0);
    if (rc < 0) goto done;
    if (out->params_on_disk && m->disk_read_bytes_per_s > 0 && m->disk_write_bytes_per_s > 0) {
      dk = &disk;
      disk.slot_of = malloc(sizeof(int) * (size_t)np);
      disk.used = calloc((size_t)np, sizeof(uint64_t));
      disk.seq = malloc(sizeof(int) * (size_t)np);
      if (!disk.slot_of || !disk.used || !disk.seq) {
        rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory replaying a step");
        goto done;
      }
      for (int i = 0; i < np; i++) disk.slot_of[i] = -1;
      for (int k = 0; k < DLRT__STATE_SLOTS; k++) disk.s[k].owner = -1;
    }
  }
  /* The device runs the updates of what it does not stream only. */
  out->update_s = 0;
  for (int k = 0; k < n; k++)
    if (update_of[k] < 0 && is_update(g->nodes[s->order[k]])) out->update_s += seconds[k];
  for (int k = 0; k < n; k++) {
    const dlrt__node *nd = g->nodes[s->order[k]];
    use_at[k + 1] = use_at[k];
    for (int j = 0; j < nd->n_in; j++) use_at[k + 1] += stream_param_of(of_id, nd, j) >= 0;
  }
  use = malloc(sizeof(int) * (size_t)(use_at[n] ? use_at[n] : 1));
  use_next = malloc(sizeof(int) * (size_t)(use_at[n] ? use_at[n] : 1));
  seen = malloc(sizeof(int) * (size_t)(np ? np : 1));
  if (!use || !use_next || !seen) {
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory replaying a step");
    goto done;
  }
  for (int i = 0; i < np; i++) seen[i] = INT32_MAX;
  for (int k = n - 1; k >= 0; k--) {
    const dlrt__node *nd = g->nodes[s->order[k]];
    int u = use_at[k];
    for (int j = 0; j < nd->n_in; j++) {
      int i = stream_param_of(of_id, nd, j);
      if (i < 0) continue;
      use[u] = i, use_next[u++] = seen[i];
    }
    for (int u2 = use_at[k]; u2 < use_at[k + 1]; u2++) seen[use[u2]] = k;
  }
  /* Where each gradient is made and last touched, and each parameter's
   * update may start (after both its gradient and its last use). */
  for (int i = 0; i < g->n_tensors; i++) seen_grad[i] = -1;
  for (int i = 0; i < np; i++)
    if (p[i].grad >= 0) seen_grad[p[i].grad] = i;
  for (int k = 0; k < n; k++) {
    const dlrt__node *nd = g->nodes[s->order[k]];
    if (is_update(nd)) continue;
    for (int j = 0; j < nd->n_in + nd->n_out; j++) {
      const dlrt_tensor_t *x = j < nd->n_in ? nd->in[j] : nd->out[j - nd->n_in];
      int i = seen_grad[x->owner->id];
      if (i < 0) continue;
      if (p[i].grad_made < 0 && j >= nd->n_in) p[i].grad_made = k;
      p[i].grad_last = k;
    }
    for (int j = 0; j < nd->n_in; j++) {
      int i = stream_param_of(of_id, nd, j);
      if (i >= 0 && k > p[i].ready) p[i].ready = k;
    }
  }
  for (int i = 0; i < np; i++)
    if (p[i].grad_last < 0) p[i].ready = -1; /* no gradient: updated at its node */
    else if (p[i].grad_last > p[i].ready) p[i].ready = p[i].grad_last;
  /* The round's order of updates with state on disk: as the host thread
   * takes them (by the position their update may start at), then those
   * without a gradient at their update nodes (param_stream.c's
   * plan_disk_reads). */
  for (int k = 0; dk && k < n; k++)
    for (int i = 0; i < np; i++)
      if (p[i].ready == k && p[i].state_bytes > 0)
        p[i].seq_pos = disk.n_seq, disk.seq[disk.n_seq++] = i;
  for (int k = 0; dk && k < n; k++) {
    int i = update_of[k];
    if (i >= 0 && p[i].ready < 0 && p[i].state_bytes > 0)
      p[i].seq_pos = disk.n_seq, disk.seq[disk.n_seq++] = i;
  }
  /* The step's fetches of masters on disk, in order: param_stream.c's
   * fetches and releases replayed without the clocks (param_master.c's
   * plan; every step starts with nothing on the device). */
  for (int i = 0; dk && i < np; i++) seen[i] = 0;
  if (dk && (!(mr.param = malloc(sizeof(int) * (size_t)(use_at[n] + 1))) ||
             !(mr.end = malloc(sizeof(double) * (size_t)(use_at[n] + 1))))) {
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory replaying a step");
    goto done;
  }
  for (int k = 0; dk && k < n; k++) {
    if (update_of[k] >= 0) continue;
    for (int a = k; a <= k + ahead && a < n; a++)
      for (int u = use_at[a]; u < use_at[a + 1]; u++) {
        int i = use[u];
        if (seen[i]) continue;
        seen[i] = 1;
        if (p[i].master_on_disk) mr.param[mr.n++] = i;
      }
    for (int u = use_at[k]; u < use_at[k + 1]; u++)
      if (use_next[u] > k + ahead) seen[use[u]] = 0;
  }
  replay r = {.m = m, .p = out};
  double step_start = 0, batch_ready = 0, bw0 = -1, bw1 = 0;
  uint64_t resident = 0, grads_live = 0;
  int steps = dk ? 3 : 2;
  for (int step = 0; step < steps; step++) {
    r.counting = disk.counting = step == steps - 1;
    step_start = r.t;
    if (dk) disk_new_round(dk, r.t);
    wait_until(&r, batch_ready, &out->exposed_transfer_s);
    sim_copy next_batch = {0, -1, DLRT__LINK_H2D, 0, batch_bytes};
    batch_ready = copy_end(&r, r.t, &next_batch);
    for (int i = 0; i < np; i++) p[i].resident = 0, p[i].host_done = 0;
    resident = 0;
    mr.issued = mr.used = 0;
    for (int k = 0; k < n; k++) {
      const dlrt__node *nd = g->nodes[s->order[k]];
      if (update_of[k] >= 0) {
        /* The update node joins the host thread (or runs the update itself
         * when nothing queued it: a parameter without a gradient). */
        streamed_param *q = &p[update_of[k]];
        if (q->ready < 0) {
          host_update(dk, q, r.t > r.host_free ? r.t : r.host_free, &r.host_free);
          if (r.counting) out->host_update_s += q->host_s;
        }
        /* Waiting for its gradient's copy is the link's; after that, the
         * host's (the disk's delays of the host included). */
        if (q->ready >= 0) wait_until(&r, q->grad_out, &out->exposed_transfer_s);
        if (q->host_done > r.t) {
          if (r.counting) out->exposed_host_s += q->host_done - r.t;
          r.t = q->host_done;
        }
        continue;
      }
      /* Masters on disk read ahead where the staging has room; the
       * fetches of positions k .. k + ahead. */
      if (dk) master_reads_start(dk, &mr, r.t);
      for (int a = k; a <= k + ahead && a < n; a++) {
        for (int u = use_at[a]; u < use_at[a + 1]; u++) {
          int i = use[u];
          if (p[i].resident) continue;
          sim_copy in = {k, a, DLRT__LINK_H2D, 0, p[i].bytes};
          if (dk && p[i].master_on_disk && mr.used < mr.n) {
            /* param_master.c: the executor waits for the master's read
             * (started ahead, or now), queues its copy and goes on. */
            if (mr.used == mr.issued) mr.end[mr.issued++] = disk_fetch(dk, p[i].bytes, r.t);
            wait_until(&r, mr.end[mr.used++], &out->exposed_transfer_s);
            master_reads_start(dk, &mr, r.t);
          }
          p[i].fetched = copy_end(&r, r.t, &in);
          p[i].resident = 1;
          resident += (uint64_t)p[i].bytes;
          if (r.counting && resident > out->param_peak_bytes) out->param_peak_bytes = resident;
        }
      }
      for (int u = use_at[k]; u < use_at[k + 1]; u++)
        wait_until(&r, p[use[u]].fetched, &out->exposed_transfer_s);
      if (nd->phase == DLRT__PHASE_BACKWARD && bw0 < 0 && r.counting) bw0 = r.t;
      for (int i = 0; i < np; i++)
        if (p[i].grad_made == k) {
          grads_live += (uint64_t)p[i].bytes;
          if (r.counting && grads_live > out->grad_peak_bytes) out->grad_peak_bytes = grads_live;
        }
      if (!is_host_cast(of_id, nd)) r.t += seconds[k];
      if (nd->phase == DLRT__PHASE_BACKWARD && r.counting) bw1 = r.t;
      /* Gradients complete here go out; updates that may start, start. */
      for (int i = 0; i < np; i++) {
        if (p[i].grad_last == k) {
          sim_copy o = {k, -1, DLRT__LINK_D2H, 0, p[i].bytes};
          p[i].grad_out = copy_end(&r, r.t, &o);
          grads_live -= (uint64_t)p[i].bytes;
        }
        if (p[i].ready == k) {
          double begin = p[i].grad_out > r.host_free ? p[i].grad_out : r.host_free;
          if (r.t > begin) begin = r.t;
          host_update(dk, &p[i], begin, &r.host_free);
          if (r.counting) out->host_update_s += p[i].host_s;
        }
      }
      /* Copies whose next use is beyond the window go. */
      for (int u = use_at[k]; u < use_at[k + 1]; u++) {
        int i = use[u];
        if (p[i].resident && use_next[u] > k + ahead) {
          p[i].resident = 0;
          resident -= (uint64_t)p[i].bytes;
        }
      }
    }
  }
  out->step_s = r.t - step_start;
  /* The part of the host update that ran beside the backward pass. */
  double hidden = 0;
  for (int i = 0; i < np && bw0 >= 0; i++) {
    double lo = p[i].host_begin > bw0 ? p[i].host_begin : bw0;
    double hi = p[i].host_done < bw1 ? p[i].host_done : bw1;
    if (hi > lo) hidden += hi - lo;
  }
  out->host_hidden_s = hidden;
  out->host_hidden_fraction = out->host_update_s > 0 ? hidden / out->host_update_s : 0;
  out->params_streamed = masters;
done:
  free(of_id);
  free(p);
  free(update_of);
  free(use_at), free(use), free(use_next), free(seen), free(seen_grad);
  free(disk.slot_of), free(disk.used), free(disk.seq);
  free(mr.param), free(mr.end);
  return rc;
}
