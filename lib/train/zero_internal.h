/* zero_internal.h — what zero.c (a trainer's replicas' shards) and
 * zero_peer.c (the shards of one executor among ranks: a split model's
 * peers, a pipeline's stages) share: the shards' layout and the helpers
 * that make, update, gather and count them, all in zero.c (internal). */
#ifndef DLRT_ZERO_INTERNAL_H
#define DLRT_ZERO_INTERNAL_H

#include "exec/exec.h"
#include "train/train.h"

#define ZERO_ALIGN 64 /* elements between cuts within a parameter */

typedef struct {
  int id;                         /* the parameter (tensor id) */
  int64_t flat, off, count;       /* its elements [off, off + count), at `flat` */
  dlrt_buffer_t *state0, *state1; /* its optimizer state (state1: Adam's second moment) */
  dlrt_buffer_t *grad;            /* stage >= 2: its reduced gradient */
  dlrt_buffer_t *param;           /* stage 3: its values between steps */
} zero_piece;

typedef struct {
  dlrt_exec_t *e;
  dlrt_device_t *dev;
  int rank; /* the owner it is: [cut[rank], cut[rank + 1]) */
  zero_piece *pieces;
  int n_pieces;
} zero_member;

struct dlrt__zero {
  int stage, owners, across;
  int tensor_order; /* the gradient vector in tensor order (dlrt_exec_gradients_read's), not
                       bucket order: a tensor-parallel peer's at stage 1 */
  dlrt_zero_collectives coll;
  int n_params;          /* laid out, in bucket order: */
  int *ids;              /* tensor id */
  int64_t *at, *numel;   /* flat offset, elements */
  int64_t total;
  int n_tensors;
  int64_t *at_of;        /* by tensor id: flat offset, -1 when not laid out */
  int *state_of;         /* by tensor id: 1 + which (0, 1) for optimizer state, else 0 */
  int *param_of;         /* by tensor id: the parameter an optimizer state is of */
  int64_t *cut;          /* owners + 1 */
  float *params;         /* pinned: every parameter, current after each update */
  float *state[2];       /* the whole optimizer state as of the last gather */
  int n_state, state_valid;
  zero_member *members;
  int n_members;
  void **requests;       /* owners: the all-gathers' */
};

int dlrt__zero_oom(void);
void dlrt__zero_destroy(struct dlrt__zero *z);
/* Stage 3's gather of parameter `id` from the host copy (a
 * dlrt__param_fetch_fn; user: the dlrt__zero). */
int dlrt__zero_fetch_param(void *user, dlrt_exec_t *e, int id, dlrt_buffer_t *buf,
                           dlrt_stream_t *stream);
/* The layout of e's parameters (ids, flat offsets `at`, n) and the cuts. */
int dlrt__zero_lay_out_params(struct dlrt__zero *z, const dlrt_exec_t *e, int n, const int *ids,
                              const int64_t *at);
/* The pinned host copy of every parameter (from params_from) and the whole
 * optimizer state (from state_from; sgd: one state). */
int dlrt__zero_host_copies(struct dlrt__zero *z, dlrt_device_t *dev, dlrt_exec_t *params_from,
                           dlrt_exec_t *state_from, int sgd);
/* Member m's pieces of its range on its device. */
int dlrt__zero_make_pieces(struct dlrt__zero *z, zero_member *m);
/* Each owner's range of `values` to every process. */
int dlrt__zero_all_gather(struct dlrt__zero *z, float *values);
/* Each member's update of its range from `grads` times `scale`. */
int dlrt__zero_update_ranges(struct dlrt__zero *z, const float *grads, float scale);
/* Stages 1 and 2: every member takes every parameter from the host copy. */
int dlrt__zero_take_params(struct dlrt__zero *z);
/* The whole optimizer state into the host copies (collective across
 * processes). */
int dlrt__zero_gather_state(struct dlrt__zero *z);
/* dlrt_exec_export of `main`, from the host copies where it holds a shard. */
int dlrt__zero_export_from(struct dlrt__zero *z, dlrt_exec_t *main, dlrt_exec_t *stats_from,
                           int with_state, dlrt_host_tensor **tensors, int *n);
/* The model-state bytes e holds now with m's pieces (m NULL: none), and an
 * unsharded replica's of e's graph. */
void dlrt__zero_held_bytes(const dlrt_exec_t *e, const zero_member *m, uint64_t *params,
                           uint64_t *grads, uint64_t *state);
void dlrt__zero_full_bytes(const dlrt_exec_t *e, dlrt_zero_info *out);

#endif
