/* dlbench-cases.h — what the suites share (dlbench-suites.c: copy, gemm,
 * ops and the table; dlbench-train.c: train, spill, loader): a case's name
 * and rate, its dlrt side, the reference side beside it, and measuring one
 * case into a row. */
#ifndef DLBENCH_CASES_H
#define DLBENCH_CASES_H

#include "dlbench.h"

/* One dlrt side of a case: `queue` puts one run on the timer's stream. */
typedef struct {
  bench_timer *timer;
  int (*queue)(void *op);
  void *op;
} dlrt_side;

/* A bench_side's run for a dlrt_side (ctx): one timed run. */
int run_dlrt_side(void *p, double *ms);

/* What identifies a case and turns its time into a rate. */
typedef struct {
  const char *suite, *unit;
  char name[96];
  double work; /* bytes, FLOP or steps per run */
} case_id;

/* A reference side beside the dlrt one (a vendor library, or another dlrt
 * configuration): its error text, when it fails, is in `error` (a dlrt
 * failure is in dlrt_last_error()). */
typedef struct {
  const bench_side *side;
  const char *name;
  const char *error;
} vendor_side;

/* Measures one case and appends its row (*out; NULL when not measured). A
 * dlrt call the device does not support skips the case; any other failure
 * is reported and counted. */
int measure_case(bench_ctx *ctx, const case_id *id, bench_timer *timer, int (*queue)(void *),
                 void *op, const vendor_side *beside, bench_row **out);
/* A case of a suite with only a dlrt side: timer on `stream`. */
int measure_dlrt(bench_ctx *ctx, const case_id *id, dlrt_stream_t *stream, int (*queue)(void *),
                 void *op, bench_row **out);

/* The suites of dlbench-train.c. */
int suite_train(bench_ctx *ctx);
int suite_spill(bench_ctx *ctx);
int suite_loader(bench_ctx *ctx);

#endif
