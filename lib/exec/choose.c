/* choose.c — the planner that chooses keep, swap or recompute for each
 * activation the backward pass reads, under the spilling budget.
 *
 * The candidates are the forward nodes whose outputs the backward pass
 * reads (their outputs go together: re-running a node makes all of them).
 * Each has two prices on its own: swapping (the write-back after its last
 * forward use, which the pool does on the compute stream, plus the part of
 * the fetch that the nodes between its last forward and first backward use
 * do not hide) and recomputing (its producer's measured time and that of
 * the intermediates it is made from which nothing keeps, back to the
 * nearest storages that stay). The planner ranks them by
 * the cheaper price per byte and prices plans that give the first j of
 * that ranking their cheaper option (or all a swap, or all a
 * recomputation; recomputations reading recomputed activations allowed, or
 * not: a chain of them brings earlier activations back for the backward
 * pass), and the rest to the pool's Belady eviction, for j over a
 * grid refined around the best, with the pure strategies beside them, each
 * by replaying the whole step on the model of the pool (choose_model.c);
 * the cheapest runs. A plan's prefetches are placed as late as the link
 * allows: walking back from the last backward use, each copy ends before
 * its storage is needed and before the next copy on the engine starts. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/choose.h"
#include "exec/exec.h"
#include "util/clock.h"
#include "util/status.h"

typedef struct {
  int node;          /* graph node index of the producer */
  int tensor;        /* its first output the backward pass reads */
  uint64_t bytes;    /* what the backward pass reads of its outputs */
  double swap_ms, recompute_ms;
  int can_recompute;
  int option;        /* the cheaper: DLRT_SPILL_SWAP or _RECOMPUTE */
  double score;      /* the cheaper option's ms per byte */
  int *closure;      /* storages made again with it that nothing keeps, -1 ended */
  int *reads;        /* the candidates whose activations its recomputation reads, -1 ended */
} candidate;

typedef struct {
  dlrt_exec_t *e;
  dlrt_graph_t *g;
  const dlrt__schedule *s0; /* the plain training schedule */
  const double *ms;
  double rate, latency, floor;
  double link_latency;   /* of latency, the link's own */
  double block_rate;     /* the profiled blocks' copies' rate (dlrt__pool_model) */
  double gate;           /* the link model's notice and gate, s a copy */
  int overlap; /* slices on the copy streams (dlrt__slice_overlap) */
  uint64_t budget;
  int lookahead;
  dlrt_offload_policy policy;
  int *inputs;
  candidate *c;
  int n;
  int *order;               /* candidates by score */
  char *saved;              /* by storage: read by the backward pass of s0 */
  int *producer;            /* by storage: its forward node, or -1 */
} chooser;

/* A plan being priced: what the executor would run. */
typedef struct {
  dlrt__schedule s;         /* owned when own_s */
  int own_s;
  char *drop, *swap_out;
  int **prefetch_at;
  int first_backward;
  uint64_t *bytes, *size;
  int slicing;
  dlrt__model_step step;
} plan;

static int writes_inputs(const dlrt__node *n) {
  return n->phase == DLRT__PHASE_UPDATE || n->op == DLRT__OP_BN_RUNNING ||
         n->op == DLRT__OP_ATTENTION_DECODE;
}

static double copy_s(const chooser *z, uint64_t bytes) {
  double t = z->rate > 0 ? z->latency + (double)bytes / z->rate : 0;
  double floor = z->floor > 0 ? (double)bytes / z->floor : 0;
  return t > floor ? t : floor;
}

static int first_backward(const dlrt_graph_t *g, const dlrt__schedule *s) {
  for (int k = 0; k < s->n; k++)
    if (g->nodes[s->order[k]]->phase != DLRT__PHASE_FORWARD) return k;
  return s->n;
}

static void plan_free(plan *p, int n_positions) {
  if (p->own_s) dlrt__schedule_free(&p->s);
  for (int k = 0; p->prefetch_at && k < n_positions; k++) free(p->prefetch_at[k]);
  free(p->prefetch_at);
  free(p->drop), free(p->swap_out), free(p->bytes), free(p->size);
  memset(p, 0, sizeof *p);
}

/* ---------------------------------------------------------------- prefetches */

/* Storages to prefetch after each position of s (-1 ended lists; NULL
 * where none): each swapped storage's fetch ends before its first backward
 * use and before the fetch after it starts, as late as that allows. */
static int place_prefetches(const chooser *z, const dlrt__schedule *s, const char *swap_out,
                            int first_bw, int ***out) {
  const dlrt_graph_t *g = z->g;
  int n = s->n, rc = DLRT_OK;
  double *end = malloc((size_t)(n + 1) * sizeof *end); /* end[k]: when position k ends */
  int *use = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *use);
  int *by = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *by);
  int *count = calloc((size_t)(n ? n : 1), sizeof *count);
  int **at = calloc((size_t)(n ? n : 1), sizeof *at);
  if (!end || !use || !by || !count || !at) {
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
    goto done;
  }
  double t = 0;
  for (int k = 0; k < n; k++) end[k] = (t += z->ms[s->order[k]] / 1e3);
  for (int i = 0; i < g->n_tensors; i++) use[i] = -1;
  for (int k = n - 1; k >= first_bw; k--) {
    const dlrt__node *x = g->nodes[s->order[k]];
    for (int j = 0; j < x->n_in; j++) use[x->in[j]->owner->id] = k;
  }
  int m = 0;
  for (int i = 0; i < g->n_tensors; i++)
    if (swap_out[i] && use[i] >= 0) by[m++] = i;
  /* Latest use first (insertion sort: few hundred at most). */
  for (int a = 1; a < m; a++)
    for (int b = a; b > 0 && use[by[b]] > use[by[b - 1]]; b--) {
      int tmp = by[b];
      by[b] = by[b - 1], by[b - 1] = tmp;
    }
  double engine_from = INFINITY;
  int *pos = malloc((size_t)(m ? m : 1) * sizeof *pos);
  if (!pos) {
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
    goto done;
  }
  for (int a = 0; a < m; a++) {
    int id = by[a], u = use[id];
    double need = u > 0 ? end[u - 1] : 0, finish = need < engine_from ? need : engine_from;
    double start = finish - copy_s(z, dlrt__alloc_rounded(dlrt__tensor_bytes(g->tensors[id])));
    engine_from = start;
    int p = u - 1;
    while (p >= first_bw && end[p] > start) p--;
    if (p < first_bw - 1) p = first_bw - 1;
    pos[a] = p;
    count[p]++;
  }
  for (int k = 0; k < n; k++)
    if (count[k]) {
      if (!(at[k] = malloc((size_t)(count[k] + 1) * sizeof **at))) {
        rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
        break;
      }
      at[k][0] = -1, count[k] = 0;
    }
  /* Each list in the order the storages are needed (earliest first). */
  for (int a = m - 1; a >= 0 && rc == DLRT_OK; a--) {
    int p = pos[a];
    at[p][count[p]++] = by[a];
    at[p][count[p]] = -1;
  }
  free(pos);
done:
  free(end), free(use), free(by), free(count);
  if (rc < 0) {
    for (int k = 0; at && k < n; k++) free(at[k]);
    free(at);
    return rc;
  }
  *out = at;
  return DLRT_OK;
}

/* ---------------------------------------------------------------- pricing */

static int alloc_plan_arrays(const chooser *z, plan *p) {
  size_t nt = (size_t)(z->g->n_tensors ? z->g->n_tensors : 1);
  p->drop = calloc(nt, 1);
  p->swap_out = calloc(nt, 1);
  p->bytes = calloc(nt, sizeof *p->bytes);
  p->size = calloc(nt, sizeof *p->size);
  return p->drop && p->swap_out && p->bytes && p->size ? DLRT_OK
                                            : dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
}

/* The storages' bytes as the pool holds them for schedule s (the most of
 * it and the executor's evaluation schedule, as exec_spill.c declares
 * them), and their granules. */
static void fill_bytes(const chooser *z, const dlrt__schedule *s, plan *p) {
  const dlrt__schedule *eval = &z->e->plan.plans[DLRT_RUN_FORWARD];
  for (int i = 0; i < z->g->n_tensors; i++) {
    const dlrt_tensor_t *t = z->g->tensors[i];
    uint64_t b = 0;
    if (t->owner == t) {
      b = s->first[i] >= 0 ? dlrt__schedule_bytes(s, t) : 0;
      uint64_t f = eval->first && eval->first[i] >= 0 ? dlrt__schedule_bytes(eval, t) : 0;
      if (f > b) b = f;
      if (!b) b = dlrt__tensor_bytes(t);
      if (!b) b = 4;
    }
    p->size[i] = b;
    p->bytes[i] = t->owner == t ? (b + 511) / 512 * 512 : 0;
  }
}

static int price(const chooser *z, plan *p) {
  dlrt__pool_model m = {
      .g = z->g, .s = &p->s, .node_ms = z->ms, .bytes = p->bytes, .size = p->size,
      .budget = z->budget,
      .bytes_per_s = z->rate, .latency_s = z->latency, .floor_bytes_per_s = z->floor,
      .lookahead = z->lookahead, .policy = z->policy, .swap_out = p->swap_out,
      .first_backward = p->first_backward, .prefetch_at = p->prefetch_at, .inputs = z->inputs,
      .slicing = p->slicing, .overlap = z->overlap,
      /* The executor's own schedule is the one profiled: its blocks' times
       * hold their copies. A schedule made here (segments, drops) was not:
       * its blocks' nodes carry whole-batch times without copies. */
      .held_bytes_per_s = z->block_rate, .blocks_held = !p->own_s,
      .link_latency_s = z->link_latency, .block_gate_s = z->gate};
  return dlrt__model_step_run(&m, &p->step);
}

/* A plan from decisions per candidate (DLRT_SPILL_*): the dropping
 * schedule when any is recomputed, the swaps and their prefetches. */
static int make_plan(const chooser *z, const int *dec, plan *p) {
  memset(p, 0, sizeof *p);
  int rc = alloc_plan_arrays(z, p), any_drop = 0;
  for (int i = 0; i < z->n && rc == DLRT_OK; i++) {
    const candidate *c = &z->c[i];
    const dlrt__node *n = z->g->nodes[c->node];
    if (dec[i] == DLRT_SPILL_RECOMPUTE) {
      for (int o = 0; o < n->n_out; o++) p->drop[n->out[o]->owner->id] = 1;
      for (const int *x = c->closure; *x >= 0; x++) p->drop[*x] = 1;
      any_drop = 1;
    } else if (dec[i] == DLRT_SPILL_SWAP) {
      for (int o = 0; o < n->n_out; o++)
        if (z->saved[n->out[o]->owner->id]) p->swap_out[n->out[o]->owner->id] = 1;
    }
  }
  if (rc == DLRT_OK && any_drop) {
    uint64_t peak;
    rc = dlrt__plan_dropping(z->g, p->drop, &p->s, &peak);
    p->own_s = 1;
    /* Nodes the budget cannot hold whole run in slices, as the executor
     * will run them (dlrt_exec_set_spill). */
    int worst;
    if (rc == DLRT_OK) dlrt__spill_fit(z->g, &p->s, 1, z->policy, z->budget, &p->slicing, &worst);
  } else if (rc == DLRT_OK) {
    p->s = *z->s0; /* borrowed, with the executor's slices */
    p->slicing = z->e->spill.slicing;
  }
  if (rc == DLRT_OK) {
    p->first_backward = first_backward(z->g, &p->s);
    fill_bytes(z, &p->s, p);
    rc = place_prefetches(z, &p->s, p->swap_out, p->first_backward, &p->prefetch_at);
  }
  if (rc == DLRT_OK) rc = price(z, p);
  return rc;
}

/* Segment checkpointing of sqrt(forward nodes), as dlrt_exec_set_checkpointing
 * and spilling make it: its chunked blocks in chunks that fit the budget
 * (dlrt__spill_fit). The executor's own schedule when it checkpoints so
 * already (`current`). */
static int make_segments(const chooser *z, int current, plan *p) {
  memset(p, 0, sizeof *p);
  int rc = alloc_plan_arrays(z, p);
  uint64_t peak;
  if (current) {
    p->s = *z->s0; /* borrowed */
    p->slicing = z->e->spill.slicing;
  } else if (rc == DLRT_OK) {
    rc = dlrt__plan(z->g, DLRT__PHASE_UPDATE,
                    dlrt__checkpoint_segment(z->g, DLRT_CHECKPOINT_SQRT), &p->s, &peak, NULL);
    p->own_s = 1;
    int worst;
    if (rc == DLRT_OK) dlrt__spill_fit(z->g, &p->s, 1, z->policy, z->budget, &p->slicing, &worst);
  }
  if (rc == DLRT_OK) {
    p->first_backward = first_backward(z->g, &p->s);
    fill_bytes(z, &p->s, p);
    rc = price(z, p);
  }
  return rc;
}

/* ---------------------------------------------------------------- candidates */

/* Adds to the closure of a recomputation what node m reads that nothing
 * keeps (a forward intermediate the backward pass never reads), and what
 * that is made from in turn; the cost of their producers to *ms. 0 when
 * one of them cannot run again. */
static int close_over(chooser *z, int m, char *seen, int *list, int *len, double *ms, int depth) {
  const dlrt__node *n = z->g->nodes[m];
  if (writes_inputs(n) || depth > z->g->n_nodes) return 0;
  for (int j = 0; j < n->n_in; j++) {
    const dlrt_tensor_t *x = n->in[j]->owner;
    if (dlrt__persistent(x) || z->saved[x->id] || seen[x->id]) continue;
    int from = z->producer[x->id];
    if (from < 0) return 0;
    seen[x->id] = 1;
    list[(*len)++] = x->id;
    *ms += z->ms[from];
    if (!close_over(z, from, seen, list, len, ms, depth + 1)) return 0;
  }
  return 1;
}

static int find_candidates(chooser *z) {
  dlrt_graph_t *g = z->g;
  const dlrt__schedule *s = z->s0;
  size_t nt = (size_t)(g->n_tensors ? g->n_tensors : 1);
  int fb = first_backward(g, s), rc = DLRT_OK;
  int *last_fw = malloc(nt * sizeof *last_fw), *first_bw = malloc(nt * sizeof *first_bw);
  int *list = malloc(nt * sizeof *list);
  char *seen = calloc(nt, 1);
  double *end = malloc((size_t)(s->n + 1) * sizeof *end);
  z->saved = calloc(nt, 1);
  z->producer = malloc(nt * sizeof *z->producer);
  z->c = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *z->c);
  if (!last_fw || !first_bw || !list || !seen || !end || !z->saved || !z->producer || !z->c) {
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
    goto done;
  }
  double t = 0;
  for (int k = 0; k < s->n; k++) end[k] = (t += z->ms[s->order[k]] / 1e3);
  for (size_t i = 0; i < nt; i++) last_fw[i] = first_bw[i] = -1, z->producer[i] = -1;
  for (int k = 0; k < s->n; k++) {
    const dlrt__node *n = g->nodes[s->order[k]];
    for (int j = 0; j < n->n_in + n->n_out; j++) {
      const dlrt_tensor_t *o = (j < n->n_in ? n->in[j] : n->out[j - n->n_in])->owner;
      if (k < fb) last_fw[o->id] = k;
      else if (first_bw[o->id] < 0) first_bw[o->id] = k;
    }
    if (k < fb)
      for (int o = 0; o < n->n_out; o++)
        if (n->out[o]->owner == n->out[o]) z->producer[n->out[o]->id] = s->order[k];
  }
  for (size_t i = 0; i < nt; i++) {
    const dlrt_tensor_t *o = g->tensors[i];
    z->saved[i] = o->owner == o && !dlrt__persistent(o) && z->producer[i] >= 0 &&
                  first_bw[i] >= 0;
  }
  for (int k = 0; k < fb; k++) {
    int m = s->order[k];
    const dlrt__node *n = g->nodes[m];
    candidate c = {.node = m, .tensor = -1};
    int persistent_out = 0;
    double window = INFINITY;
    for (int o = 0; o < n->n_out; o++) {
      const dlrt_tensor_t *x = n->out[o];
      if (x->owner != x) continue;
      if (dlrt__persistent(x)) persistent_out = 1;
      if (!z->saved[x->id]) continue;
      if (c.tensor < 0) c.tensor = x->id;
      c.bytes += dlrt__alloc_rounded(dlrt__tensor_bytes(x));
      int u = first_bw[x->id], lf = last_fw[x->id];
      double w = (u > 0 ? end[u - 1] : 0) - end[lf];
      if (w < window) window = w;
    }
    if (c.tensor < 0) continue;
    double out_s = copy_s(z, c.bytes);
    c.swap_ms = 1e3 * (out_s + (out_s > window ? out_s - window : 0));
    int len = 0;
    double ms = z->ms[m];
    memset(seen, 0, nt);
    c.can_recompute = !persistent_out && close_over(z, m, seen, list, &len, &ms, 0);
    c.recompute_ms = ms;
    c.closure = malloc((size_t)(len + 1) * sizeof *c.closure);
    if (!c.closure) {
      rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
      goto done;
    }
    memcpy(c.closure, list, (size_t)len * sizeof *list);
    c.closure[len] = -1;
    c.option = c.can_recompute && c.recompute_ms <= c.swap_ms ? DLRT_SPILL_RECOMPUTE
                                                               : DLRT_SPILL_SWAP;
    double cost = c.option == DLRT_SPILL_RECOMPUTE ? c.recompute_ms : c.swap_ms;
    c.score = cost / (double)(c.bytes ? c.bytes : 1);
    z->c[z->n++] = c;
  }
  /* What each recomputation reads of the other candidates: its producer's
   * and its closure's inputs the backward pass also reads. */
  int *cand_of_node = malloc((size_t)(g->n_nodes ? g->n_nodes : 1) * sizeof *cand_of_node);
  if (!cand_of_node) {
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
    goto done;
  }
  for (int i = 0; i < g->n_nodes; i++) cand_of_node[i] = -1;
  for (int i = 0; i < z->n; i++) cand_of_node[z->c[i].node] = i;
  for (int i = 0; i < z->n && rc == DLRT_OK; i++) {
    candidate *c = &z->c[i];
    int len = 0;
    for (int x = -1; x < 0 || c->closure[x] >= 0; x++) {
      const dlrt__node *n = g->nodes[x < 0 ? c->node : z->producer[c->closure[x]]];
      for (int j = 0; j < n->n_in; j++) {
        const dlrt_tensor_t *x_in = n->in[j]->owner;
        int from = z->saved[x_in->id] ? cand_of_node[z->producer[x_in->id]] : -1;
        int dup = from < 0 || from == i;
        for (int q = 0; q < len && !dup; q++) dup = list[q] == from;
        if (!dup) list[len++] = from;
      }
    }
    if (!(c->reads = malloc((size_t)(len + 1) * sizeof *c->reads))) {
      rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
      break;
    }
    memcpy(c->reads, list, (size_t)len * sizeof *list);
    c->reads[len] = -1;
  }
  free(cand_of_node);
  if (rc < 0) goto done;
  z->order = malloc((size_t)(z->n ? z->n : 1) * sizeof *z->order);
  if (!z->order) {
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
    goto done;
  }
  for (int i = 0; i < z->n; i++) z->order[i] = i;
  for (int a = 1; a < z->n; a++)
    for (int b = a; b > 0 && z->c[z->order[b]].score < z->c[z->order[b - 1]].score; b--) {
      int tmp = z->order[b];
      z->order[b] = z->order[b - 1], z->order[b - 1] = tmp;
    }
done:
  free(last_fw), free(first_bw), free(list), free(seen), free(end);
  return rc;
}

static void chooser_free(chooser *z) {
  for (int i = 0; z->c && i < z->n; i++) free(z->c[i].closure), free(z->c[i].reads);
  free(z->c), free(z->order), free(z->saved), free(z->producer), free(z->inputs);
}

/* ---------------------------------------------------------------- the choice */

static void to_prediction(const dlrt__model_step *m, dlrt_step_prediction *p) {
  p->feasible = m->feasible;
  p->step_ms = m->step_ms, p->compute_ms = m->compute_ms;
  p->recompute_ms = m->recompute_ms, p->exposed_ms = m->exposed_ms;
  p->fetched_bytes = m->fetched_bytes, p->spilled_bytes = m->spilled_bytes;
}

/* Whether recomputing candidate i reads a recomputed one, or a recomputed
 * one reads it: recomputations start from what stays (a chain of them
 * would bring every earlier activation back for the backward pass). */
static int chains(const chooser *z, const int *dec, int i) {
  for (const int *r = z->c[i].reads; *r >= 0; r++)
    if (dec[*r] == DLRT_SPILL_RECOMPUTE) return 1;
  for (int k = 0; k < z->n; k++) {
    if (dec[k] != DLRT_SPILL_RECOMPUTE) continue;
    for (const int *r = z->c[k].reads; *r >= 0; r++)
      if (*r == i) return 1;
  }
  return 0;
}

/* The decisions of the first j candidates by rank given their option
 * (forced: every one takes `force`), the rest kept; with `no_chains`, a
 * recomputation that would chain onto another is kept instead. */
static void prefix(const chooser *z, int j, int force, int no_chains, int *dec) {
  for (int i = 0; i < z->n; i++) dec[i] = DLRT_SPILL_KEEP;
  for (int r = 0; r < j && r < z->n; r++) {
    int i = z->order[r];
    const candidate *c = &z->c[i];
    int o = force >= 0 ? force : c->option;
    if (o == DLRT_SPILL_RECOMPUTE && !c->can_recompute) o = DLRT_SPILL_SWAP;
    if (o == DLRT_SPILL_RECOMPUTE && no_chains && chains(z, dec, i)) o = DLRT_SPILL_KEEP;
    dec[i] = o;
  }
}

static double cost_of(const plan *p) { return p->step.feasible ? p->step.step_ms : INFINITY; }

static uint64_t moved_of(const plan *p) { return p->step.fetched_bytes + p->step.spilled_bytes; }

/* Whether plan a is to be run rather than b: a cheaper step, or as cheap
 * a step moving fewer bytes over the link (or as few, with `ties`). A
 * budget that holds everything prices swaps at nothing when the
 * write-backs hide behind compute, yet each one still crosses the link
 * (the small GPT under 1MB/s above its peak: 4.5 MB a step, 4.5 s). */
static int better(const plan *a, const plan *b, int ties) {
  double ca = cost_of(a), cb = cost_of(b);
  if (ca != cb) return ca < cb;
  return isfinite(ca) && (ties ? moved_of(a) <= moved_of(b) : moved_of(a) < moved_of(b));
}

void dlrt__exec_choice_free(dlrt__exec_choice *c) {
  for (int k = 0; c->prefetch_at && k < c->n_positions; k++) free(c->prefetch_at[k]);
  free(c->prefetch_at);
  free(c->swap_out);
  free(c->decisions);
  memset(c, 0, sizeof *c);
}

const char *dlrt_plan_strategy_name(dlrt_plan_strategy s) {
  static const char *const names[] = {"belady", "swap", "recompute", "auto"};
  return s >= 0 && s < DLRT_PLAN_STRATEGIES_ ? names[s] : NULL;
}

int dlrt_plan_strategy_parse(const char *text, dlrt_plan_strategy *out) {
  DLRT__CHECK_ARG(text && out, "dlrt_plan_strategy_parse: text or out is NULL");
  for (int i = 0; i < DLRT_PLAN_STRATEGIES_; i++)
    if (strcmp(text, dlrt_plan_strategy_name((dlrt_plan_strategy)i)) == 0) {
      *out = (dlrt_plan_strategy)i;
      return DLRT_OK;
    }
  return dlrt__set_error(DLRT_ERR_INVALID_ARG, "unknown spilling strategy '%s': give belady, "
                         "swap, recompute or auto", text);
}

/* Spilling off, the schedule made again, spilling on (the pool sizes its
 * storages from the schedule), as dlrt_exec_set_checkpointing does. */
static int replan(dlrt_exec_t *e, const char *drop) {
  dlrt_spill_config c = e->spill.cfg, off = c;
  off.device_budget = 0;
  int rc = dlrt_exec_set_spill(e, &off);
  if (rc == DLRT_OK) rc = dlrt__exec_replan_dropping(e, 0, drop);
  return rc == DLRT_OK ? dlrt_exec_set_spill(e, &c) : rc;
}

/* The decisions as run, from the plan chosen. */
static int record(dlrt_exec_t *e, const chooser *z, const int *dec, const plan *p) {
  dlrt__exec_choice *ch = &e->choice;
  ch->decisions = calloc((size_t)(z->n ? z->n : 1), sizeof *ch->decisions);
  if (!ch->decisions) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  ch->n_decisions = z->n;
  dlrt_spill_plan *sp = &ch->plan;
  for (int i = 0; i < z->n; i++) {
    const candidate *c = &z->c[i];
    dlrt__decision *d = &ch->decisions[i];
    d->tensor = c->tensor, d->node = c->node, d->bytes = c->bytes;
    d->swap_ms = c->swap_ms, d->recompute_ms = c->can_recompute ? c->recompute_ms : INFINITY;
    if (dec) {
      d->choice = dec[i];
    } else if (ch->strategy == DLRT_PLAN_RECOMPUTE) {
      /* Segments: recomputed when its producer runs again in the backward pass. */
      d->choice = DLRT_SPILL_KEEP;
      for (int k = p->first_backward; k < p->s.n; k++)
        if (p->s.order[k] == c->node) d->choice = DLRT_SPILL_RECOMPUTE;
    } else {
      d->choice = DLRT_SPILL_KEEP;
    }
    sp->kept += d->choice == DLRT_SPILL_KEEP;
    sp->swapped += d->choice == DLRT_SPILL_SWAP;
    sp->recomputed += d->choice == DLRT_SPILL_RECOMPUTE;
    if (d->choice == DLRT_SPILL_SWAP) sp->swapped_bytes += c->bytes;
    if (d->choice == DLRT_SPILL_RECOMPUTE) sp->recomputed_bytes += c->bytes;
  }
  sp->decisions = z->n;
  return DLRT_OK;
}

static int choose(dlrt_exec_t *e, dlrt_plan_strategy strategy, const dlrt__op_costs *costs,
                  const dlrt_link_info *link, double gate) {
  const dlrt_plan_strategy asked = strategy;
  dlrt_graph_t *g = e->g;
  chooser z = {.e = e, .g = g, .s0 = &e->plan.plans[DLRT_RUN_TRAIN], .ms = costs->node_ms,
               .budget = e->spill.cfg.device_budget, .lookahead = e->spill.cfg.prefetch,
               .policy = e->spill.cfg.policy};
  const dlrt_link_info li = *link;
  dlrt_device_props props;
  int rc = dlrt_device_props_get(e->dev, &props);
  if (rc < 0) return rc;
  z.rate = li.active ? li.bytes_per_s : 0;
  /* Each copy pays the link's latency and the stream's own hand-offs. */
  double overhead = props.host_addressable ? dlrt__copy_overhead_s(e->dev) : 0;
  z.latency = (li.active ? li.latency_s : 0) + overhead;
  z.link_latency = li.active ? li.latency_s : 0;
  z.gate = gate;
  z.overlap = dlrt__slice_overlap(props.kind == DLRT_DEVICE_CPU);
  /* On a device that shares host memory a copy is a memcpy: no faster than
   * the host's (the profiling pass's own copies, waited for one by one,
   * counted the pass's waits too: their rate was a fraction of this). */
  z.floor = !props.host_addressable ? 0 : costs->memcpy_bytes_per_s;
  /* The profile's blocks made their copies at the host's memcpy there, at
   * the device's measured copy rate elsewhere (0, unmeasured: priced whole). */
  z.block_rate = props.host_addressable ? costs->memcpy_bytes_per_s : costs->copy_bytes_per_s;
  if (!li.active && !props.host_addressable) z.rate = 16e9; /* unmeasured: a PCIe 4 guess */
  int n_in = 0;
  z.inputs = malloc((size_t)(g->n_tensors + 1) * sizeof *z.inputs);
  if (!z.inputs) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  for (int i = 0; i < g->n_tensors; i++)
    if (g->tensors[i]->owner == g->tensors[i] && g->tensors[i]->kind == DLRT__TENSOR_INPUT)
      z.inputs[n_in++] = i;
  z.inputs[n_in] = -1;
  if ((rc = find_candidates(&z)) < 0) {
    chooser_free(&z);
    return rc;
  }
  int *dec = malloc((size_t)(z.n ? z.n : 1) * sizeof *dec);
  int *best_dec = malloc((size_t)(z.n ? z.n : 1) * sizeof *best_dec);
  plan pure[3], best = {0}, trial;
  memset(pure, 0, sizeof pure);
  if (!dec || !best_dec) rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  /* The pure strategies. */
  /* Checkpointing already (the plain schedule does not fit the budget):
   * the segments alone can run. */
  int segments_only = e->plan.checkpoint_every != 0;
  if (segments_only) {
    strategy = DLRT_PLAN_RECOMPUTE;
  } else {
    if (rc == DLRT_OK) prefix(&z, 0, -1, 0, dec), rc = make_plan(&z, dec, &pure[DLRT_PLAN_BELADY]);
    if (rc == DLRT_OK)
      prefix(&z, z.n, DLRT_SPILL_SWAP, 0, dec), rc = make_plan(&z, dec, &pure[DLRT_PLAN_SWAP]);
  }
  if (rc == DLRT_OK) rc = make_segments(&z, segments_only, &pure[DLRT_PLAN_RECOMPUTE]);
  dlrt__exec_choice *ch = &e->choice;
  dlrt_spill_plan *sp = &ch->plan;
  for (int i = 0; rc == DLRT_OK && i < 3; i++) to_prediction(&pure[i].step, &sp->strategies[i]);
  if (rc == DLRT_OK && segments_only)
    to_prediction(&pure[DLRT_PLAN_RECOMPUTE].step, &sp->strategies[DLRT_PLAN_AUTO]);
  /* The planner's own: prefixes of the ranking, on a grid then around the
   * best point of it, each with the cheaper options and with swaps only. */
  double best_ms = INFINITY;
  int best_j = 0, best_force = -1;
  if (rc == DLRT_OK && strategy == DLRT_PLAN_AUTO) {
    int grid = z.n < 16 ? 1 : z.n / 16;
    for (int pass = 0; pass < 2 && rc == DLRT_OK; pass++) {
      int lo = pass ? best_j - grid : 0, hi = pass ? best_j + grid : z.n, step = pass ? 1 : grid;
      if (pass && grid == 1) break;
      for (int j = lo < 1 ? 1 : lo; j <= hi && j <= z.n && rc == DLRT_OK; j += step)
        for (int f = 0; f < 5 && rc == DLRT_OK; f++) {
          /* The cheaper options, with and without chains of recomputation;
           * swaps only; recomputations only, with and without chains. */
          int force = f == 2 ? DLRT_SPILL_SWAP : f >= 3 ? DLRT_SPILL_RECOMPUTE : -1;
          prefix(&z, j, force, f == 1 || f == 4, dec);
          if ((rc = make_plan(&z, dec, &trial)) < 0) break;
          if (cost_of(&trial) < best_ms || (best_ms < INFINITY && better(&trial, &best, 0))) {
            plan_free(&best, z.s0->n);
            best = trial, best_ms = cost_of(&trial), best_j = j, best_force = force;
            memcpy(best_dec, dec, (size_t)z.n * sizeof *dec);
          } else {
            plan_free(&trial, trial.s.n);
          }
        }
    }
    to_prediction(&best.step, &sp->strategies[DLRT_PLAN_AUTO]);
  }
  (void)best_force;
  /* What runs: the asked strategy, or for AUTO the cheapest of all. */
  dlrt_plan_strategy chosen = strategy;
  const plan *run = NULL;
  if (rc == DLRT_OK) {
    if (strategy == DLRT_PLAN_AUTO) {
      run = &best;
      for (int i = 0; i < 3; i++)
        if (better(&pure[i], run, 1)) run = &pure[i], chosen = (dlrt_plan_strategy)i;
      if (!isfinite(cost_of(run))) run = &pure[DLRT_PLAN_BELADY], chosen = DLRT_PLAN_BELADY;
    } else {
      run = &pure[strategy];
    }
    ch->strategy = chosen;
    sp->asked = segments_only ? asked : strategy, sp->chosen = chosen;
    to_prediction(&run->step, &sp->predicted);
    sp->link_bytes_per_s = z.rate > 0 ? z.rate : z.floor;
    sp->link_latency_s = li.active ? li.latency_s : 0;
    sp->copy_overhead_s = overhead;
    sp->copy_floor_bytes_per_s = z.floor;
    double total = 0; /* each node once: no recomputation */
    for (int i = 0; i < g->n_nodes; i++) total += z.ms[i];
    sp->unlimited_ms = total;
  }
  /* Set it up: the schedule, then the swaps and prefetches on it. */
  const int *run_dec = NULL;
  if (rc == DLRT_OK) {
    if (chosen == DLRT_PLAN_SWAP) prefix(&z, z.n, DLRT_SPILL_SWAP, 0, dec), run_dec = dec;
    else if (chosen == DLRT_PLAN_BELADY) prefix(&z, 0, -1, 0, dec), run_dec = dec;
    else if (chosen == DLRT_PLAN_AUTO) run_dec = best_dec;
    rc = record(e, &z, chosen == DLRT_PLAN_RECOMPUTE ? NULL : run_dec, run);
  }
  int any_drop = 0, any_swap = 0;
  for (int i = 0; run_dec && i < z.n; i++)
    any_drop |= run_dec[i] == DLRT_SPILL_RECOMPUTE, any_swap |= run_dec[i] == DLRT_SPILL_SWAP;
  if (rc == DLRT_OK && chosen == DLRT_PLAN_RECOMPUTE && !segments_only)
    rc = dlrt_exec_set_checkpointing(e, DLRT_CHECKPOINT_SQRT);
  else if (rc == DLRT_OK && any_drop)
    rc = replan(e, run->drop);
  if (rc == DLRT_OK && any_swap) {
    const dlrt__schedule *s = &e->plan.plans[DLRT_RUN_TRAIN];
    size_t nt = (size_t)(g->n_tensors ? g->n_tensors : 1);
    ch->first_backward = first_backward(g, s);
    ch->swap_out = malloc(nt);
    if (!ch->swap_out) rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
    else memcpy(ch->swap_out, run->swap_out, nt);
    if (rc == DLRT_OK) rc = place_prefetches(&z, s, ch->swap_out, ch->first_backward,
                                             &ch->prefetch_at);
    ch->n_positions = s->n;
  }
  for (int i = 0; i < 3; i++) plan_free(&pure[i], pure[i].s.n);
  plan_free(&best, best.s.n);
  free(dec), free(best_dec);
  chooser_free(&z);
  return rc;
}

int dlrt_exec_plan_spill(dlrt_exec_t *e, dlrt_plan_strategy strategy) {
  DLRT__CHECK_ARG(e && strategy >= 0 && strategy < DLRT_PLAN_STRATEGIES_,
                  "dlrt_exec_plan_spill: executor is NULL or strategy %d", (int)strategy);
  if (!e->spill.pool)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_exec_plan_spill: spilling is off: set a device "
                           "budget first (dlrt_exec_set_spill, dltrain --mem-limit)");
  /* Checkpointing in segments of sqrt(n) is the recompute strategy: auto
   * or recompute may start from it (the trainer's when the plain schedule
   * does not fit the budget). */
  int sqrt_segments = e->plan.checkpoint_every ==
                      dlrt__checkpoint_segment(e->g, DLRT_CHECKPOINT_SQRT);
  if ((e->plan.checkpoint_every != 0 &&
       !(sqrt_segments && (strategy == DLRT_PLAN_AUTO || strategy == DLRT_PLAN_RECOMPUTE))) ||
      e->choice.on)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_exec_plan_spill: the executor %s; the planner "
                           "starts from the plain schedule (its recompute strategy checkpoints)",
                           e->choice.on ? "has a plan already" : "checkpoints");
  /* The profiling pass and the replanning move storages: without the
   * link's modelled time, which the kernels' times do not need. */
  dlrt_link_info li;
  int rc = dlrt_link_get(e->dev, &li);
  if (rc < 0) return rc;
  char spec[sizeof li.spec];
  snprintf(spec, sizeof spec, "%s", li.spec);
  /* The link's notice and gate, a copy (on a device whose copies the
   * profile times at the host's memcpy, inside its blocks). */
  dlrt_device_props props;
  if ((rc = dlrt_device_props_get(e->dev, &props)) < 0) return rc;
  double gate = li.active && props.host_addressable ? dlrt__link_gate_s(e->dev, spec) : 0;
  if (li.active && (rc = dlrt_link_set(e->dev, "none")) < 0) return rc;
  dlrt__op_costs costs;
  rc = dlrt__op_costs_measure(e, 3, &costs);
  if (rc == DLRT_OK) {
    e->choice.plan.profile_ms = costs.profile_ms;
    e->choice.plan.profile_cached = costs.cached;
    rc = choose(e, strategy, &costs, &li, gate);
  }
  dlrt__op_costs_free(&costs);
  /* The link back, and the values as they started (the profiling pass ran
   * updates). */
  if (li.active) {
    int rc2 = dlrt_link_set(e->dev, spec);
    if (rc == DLRT_OK) rc = rc2;
  }
  if (rc == DLRT_OK) rc = dlrt__exec_materialize(e);
  if (rc == DLRT_OK) rc = dlrt_mem_reset_peak(e->dev);
  if (rc == DLRT_OK) e->choice.on = 1;
  else dlrt__exec_choice_free(&e->choice);
  return rc;
}

int dlrt_exec_spill_plan(dlrt_exec_t *e, dlrt_spill_plan *out) {
  DLRT__CHECK_ARG(e && out, "dlrt_exec_spill_plan: executor or out is NULL");
  memset(out, 0, sizeof *out);
  if (e->choice.on) *out = e->choice.plan;
  return DLRT_OK;
}

int dlrt_exec_spill_decision(dlrt_exec_t *e, int index, dlrt_spill_decision *out) {
  DLRT__CHECK_ARG(e && out && index >= 0 && index < e->choice.n_decisions,
                  "dlrt_exec_spill_decision: executor or out is NULL, or index %d not in "
                  "[0, %d)", index, e ? e->choice.n_decisions : 0);
  const dlrt__decision *d = &e->choice.decisions[index];
  out->tensor = e->g->tensors[d->tensor]->name;
  out->op = dlrt__op_name(e->g->nodes[d->node]->op);
  out->bytes = d->bytes;
  out->choice = (dlrt_spill_choice)d->choice;
  out->swap_ms = d->swap_ms;
  out->recompute_ms = d->recompute_ms;
  out->cost_ms = d->choice == DLRT_SPILL_SWAP        ? d->swap_ms
                 : d->choice == DLRT_SPILL_RECOMPUTE ? d->recompute_ms
                                                     : 0;
  return DLRT_OK;
}
