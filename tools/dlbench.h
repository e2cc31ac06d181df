/* dlbench.h — what the parts of dlbench share: options, the measurement core
 * (dlbench.c), the suites (dlbench-suites.c, dlbench-train.c; their shared
 * parts in dlbench-cases.h), the results with the table and HTML
 * (dlbench-report.c), JSON and CSV (dlbench-export.c), and the JSON reader
 * behind `dlbench compare` (dlbench-compare.c). */
#ifndef DLBENCH_H
#define DLBENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dlrt.h"
#include "tool-common.h" /* STATUS_*, tool_now_s, tool_json_string */

/* Version of the JSON and CSV layout (docs/dlbench.md); raised when a field
 * changes meaning or goes away, not when one is added. */
enum { BENCH_SCHEMA_VERSION = 1 };

/* A median needs a few samples whatever the bounds say; a cheap case stops
 * at BENCH_MAX_REPS however short its runs are. */
enum { BENCH_MIN_REPS = 3, BENCH_MAX_REPS = 2000 };

typedef struct {
  int quick;         /* fewer sizes and repetitions: a smoke test */
  int warmup;        /* untimed runs of each side before the timed ones (and, when
                        > 0, at least min_time / 4 seconds of them) */
  int reps;          /* timed runs: at least this many ... */
  double min_time;   /* ... and at least this many seconds of them in all */
  const char *filter; /* only cases whose name contains this (NULL: all) */
  int quiet;         /* no progress lines on stderr */
} bench_options;

/* ---------------------------------------------------------------- the command line */

enum { BENCH_MAX_SPECS = 64, BENCH_MAX_SUITES = 16 };

/* Defaults: full runs, and --quick ones (a smoke test of a few seconds). */
enum { BENCH_DEFAULT_WARMUP = 2, BENCH_DEFAULT_REPS = 10, BENCH_QUICK_WARMUP = 1,
       BENCH_QUICK_REPS = 3 };
#define BENCH_DEFAULT_MIN_TIME 0.2 /* seconds */
#define BENCH_QUICK_MIN_TIME 0.0

typedef struct {
  bench_options bench;
  char *specs[BENCH_MAX_SPECS]; /* --device specs, owned copies */
  int n_specs;
  int suites[BENCH_MAX_SUITES]; /* 1: run bench_suites[i] */
  const char *json, *csv, *report;
  const char *link;             /* --link SPEC for every device measured (NULL: none) */
  const char *compare[2];       /* dlbench compare A B */
  char error[TOOL_ERROR_MAX];   /* why the command line is wrong ("" when it is not) */
} dlbench_options;

/* Fills *o from the command line (dlbench-options.c), the suites named
 * being those of suite_names (bench_suites' names, in its order: o->suites
 * follows it): 0; TOOL_HELP or TOOL_VERSION; or STATUS_USAGE with the
 * reason in o->error. Prints nothing and never exits; argv is left as it
 * was. After a failure *o owns nothing; after success release it with
 * dlbench_options_free (which may be called again). Callable again in the
 * same process. */
int dlbench_parse_options(int argc, char *const argv[], const char *const suite_names[],
                          int n_suites, dlbench_options *o);
void dlbench_options_free(dlbench_options *o);
void dlbench_usage(FILE *out);

/* ---------------------------------------------------------------- results */

/* One measured case on one device: dlrt, and the vendor library beside it
 * where there is one. Figures are in `unit`; NAN means absent (JSON null). */
typedef struct {
  char suite[16];  /* "copy", "gemm", "ops", "train" */
  char device[32]; /* dlrt spec: "cpu:0", "opencl:0" */
  char name[96];   /* the case, unique within suite and device: "f32/1024x1024x1024/NN" */
  const char *unit; /* "GB/s", "GFLOP/s", "steps/s" */
  double work;     /* bytes, FLOP or steps per run */
  double bytes;    /* copy: bytes copied; ops kernels: bytes of one array */
  int reps;        /* timed runs of the dlrt side */
  double median, min, max; /* dlrt, in unit */
  double ms;       /* median milliseconds per dlrt run */
  const char *timing; /* "event" (device events) or "wall" (host clock + synchronize) */
  char vendor[16]; /* "openblas", "clblast", "cublas"; "" when none */
  double vendor_median, vendor_min, vendor_max, vendor_ms;
  const char *vendor_timing;
  double ratio;        /* dlrt median / vendor median: > 1 is dlrt faster */
  double check_error;  /* GEMM: max |dlrt - vendor| / max |vendor| */
  double copy_fraction; /* ops: GB/s over the device's d2d copy GB/s */
  double images_per_s;  /* train */
  double planned_peak, measured_peak; /* train: bytes */
  double model;    /* copy on a device with a link model: the GB/s it gives the case */
  char note[256];  /* why a vendor figure is absent, and similar */
} bench_row;

typedef struct {
  char suite[16], device[32], reason[160];
} bench_skip;

typedef struct {
  char cpu_model[128];
  int cores;
  uint64_t host_memory; /* bytes */
  char os[128];
  char blas[128];        /* OpenBLAS configuration and threads */
  char blas_threads[32]; /* $OPENBLAS_NUM_THREADS or "unset" */
  char created[32];      /* UTC, ISO 8601 */
  dlrt_device_props *devices;
  int n_devices;
  /* Each device's host link model (--link, DLRT_LINK), beside devices[i];
   * link_text "none" without one (dlrt_link_describe). */
  dlrt_link_info *links;
  char (*link_text)[256];
} bench_machine;

typedef struct {
  bench_machine machine;
  bench_options options;
  bench_row *rows;
  int n_rows, cap_rows;
  bench_skip *skips;
  int n_skips, cap_skips;
} bench_results;

/* A new row (zeroed, figures NAN) appended to res, or NULL when out of memory. */
bench_row *bench_row_new(bench_results *res, const char *suite, const char *device,
                         const char *name, const char *unit, double work);
int bench_skip_add(bench_results *res, const char *suite, const char *device,
                   const char *reason);
void bench_results_free(bench_results *res);

/* ---------------------------------------------------------------- measuring */

/* Times one run of something and says how: returns DLRT_OK or a status,
 * *ms the run's milliseconds. */
typedef struct {
  int (*run)(void *ctx, double *ms);
  void *ctx;
  const char *timing; /* "event" or "wall", set by whoever builds the side */
} bench_side;

/* Milliseconds of each timed run of one side. */
typedef struct {
  double *ms;
  int n;
} bench_samples;

/* Warm-up runs of a (and b), then timed runs alternating a, b, b, a, a, b ...
 * (so that clock, cache and load changes hit both alike) until the options'
 * bounds. b may be NULL. Frees nothing: release with bench_samples_free. */
int bench_measure(const bench_options *o, const bench_side *a, const bench_side *b,
                  bench_samples *sa, bench_samples *sb);
void bench_samples_free(bench_samples *s);

/* Times work queued on a dlrt stream: by device events where the backend
 * has them, else by the host clock around a synchronize of the stream (of
 * the whole device when stream is NULL: the executor's own stream is not
 * public). */
typedef struct {
  dlrt_device_t *dev;
  dlrt_stream_t *stream;
  dlrt_event_t *start, *end; /* NULL: host clock */
  double t0;                 /* host clock at begin, seconds */
} bench_timer;

int bench_timer_init(bench_timer *t, dlrt_device_t *dev, dlrt_stream_t *stream);
void bench_timer_free(bench_timer *t);
const char *bench_timer_kind(const bench_timer *t);
int bench_timer_begin(bench_timer *t);
int bench_timer_end(bench_timer *t, double *ms);

/* Fills row's figures from the samples: unit figures are work / seconds /
 * divisor (1e9 for GB/s and GFLOP/s). Sorts the samples; vendor may be NULL. */
void bench_row_fill(bench_row *row, bench_samples *dlrt, const char *timing,
                    bench_samples *vendor, const char *vendor_name, const char *vendor_timing);

/* ---------------------------------------------------------------- suites */

typedef struct {
  const bench_options *opt;
  bench_results *res;
  dlrt_device_t *dev;
  dlrt_device_props props;
  int failures; /* cases that failed (reported on stderr) */
} bench_ctx;

/* 1 if the case passes --filter. */
int bench_matches(const bench_ctx *ctx, const char *name);
/* bench_matches, and when it does, says so on stderr unless --quiet. */
int bench_wanted(const bench_ctx *ctx, const char *suite, const char *name);
/* Prints "dlbench: SUITE on DEVICE, CASE: WHAT: DETAIL" for a failed dlrt
 * call and counts the failure; returns rc. */
int bench_fail(bench_ctx *ctx, const char *suite, const char *name, const char *what, int rc);

/* A suite runs its cases on ctx->dev and appends rows; it returns 0, or
 * STATUS_FAIL when it could not go on. run == NULL: not available yet. */
typedef struct {
  const char *name;
  int (*run)(bench_ctx *ctx);
  const char *about;
} bench_suite;

extern const bench_suite bench_suites[];
extern const int bench_suite_count;

/* ---------------------------------------------------------------- output */

int bench_write_table(FILE *out, const bench_results *res);
int bench_write_json(FILE *out, const bench_results *res);
int bench_write_csv(FILE *out, const bench_results *res);
int bench_write_html(FILE *out, const bench_results *res);
/* A figure to about four significant digits; "-" when absent (NAN). */
void bench_figure(double v, char *out, size_t size);
/* `dlbench compare A B`: exit status (0; 1 no rows in common; 2 bad file). */
int bench_compare(const char *path_a, const char *path_b, FILE *out);

#endif /* DLBENCH_H */
