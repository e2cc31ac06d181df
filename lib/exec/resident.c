/* resident.c — the plain residency policy (residency.h): without a budget
 * every storage a node needs is on the device; outputs are allocated from
 * the device's caching allocator just before their node and freed right
 * after their last use, all on the executor's stream, so the stream-ordered
 * allocator recycles memory with no host synchronization. */
#include "config.h"

#include "exec/residency.h"
#include "mem/buffer.h"

/* Allocates the outputs of position k that have no storage yet (c: in a
 * chunked block, where a chunk's own hold its images only). An output
 * taking over its first input's storage gets that buffer (the input still
 * reads it during this node; it is handed over once the node is queued).
 * Each block holds just its request's granules (an exact allocation): a
 * cached block larger by up to a MiB, which the allocator would hand out
 * whole, gives its rest back, so a step holds what its plan counts. */
static int alloc_outputs(dlrt_exec_t *e, const dlrt__schedule *s, int k, const dlrt__chunk *c) {
  dlrt__node *n = e->g->nodes[s->order[k]];
  int rc = DLRT_OK;
  if (s->inplace[k] >= 0) e->bufs[n->out[dlrt__inplace_output(n)]->id] = e->bufs[s->inplace[k]];
  for (int j = 0; j < n->n_out && rc == DLRT_OK; j++) {
    dlrt_tensor_t *t = n->out[j];
    if (t->owner != t || e->bufs[t->id]) continue;
    size_t bytes = dlrt__tensor_bytes(t);
    if (c && s->local[t->id] == 1) bytes = bytes / (size_t)c->n * (size_t)c->nb;
    rc = dlrt__buffer_alloc_ex(e->dev, bytes ? bytes : 4, e->stream, 1, &e->bufs[t->id]);
  }
  return rc;
}

static void plain_discard(dlrt_exec_t *e, int id) {
  dlrt_buffer_free(e->bufs[id]);
  e->bufs[id] = NULL;
}

/* Frees what ends at position k (in a chunked block before its last chunk,
 * only the chunk's own storages: the whole batch's live on). */
static void free_ended(dlrt_exec_t *e, const dlrt__schedule *s, int k, int whole_batch_too) {
  if (s->inplace[k] >= 0) e->bufs[s->inplace[k]] = NULL;
  for (int *f = s->frees[k]; *f >= 0; f++)
    if (whole_batch_too || s->local[*f]) plain_discard(e, *f);
}

static void plain_begin_run(dlrt_exec_t *e, const dlrt__schedule *s) { (void)e, (void)s; }

static int plain_begin_node(dlrt_exec_t *e, const dlrt__schedule *s, int k, int *done_on_host) {
  *done_on_host = 0;
  int rc = alloc_outputs(e, s, k, NULL);
  /* The run stops here: hand an in-place input's storage over and free what
   * ends, so that the run's cleanup frees each buffer once. */
  if (rc < 0) free_ended(e, s, k, 1);
  return rc;
}

static int plain_end_node(dlrt_exec_t *e, const dlrt__schedule *s, int k) {
  free_ended(e, s, k, 1);
  return DLRT_OK;
}

static int plain_begin_block(dlrt_exec_t *e, const dlrt__schedule *s, const dlrt__chunk_block *b,
                             const char **local) {
  (void)e, (void)b;
  *local = s->local;
  return DLRT_OK;
}

static int plain_chunk_in(dlrt_exec_t *e, int64_t b0, int64_t nb) {
  (void)e, (void)b0, (void)nb;
  return DLRT_OK;
}

static int plain_chunk_outputs(dlrt_exec_t *e, const dlrt__schedule *s, int k, const dlrt__chunk *c) {
  return alloc_outputs(e, s, k, c);
}

static int plain_chunk_done(dlrt_exec_t *e, const dlrt__schedule *s, const dlrt__chunk_block *b, int k,
                            const dlrt__chunk *c) {
  (void)b;
  free_ended(e, s, k, c->b0 + c->nb >= c->n);
  return DLRT_OK;
}

static int plain_end_block(dlrt_exec_t *e, const dlrt__schedule *s, const dlrt__chunk_block *b) {
  (void)e, (void)s, (void)b;
  return DLRT_OK;
}

const dlrt__residency dlrt__residency_plain = {
    .begin_run = plain_begin_run,
    .begin_node = plain_begin_node,
    .end_node = plain_end_node,
    .begin_block = plain_begin_block,
    .chunk_in = plain_chunk_in,
    .chunk_outputs = plain_chunk_outputs,
    .chunk_done = plain_chunk_done,
    .end_block = plain_end_block,
    .discard = plain_discard,
};
