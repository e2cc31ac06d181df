/* graph.h — the static graph's objects (internal): tensors, nodes, and the
 * graph that owns them. lib/graph/graph.c builds the forward pass,
 * autodiff.c appends the backward pass and the updates, exec.c plans and
 * runs it on a device. */
#ifndef DLRT_GRAPH_GRAPH_H
#define DLRT_GRAPH_GRAPH_H

#include "dlrt.h"
#include "graph/op_params.h"

typedef enum {
  DLRT__TENSOR_INTERMEDIATE, /* produced by a node, freed after its last use */
  DLRT__TENSOR_INPUT,        /* written by the caller */
  DLRT__TENSOR_PARAM,        /* trained; lives as long as the executor */
  DLRT__TENSOR_STATE,        /* optimizer state (momentum, moments) */
  /* State the forward pass keeps across runs (dlrt_state: key / value
   * caches): zero when the executor is made, written in place by the ops
   * that take it, never trained nor exported for checkpoints. */
  DLRT__TENSOR_CACHE,
} dlrt__tensor_kind;

typedef enum {
  DLRT__PHASE_FORWARD,
  DLRT__PHASE_BACKWARD,
  DLRT__PHASE_UPDATE,
} dlrt__node_phase;

/* Each op's parameters are the node's member named in brackets
 * (lib/graph/op_params.h says what each field means). */
typedef enum {
  DLRT__OP_FILL,        /* out = value [fill]; loss_seed: times the loss scale */
  DLRT__OP_BMM,         /* out[b] = op(in0[b]) op(in1[b]) [bmm] */
  DLRT__OP_BIAS_ROWS,   /* out = in0 + in1[col] [rows] */
  DLRT__OP_BIAS_CHANNELS, /* out = in0 + in1[channel] [channels] */
  DLRT__OP_RELU,
  DLRT__OP_RELU_GRAD,   /* out = in0 (dy) where in1 > 0 */
  DLRT__OP_ADD,
  DLRT__OP_MUL,
  DLRT__OP_SCALE,       /* out = alpha * in0 [scale] */
  DLRT__OP_SUM,         /* out[0] = sum of in0 */
  DLRT__OP_BROADCAST,   /* out[i] = alpha * in0[0] [scale] */
  DLRT__OP_SUM_COLS,    /* out[c] = sum over rows of in0 [rows] */
  DLRT__OP_SUM_CHANNELS, /* out[c] = sum over n, spatial [channels] */
  DLRT__OP_CONV,        /* out0 y (CNHW: O x N*OHW) = in1 W (O x CKK) x im2col(in0 x), a
                     chunk of images at a time through out1, a workspace of CKK x
                     (chunk x OHW) [conv] */
  DLRT__OP_CONV_GRAD_W, /* out0 dW = sum over chunks of in0 dy x im2col(in1 x)^T; out1 the
                     workspace [conv, the forward's] */
  DLRT__OP_CONV_GRAD_X, /* out0 dx = col2im(in1 W^T x in0 dy), chunk by chunk through out1
                     [conv, the forward's] */
  DLRT__OP_MAXPOOL,     /* out0 = max, out1 = argmax (U8: ky * k + kx in the window, bit 7
                     the maximum's sign for k <= 11) [pool] */
  DLRT__OP_MAXPOOL_GRAD, /* out = gather of in0 (dy) by in1 (argmax) [pool, the forward's];
                      relu_fused: the gradient of the ReLU before the pool too,
                      masked by the sign bit (k <= 11) or in2, the pooled output */
  DLRT__OP_XENT,        /* out0 = mean loss [1], out1 = loss per row, out2 = d logits;
                     in0 logits, in1 labels [xent] */
  DLRT__OP_LINEAR_XENT, /* out0 mean loss [1] of the logits in0 x in1^T against in2
                     labels, computed a chunk of rows at a time; out1 d x (N x C),
                     out2 d w (V x C), both fp32, made in the same pass; out3 the
                     workspace: per-row losses, a chunk's logits and their
                     gradient [linear_xent] */
  DLRT__OP_VIEW,        /* out shares in0's storage with another shape: a reshape, or
                     two axes transposed (their strides swapped) [view] */
  DLRT__OP_PERMUTE,     /* out[b, a, p] = in0[a, b, p] (CNHW <-> NCHW) [permute] */
  DLRT__OP_SUB,
  DLRT__OP_DIV,
  DLRT__OP_DIV_GRAD_Z,  /* out = -in0 (dy) * in1 (x) / in2 (z)^2 */
  DLRT__OP_ACT,         /* tanh, sigmoid, gelu or gelu's tanh form [act] */
  DLRT__OP_ACT_GRAD,    /* out = in0 (dy) * f'(in1): in1 is y for tanh/sigmoid, x for the
                     gelus [act] */
  DLRT__OP_SOFTMAX,     /* rows of the last axis [rows] */
  DLRT__OP_SOFTMAX_GRAD, /* in0 dy, in1 y [rows] */
  DLRT__OP_AVGPOOL,     /* [pool] */
  DLRT__OP_AVGPOOL_GRAD, /* [pool, the forward's] */
  DLRT__OP_DROPOUT,     /* [dropout]: the salt and probability, the same in backward */
  DLRT__OP_NORM,        /* rows of in0 normalised; in1 gamma, in2 beta, (batch norm:) in3
                     running mean, in4 running var; out0 y, out1 mean, out2 rstd
                     [norm] */
  DLRT__OP_NORM_GRAD,   /* in: dy x mean rstd gamma [norm] */
  DLRT__OP_NORM_AFFINE_GRAD, /* in: dy x mean rstd; out0 dgamma, out1 dbeta [norm] */
  DLRT__OP_BN_RUNNING,  /* in: mean rstd running_mean running_var (updated); training only
                     [bn_running] */
  DLRT__OP_CONCAT,      /* inputs along an axis [concat] */
  DLRT__OP_SLICE,       /* a view: in0's storage and strides at an offset, nothing
                     copied [slice, for the gradient] */
  DLRT__OP_SLICE_GRAD,  /* dy into zeros at the slice's place [slice] */
  DLRT__OP_AXIS_SUM,    /* [axis] */
  DLRT__OP_AXIS_EXPAND, /* [axis] */
  DLRT__OP_BCAST,       /* in0 (op) in1 broadcast over leading dims [bcast] */
  DLRT__OP_BCAST_GRAD_B, /* in: dy a b [bcast] */
  DLRT__OP_EMBED,       /* in0 ids (i32), in1 table [embed] */
  DLRT__OP_EMBED_GRAD,  /* in0 dy, in1 ids [embed] */
  DLRT__OP_EMBED_GRAD_ACC, /* out = in0 (the table's gradient so far) + the scatter of in1
                        dy by in2 ids, in place where in0 ends here [embed] */
  DLRT__OP_ATTENTION,   /* out0 o (B x T x C), out1 lse (B x heads x T, fp32) from in0 qkv
                     (B x T x 3C) [attention] */
  DLRT__OP_ATTENTION_GRAD, /* out0 dqkv, out1 the workspace D (B x heads x T, fp32); in: dO
                        qkv o lse [attention, the forward's] */
  DLRT__OP_ATTENTION_DECODE, /* out0 o (B x 1 x C) from in0 qkv (B x 1 x 3C) of the token at
                        position in3[b] (I32, B), which first writes its key and value
                        into in1, in2 (the caches, B x capacity x C, updated in place);
                        the query attends to positions 0 .. in3[b] [decode] */
  DLRT__OP_CAST,        /* out = in0 converted to out's dtype (mixed precision) */
  DLRT__OP_CONTIGUOUS,  /* out = in0's elements, dense (in0 a strided view) */
  DLRT__OP_SGD,         /* in0 param (updated), in1 velocity, in2 grad */
  DLRT__OP_ADAM,        /* in0 param, in1 m, in2 v, in3 grad */
  /* Tensor parallelism (collective.c; Megatron-LM's conjugate f and g): */
  DLRT__OP_TP_COPY,     /* f: out = in0 (a copy), whose gradient is summed over the peers */
  DLRT__OP_ALLREDUCE,   /* g: out = the sum (or max) of in0 over the peers, through the
                     executor's collective (fp32) [collective] */
  DLRT__OP_LINEAR_XENT_SHARD, /* the fused linear cross-entropy over a vocabulary shard: in0 x
                     (N x C), in1 w (the shard's V_s x C rows), in2 labels (N, global
                     ids); out0 the mean loss over the whole vocabulary (its row
                     statistics summed over the peers), out1 d x (this shard's part),
                     out2 d w, out3 the workspace [linear_xent_shard] */
  DLRT__OP_COUNT_
} dlrt__op_kind;

#define NODE_MAX_IN 6
#define NODE_MAX_OUT 4

typedef struct dlrt__node dlrt__node;

struct dlrt_tensor {
  int id; /* index in the graph's tensor array */
  char name[64];
  dlrt_dtype dtype;
  int ndim;
  int64_t shape[DLRT_MAX_DIMS];
  int64_t numel;
  dlrt__tensor_kind kind;
  dlrt_init_kind init;
  int64_t fan_in, fan_out;
  float init_std; /* DLRT_INIT_NORMAL */
  int no_decay;   /* the optimizer's weight decay skips this parameter */
  dlrt__node *producer;       /* NULL for inputs, params and state */
  dlrt_tensor_t *owner; /* the tensor whose storage this one uses (itself but for views) */
  /* Where the elements are in the owner's storage: element [i0, i1, ...]
   * is at offset + sum(i_k * strides[k]), in elements. Row-major contiguous
   * with offset 0 for all but views (a slice along the leading axis moves
   * the offset, a 2-D transpose swaps the strides). */
  int64_t offset;
  int64_t strides[DLRT_MAX_DIMS];
  dlrt_tensor_t *grad;  /* after backward */
  int kept;             /* survives runs (readable afterwards) */
  int buffer;           /* state that checkpoints always hold (running statistics) */
  int segment_end;      /* DLRT_CHECKPOINT_MARKS: a segment ends at its producer */
  int needs_grad;       /* depends on a parameter */
  int cnhw;             /* a 4-D image stored C x N x H x W (convolution stacks);
                           its shape stays N x C x H x W */
};

struct dlrt__node {
  dlrt__op_kind op;
  dlrt__node_phase phase;
  int n_in, n_out;
  dlrt_tensor_t *in[NODE_MAX_IN];
  dlrt_tensor_t *out[NODE_MAX_OUT];
  /* The op's parameters (op_params.h): the member the op enum names; raw
   * only to copy or compare them whole. Zeroed when the node is made. */
  union {
    struct dlrt__fill_params fill;
    struct dlrt__scale_params scale;
    struct dlrt__bmm_params bmm;
    struct dlrt__rows_params rows;
    struct dlrt__channels_params channels;
    struct dlrt__conv_params conv;
    struct dlrt__pool_params pool;
    struct dlrt__xent_params xent;
    struct dlrt__linear_xent_params linear_xent;
    struct dlrt__view_params view;
    struct dlrt__permute_params permute;
    struct dlrt__act_params act;
    struct dlrt__dropout_params dropout;
    struct dlrt__norm_params norm;
    struct dlrt__bn_running_params bn_running;
    struct dlrt__concat_params concat;
    struct dlrt__slice_params slice;
    struct dlrt__axis_params axis;
    struct dlrt__bcast_params bcast;
    struct dlrt__embed_params embed;
    struct dlrt__attention_params attention;
    struct dlrt__decode_params decode;
    struct dlrt__collective_params collective;
    struct dlrt__linear_xent_shard_params linear_xent_shard;
    int64_t raw[NODE_MAX_P];
  };
  /* Matmul operands (bit j: input j) whose transpose flag dlrt__graph_layout
   * flipped to read a transposed view in place: flipped once, however often
   * the pass runs. */
  unsigned flipped;
};

struct dlrt_graph {
  dlrt_tensor_t **tensors;
  int n_tensors, cap_tensors;
  dlrt__node **nodes;
  int n_nodes, cap_nodes;
  int status;         /* first error */
  char error[512];    /* its message */
  int backward_done;  /* dlrt_graph_backward ran */
  int optimized;      /* dlrt_graph_optimize ran */
  dlrt_optimizer opt;
  dlrt_tensor_t *loss;
  /* Mixed precision (precision.c): the storage type of the compute
   * (DLRT_F32: none); the pass runs at the start of dlrt_graph_backward, or
   * when an executor or the planner first takes a graph without one. */
  dlrt_dtype precision;
  int precision_done;
};

/* Whether t's elements are row-major and dense in its owner (any offset). */
int dlrt__contiguous(const dlrt_tensor_t *t);
/* Sets t's strides to row-major contiguous for its shape. */
void dlrt__set_contiguous(dlrt_tensor_t *t);
/* x with its elements dense (x itself, or a copy node made now). */
dlrt_tensor_t *dlrt__make_contiguous(dlrt_graph_t *g, dlrt_tensor_t *x, dlrt__node_phase phase);
/* The same, and at the start of its storage (offset 0). */
dlrt_tensor_t *dlrt__make_dense(dlrt_graph_t *g, dlrt_tensor_t *x, dlrt__node_phase phase);
/* A view's dimensions merged: unit ones dropped, neighbours that walk
 * memory as one joined. Fills n[] and strides[] (ndim entries at most) and
 * returns how many remain; the gather kernel that makes views dense takes
 * DLRT__GATHER_DIMS. */
#define DLRT__GATHER_DIMS 4
int dlrt__view_dims(const dlrt_tensor_t *t, int64_t *n, int64_t *strides);
/* The view of x's elements [start, start + length) along `axis` (an
 * DLRT__OP_SLICE node); name NULL: an automatic one. */
dlrt_tensor_t *dlrt__slice_view(dlrt_graph_t *g, dlrt_tensor_t *x, int axis, int64_t start,
                               int64_t length, dlrt__node_phase phase, const char *name);
/* Makes every input that kernels cannot read in place (strided views) a
 * dense copy first, and lets matmuls read 2-D transposed views through
 * their transpose flags; before the graph is planned (layout.c). */
int dlrt__graph_layout(dlrt_graph_t *g);

/* Records an error on the graph (the first one sticks) and returns NULL. */
void *dlrt__graph_fail(dlrt_graph_t *g, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A new tensor of the given shape (name may be NULL: derived from the op). */
/* The elements of `shape` (ndim dimensions) into *numel: 1, or 0 when a
 * dimension is negative or the count overflows what a tensor can hold
 * (2^60 - 1 elements: its bytes fit int64_t whatever the type). Every size made
 * from user input goes through it before it is multiplied further. */
int dlrt__shape_elements(int ndim, const int64_t *shape, int64_t *numel);
dlrt_tensor_t *dlrt__tensor_new(dlrt_graph_t *g, const char *name, dlrt_dtype dtype, int ndim,
                                const int64_t *shape, dlrt__tensor_kind kind);
/* A new node; its outputs are set by the caller. */
dlrt__node *dlrt__node_new(dlrt_graph_t *g, dlrt__op_kind op, dlrt__node_phase phase);
/* Sets the node's inputs (NULL-terminated argument list is not used:
 * count given). */
void dlrt__node_inputs(dlrt__node *n, int count, dlrt_tensor_t *const *in);
/* A node with one new output tensor of the given shape. */
/* linear_xent.c: the fused head's node (op DLRT__OP_LINEAR_XENT or its
 * vocabulary shard) on in = {x, w, labels}: its scalar loss, and as further
 * outputs d x (x's shape), d w (w's) and a workspace of `work` floats. */
dlrt_tensor_t *dlrt__linear_xent_node(dlrt_graph_t *g, dlrt__op_kind op, dlrt_tensor_t *in[3],
                                      dlrt_tensor_t *x, dlrt_tensor_t *w, int64_t work);
dlrt_tensor_t *dlrt__node1(dlrt_graph_t *g, dlrt__op_kind op, dlrt__node_phase phase, int n_in,
                           dlrt_tensor_t *const *in, int ndim, const int64_t *shape,
                           const char *name);
const char *dlrt__op_name(dlrt__op_kind op);
/* Rewrites the forward pass for g->precision: matmuls and convolutions
 * take their operands in the compute type (parameters are cast each step),
 * ops with kernels in every type follow their inputs, the rest (losses,
 * normalisation, softmax) get fp32 casts around them (precision.c). */
int dlrt__graph_apply_precision(dlrt_graph_t *g);

/* Convolutions run a chunk of images at a time whose fp32 im2col columns
 * fit this many bytes (DLRT_CONV_WORKSPACE overrides it): the images per
 * chunk for a convolution of CKK x OHW columns per image, 1 to n. */
#define DLRT_CONV_WORKSPACE ((int64_t)2 << 20)
/* and at most this many images: checkpointed segments of convolutions run
 * a whole number of chunks at a time (chunk.c), so the chunk bounds what
 * their transients hold. */
#define DLRT_CONV_CHUNK_IMAGES 32
int64_t dlrt__conv_chunk(int64_t ckk, int64_t ohw, int64_t n);
/* A convolution's GEMMs (forward, weight and input gradients) each cover
 * this many images, its piece: a divisor of its chunk (`chunk`) whose dy
 * and columns (O and CKK rows of OHW per image, fp32) fit
 * DLRT_CONV_WORKSPACE bytes. Their shapes, and the order in which the
 * weight gradient sums, then depend on the graph alone, so a chunked block
 * may run fewer images than a chunk (under spilling, chunk.c) and get the
 * same bits. */
#define DLRT_CONV_PIECE DLRT_CONV_WORKSPACE
int64_t dlrt__conv_weight_piece(int64_t o, int64_t ckk, int64_t ohw, int64_t chunk);
/* The sum of x over the tensor-parallel peers (a DLRT__OP_ALLREDUCE node
 * of the given phase, with the graph's next tag; collective.c). */
dlrt_tensor_t *dlrt__allreduce_node(dlrt_graph_t *g, dlrt_tensor_t *x, dlrt__node_phase phase,
                                    const char *name);
/* Appends a scratch output to node n (an intermediate that lives during the
 * node only, so the plan counts it). */
dlrt_tensor_t *dlrt__add_workspace(dlrt_graph_t *g, dlrt__node *n, int ndim, const int64_t *shape,
                                   dlrt_dtype dtype);

/* Shared by the builders (graph.c, norm.c, shape.c). */
/* 1 when the graph can take a forward op and its `n` inputs are set. */
int dlrt__graph_begin(dlrt_graph_t *g, const char *op, int n, dlrt_tensor_t *const *in);
/* Records "OP: WHAT (a [shape], b [shape])" on the graph; returns NULL. */
void *dlrt__shape_error(dlrt_graph_t *g, const char *op, const char *what,
                        const dlrt_tensor_t *a, const dlrt_tensor_t *b);
int dlrt__is_f32(dlrt_graph_t *g, const char *op, const dlrt_tensor_t *t);
/* The same image in N x C x H x W storage (a permute node when it is CNHW). */
dlrt_tensor_t *dlrt__to_nchw(dlrt_graph_t *g, dlrt_tensor_t *x);
/* A permute node swapping the two leading axes of x (na x nb x inner). */
dlrt_tensor_t *dlrt__swap_axes(dlrt_graph_t *g, dlrt_tensor_t *x, int64_t na, int64_t nb,
                               int64_t inner, int ndim, const int64_t *shape);

#endif
