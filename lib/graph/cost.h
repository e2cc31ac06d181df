/* cost.h — what one graph node costs, counted from its op and shapes alone
 * (internal; cost.c): the floating-point operations it does and the bytes
 * it moves through device memory. A roofline of a machine (its GEMM and
 * vector rates, its memory bandwidth, a launch overhead) turns them into
 * time: lib/train/simulate.c replays a schedule with it, and the planner
 * may weigh its choices with it. Nothing here knows a device. */
#ifndef DLRT_GRAPH_COST_H
#define DLRT_GRAPH_COST_H

#include "graph/graph.h"

typedef struct {
  /* Floating-point operations; a multiply-add counts 2. GEMM-shaped work
   * (matmuls, convolutions, attention's two products, the fused head's
   * three GEMMs) is in matmul_flops, at the tensor rate of matmul_dtype;
   * the rest (exp, divisions, normalisation, the optimizer) in
   * vector_flops, at the fp32 vector rate. */
  double matmul_flops, vector_flops;
  dlrt_dtype matmul_dtype;
  /* Bytes read from and written to device memory, each operand counted
   * once (a kernel streams it), workspaces written and read back. */
  double bytes_read, bytes_written;
  /* Kernels the node launches (0: a view or a slice, nothing runs). */
  int launches;
  /* Which kernel does the GEMM-shaped work: a GEMM of the vendor library,
   * the fused attention kernel, or a convolution (im2col and a GEMM); and
   * whether the memory traffic is a reduction across rows (bias and norm
   * gradients, sums), which kernels parallelise less well than a stream.
   * A machine may give each its own rate (dlrt_machine). */
  enum { DLRT__COST_GEMM, DLRT__COST_ATTENTION, DLRT__COST_CONV } matmul_kind;
  int reduction;
} dlrt__op_cost;

/* Fills *out for node n (zeroed first). Ops the table does not know are
 * costed as elementwise over their operands (none today: every op of
 * graph.h has its own case; tests/test-cost.c checks known ones exactly). */
void dlrt__node_cost(const dlrt__node *n, dlrt__op_cost *out);

#endif
