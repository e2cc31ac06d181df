/* trace.h — a Chrome trace (the JSON array format Perfetto and
 * chrome://tracing open) of what the executor does: kernels, spill copies
 * and memory counters (internal). Off unless DLRT_TRACE names a file or
 * dlrt_trace_start was called; when on, the executor waits for each node
 * and copy to time it, so a traced run is slower than an untraced one. */
#ifndef DLRT_UTIL_TRACE_H
#define DLRT_UTIL_TRACE_H

#include <stdint.h>

/* Track ids (Chrome's "tid"): one row each in the viewer. */
enum { DLRT_TRACE_COMPUTE = 1, DLRT_TRACE_COPY = 2, DLRT_TRACE_HOST = 3 };

/* 1 if a trace is being written (DLRT_TRACE is read on the first call). */
int dlrt__trace_on(void);
/* Microseconds since the trace began. */
double dlrt__trace_now_us(void);
/* A span: `name` in category `cat` on track `tid`. */
void dlrt__trace_span(const char *name, const char *cat, int tid, double start_us,
                      double end_us);
/* An observer of spans in this process (lib/train/simulate.c's dry run
 * reads the executor's nodes and copies through it, in the order they
 * happen): while one is set, dlrt__trace_on is 1 and every span goes to
 * it as well as to a trace file, if one is open. It runs under the trace's
 * lock: it must not trace. NULL takes it off. */
typedef void (*dlrt__trace_sink)(void *ctx, const char *name, const char *cat, int tid,
                                 double start_us, double end_us);
void dlrt__trace_set_sink(dlrt__trace_sink sink, void *ctx);
/* A counter sample: the value of series `name` (bytes) from now on. */
void dlrt__trace_counter(const char *name, uint64_t value);

#endif
