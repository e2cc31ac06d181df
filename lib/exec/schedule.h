/* schedule.h — schedules, the planner that makes them (schedule.c) and
 * their chunked blocks (chunk.c), and the executor's planning part
 * (internal). */
#ifndef DLRT_EXEC_SCHEDULE_H
#define DLRT_EXEC_SCHEDULE_H

#include <limits.h>

#include "graph/graph.h"
#include "mem/caching_allocator.h" /* dlrt__alloc_block_bytes */

/* Positions [begin, end) of a schedule that run a chunk of `chunk` images
 * at a time over a batch of `batch` (chunk.c). `full` is the chunk it was
 * planned with (a whole number of its convolutions' own chunks); `unit`
 * what any chunk must be a whole number of (its convolutions' pieces, the
 * images each of their GEMMs covers). A slice block (`one_node`: spilling
 * adds it, dlrt__add_slice_blocks) is one node that holds more than the
 * budget whole, run over its `batch` items (rows of an elementwise node,
 * sequences of an attention node) `chunk` at a time, each operand but a
 * broadcast one in slices.
 *
 * A split backward block (chunk.c: split_backward) is two blocks, the
 * second right after the first in `blocks`: `again` (on the first) is how
 * many positions at the start of the second run the first's max-pool
 * gradients again. Spilling in slices may run the two as one
 * (dlrt__fuse_split_blocks): the first's `end` moves to the second's, its
 * positions [skip_begin, skip_end) (the max-pool gradients made again) do
 * not run, their outputs (a chunk's pooled gradients) living on from the
 * first half instead, and the second is `fused` into it (its positions'
 * block_of is the first's). */
typedef struct {
  int begin, end;
  int64_t batch, chunk, full, unit;
  int one_node;
  int again, skip_begin, skip_end, fused;
} dlrt__chunk_block;

/* Whether position k of block b does not run: a max-pool gradient made
 * again in a fused split block. */
static inline int dlrt__block_skips(const dlrt__chunk_block *b, int k) {
  return k >= b->skip_begin && k < b->skip_end;
}

typedef struct {
  int *order;     /* node indices */
  int n;
  /* frees[i]: storages (tensor ids) whose last use is order[i], -1 ended. */
  int **frees;
  /* inplace[i]: the input (tensor id) whose storage order[i]'s output
   * (dlrt__inplace_output) takes over, or -1. */
  int *inplace;
  /* For spilling: next[i][j], the next position that touches the storage of
   * order[i]'s input j (j < n_in) or output j - n_in, -1 if none in this
   * run; first[id], a storage's first position, -1 if none; last_forward,
   * the position of the forward pass's last node (before the first node of
   * another phase: later forward nodes recompute checkpointed segments). */
  int **next;
  int *first;
  int last_forward;
  /* Chunked blocks (checkpointed training only; NULL and 0 without):
   * block_of[k], position k's block or -1; local[id], 1 for a storage that
   * holds one chunk's images, 2 for a convolution's workspace in a block
   * (both made again for each chunk), 0 for the rest. A block's storages
   * of the whole batch that end inside it are freed after its last chunk
   * (the frees at its last position). */
  dlrt__chunk_block *blocks;
  int n_blocks;
  int *block_of;
  char *local;
} dlrt__schedule;

/* The output of node n that takes over its first input's storage when the
 * schedule runs it in place (inplace[i] >= 0): the elementwise ops' one, or
 * the fused cross-entropy's gradient of the logits, which its kernels write
 * over the logits element by element once the row's statistics are known. */
static inline int dlrt__inplace_output(const dlrt__node *n) {
  return n->op == DLRT__OP_XENT ? 2 : 0;
}

/* Planning (exec.c, schedule.c): the two schedules and what they hold. */
typedef struct {
  dlrt__schedule plans[2];         /* by dlrt_run_mode */
  uint64_t planned_peak;     /* the larger of the two */
  uint64_t train_peak, forward_peak;
  int checkpoint_every;      /* forward nodes per recomputed segment (0: none) */
  uint64_t peak_base;        /* allocator's allocated bytes before this executor */
  uint64_t param_bytes, state_bytes;
  int64_t params;
} dlrt__exec_plan;

/* What a graph's runs hold at their planned peak, in allocator bytes (the
 * blocks of dlrt__alloc_block_bytes): the executor's plan without a device. */
typedef struct {
  uint64_t params, state, inputs; /* inputs: the batch and kept tensors */
  uint64_t grads, activations;    /* activations: every other intermediate */
  uint64_t activation_peak;       /* the most activation bytes live at any one time */
  uint64_t peak;                  /* their sum: the planned peak */
  int forward_at_peak;            /* the peak is the forward schedule's (an
                                     evaluation's), not a training step's */
  uint64_t least_spill;           /* the least budget spilling can train in, with
                                     the given offload policy */
} dlrt__memory_breakdown;

/* `beside_forward`: bytes that only the forward schedule has beside it (an
 * evaluation's loader, while the training loader stays for the next epoch):
 * the peak is the forward one's when it is larger with them. `policy`: the
 * offload policy least_spill assumes. */
int dlrt__graph_plan_memory(dlrt_graph_t *g, int checkpoint_every, dlrt_offload_policy policy,
                            uint64_t beside_forward,
                            dlrt__memory_breakdown *out);
/* Builds the schedule of the nodes whose phase is <= max_phase (every > 0:
 * checkpointed segments of that many forward nodes, run in chunked blocks
 * where they can be) and its peak of live bytes
 * (schedule.c). */
int dlrt__plan(dlrt_graph_t *g, dlrt__node_phase max_phase, int every, dlrt__schedule *s, uint64_t *peak,
               dlrt__memory_breakdown *at_peak);
/* The training schedule without segments in which the storages marked in
 * drop[] (by tensor id: forward intermediates) are freed after their last
 * forward use and made again, with the dropped storages they are made
 * from, just before the first backward node that reads them (choose.c
 * picks them). */
int dlrt__plan_dropping(dlrt_graph_t *g, const char *drop, dlrt__schedule *s, uint64_t *peak);
/* The bytes a storage holds in schedule s: one chunk's images for a
 * chunked block's own (local 1), a workspace's columns for at most a
 * chunk (local 2), else all of it. */
uint64_t dlrt__schedule_bytes(const dlrt__schedule *s, const dlrt_tensor_t *t);
/* Plans both of the executor's schedules again for checkpoint segments of
 * `every` (0: none) (exec.c). */
int dlrt__exec_replan(dlrt_exec_t *e, int every);
/* The same with the training schedule of dlrt__plan_dropping when drop is
 * not NULL (every is then 0). */
int dlrt__exec_replan_dropping(dlrt_exec_t *e, int every, const char *drop);
void dlrt__schedule_free(dlrt__schedule *s);
/* Finds the chunked blocks of a checkpointed training schedule (segments
 * of `every` forward nodes) and fills s->blocks, block_of and local. */
int dlrt__find_chunk_blocks(const dlrt_graph_t *g, dlrt__schedule *s, int every);
/* Runs each block in chunks as planned again (spilling may run fewer), and
 * removes the slice blocks that spilling added. */
void dlrt__reset_chunks(dlrt__schedule *s);
/* Split blocks run as one (see dlrt__chunk_block): fuses the pair whose
 * first block is blocks[i], or parts it again (dlrt__reset_chunks parts
 * them all). Whether chunk-local storage `id`, ending at position k of
 * block b, lives on because a skipped position would have made it again. */
void dlrt__fuse_split_blocks(dlrt__schedule *s, int i, int fuse);
int dlrt__block_keeps(const dlrt_graph_t *g, const dlrt__schedule *s, const dlrt__chunk_block *b,
                      int k, int id);
/* Slice blocks (chunk.c): the items node n can run in slices of (its
 * output's rows, or an attention's sequences; every item computed alone,
 * so any slicing gives the same bits), or 0 when it cannot; whether its
 * touch j (input j, or output j - n_in) moves in slices (not a broadcast
 * bias). dlrt__add_slice_blocks makes each plain position of graph node
 * `node` in s a slice block of all its items; returns how many it made,
 * or a negative status. */
int64_t dlrt__slice_items(const dlrt__node *n);
int dlrt__slice_operand(const dlrt__node *n, int j);
int dlrt__add_slice_blocks(const dlrt_graph_t *g, dlrt__schedule *s, int node);
/* The segment length that means "cut at the marks only"
 * (DLRT_CHECKPOINT_MARKS): longer than any graph, so no length cut. */
#define DLRT__SEGMENTS_AT_MARKS INT_MAX

/* The checkpoint segments of the forward nodes fwd[0..n_fwd) (graph node
 * indices, in order) for segments of `every` nodes: seg[f] is node f's.
 * A segment also ends at each max-pool, which closes a convolution block
 * (one that can run in chunks of images: chunk.c), and is not cut by
 * length just before a bias, ReLU or max-pool. With every =
 * DLRT__SEGMENTS_AT_MARKS a segment ends at each node that makes a tensor
 * marked by dlrt_checkpoint_mark (and at max-pools) instead. Returns how
 * many. */
int dlrt__checkpoint_segments(const dlrt_graph_t *g, const int *fwd, int n_fwd, int every,
                              int *seg);
/* Forward nodes per segment for a checkpointing setting (0, N,
 * DLRT_CHECKPOINT_SQRT: ceil(sqrt(forward nodes)), or
 * DLRT_CHECKPOINT_MARKS: DLRT__SEGMENTS_AT_MARKS). */
int dlrt__checkpoint_segment(const dlrt_graph_t *g, int every);
/* Forward nodes that make a tensor marked by dlrt_checkpoint_mark. */
int dlrt__checkpoint_marks(const dlrt_graph_t *g);

#endif
