/* dlbench — sets dlrt's backends side by side, and each beside its vendor
 * library called directly: copies, GEMM, kernels and training steps, warmed
 * up, repeated, timed by device events; results as a table, JSON, CSV or an
 * HTML report, and `dlbench compare` of two saved JSON results.
 * Exit status: 0 success, 1 a dlrt call failed (the other cases still run
 * and are written), 2 usage error, a device spec that opens nothing, or an
 * unreadable file for compare. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "dlbench.h"

const char tool_name[] = "dlbench";

/* ---------------------------------------------------------------- measuring */

/* Host-clock timing needs the queue empty at both ends. */
static int timer_sync(bench_timer *t) {
  return t->stream ? dlrt_stream_synchronize(t->stream) : dlrt_device_synchronize(t->dev);
}

/* Events where the backend times them: a probe pair tells (the first
 * elapsed-time query is where a backend without timers says so). */
int bench_timer_init(bench_timer *t, dlrt_device_t *dev, dlrt_stream_t *stream) {
  *t = (bench_timer){.dev = dev, .stream = stream};
  if (!stream)
    return DLRT_OK;
  float ms;
  int rc = dlrt_event_create(dev, &t->start);
  if (rc == DLRT_OK) rc = dlrt_event_create(dev, &t->end);
  if (rc == DLRT_OK) rc = dlrt_event_record(t->start, stream);
  if (rc == DLRT_OK) rc = dlrt_event_record(t->end, stream);
  if (rc == DLRT_OK) rc = dlrt_event_synchronize(t->end);
  if (rc == DLRT_OK) rc = dlrt_event_elapsed_ms(t->start, t->end, &ms);
  if (rc == DLRT_ERR_UNSUPPORTED) {
    dlrt_clear_error();
    rc = DLRT_OK;
    bench_timer_free(t);
    *t = (bench_timer){.dev = dev, .stream = stream};
  }
  return rc;
}

void bench_timer_free(bench_timer *t) {
  dlrt_event_destroy(t->start);
  dlrt_event_destroy(t->end);
  t->start = t->end = NULL;
}

const char *bench_timer_kind(const bench_timer *t) { return t->start ? "event" : "wall"; }

int bench_timer_begin(bench_timer *t) {
  if (t->start)
    return dlrt_event_record(t->start, t->stream);
  int rc = timer_sync(t);
  t->t0 = tool_now_s();
  return rc;
}

int bench_timer_end(bench_timer *t, double *ms) {
  int rc;
  if (!t->start) {
    rc = timer_sync(t);
    *ms = (tool_now_s() - t->t0) * 1e3;
    return rc;
  }
  float elapsed = 0;
  if ((rc = dlrt_event_record(t->end, t->stream)) == DLRT_OK &&
      (rc = dlrt_event_synchronize(t->end)) == DLRT_OK)
    rc = dlrt_event_elapsed_ms(t->start, t->end, &elapsed);
  *ms = elapsed;
  return rc;
}

void bench_samples_free(bench_samples *s) {
  if (!s) return;
  free(s->ms);
  s->ms = NULL;
  s->n = 0;
}

/* One timed run of `side` appended to s (when s is not NULL: warm-up). */
static int run_side(const bench_side *side, bench_samples *s) {
  double ms = 0;
  int rc = side->run(side->ctx, &ms);
  if (rc == DLRT_OK && s)
    s->ms[s->n++] = ms;
  return rc;
}

int bench_measure(const bench_options *o, const bench_side *a, const bench_side *b,
                  bench_samples *sa, bench_samples *sb) {
  int rc = DLRT_OK;
  *sa = (bench_samples){calloc(BENCH_MAX_REPS, sizeof(double)), 0};
  if (sb) *sb = (bench_samples){calloc(BENCH_MAX_REPS, sizeof(double)), 0};
  if (!sa->ms || (sb && !sb->ms))
    return DLRT_ERR_OOM;
  /* Warm-up: caches, clocks, lazily compiled kernels, and drivers whose
   * threads sleep when idle (PoCL's wake in tens of microseconds) all need a
   * little time as well as a few runs. */
  double start = tool_now_s();
  for (int i = 0; i < BENCH_MAX_REPS && rc == DLRT_OK; i++) {
    if (i >= o->warmup && (o->warmup == 0 || tool_now_s() - start >= o->min_time / 4))
      break;
    if ((rc = run_side(a, NULL)) == DLRT_OK && b)
      rc = run_side(b, NULL);
  }
  start = tool_now_s();
  for (int i = 0; i < BENCH_MAX_REPS && rc == DLRT_OK; i++) {
    if (i >= o->reps && i >= BENCH_MIN_REPS && tool_now_s() - start >= o->min_time)
      break;
    /* a b, b a, a b, ...: neither side always runs on the other's leftovers. */
    int b_first = b && (i & 1);
    if (b_first) rc = run_side(b, sb);
    if (rc == DLRT_OK) rc = run_side(a, sa);
    if (rc == DLRT_OK && b && !b_first) rc = run_side(b, sb);
  }
  return rc;
}

static int compare_doubles(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* Median, min and max milliseconds of a sample set (sorted in place). */
static void summarize(bench_samples *s, double *median, double *min, double *max) {
  if (s->n == 0) {
    *median = *min = *max = NAN;
    return;
  }
  qsort(s->ms, (size_t)s->n, sizeof *s->ms, compare_doubles);
  *min = s->ms[0];
  *max = s->ms[s->n - 1];
  *median = s->n % 2 ? s->ms[s->n / 2] : (s->ms[s->n / 2 - 1] + s->ms[s->n / 2]) / 2;
}

/* Work per millisecond in the unit: GB/s and GFLOP/s count 1e9, steps/s and
 * images/s one. */
static double rate(const bench_row *row, double ms) {
  double divisor = strcmp(row->unit, "GB/s") == 0 || strcmp(row->unit, "GFLOP/s") == 0 ? 1e9 : 1.0;
  return ms > 0 ? row->work / (ms * 1e-3) / divisor : NAN;
}

void bench_row_fill(bench_row *row, bench_samples *dlrt, const char *timing,
                    bench_samples *vendor, const char *vendor_name, const char *vendor_timing) {
  double med, lo, hi;
  summarize(dlrt, &med, &lo, &hi);
  row->reps = dlrt->n;
  row->ms = med;
  row->median = rate(row, med);
  row->min = rate(row, hi); /* the slowest run is the lowest rate */
  row->max = rate(row, lo);
  row->timing = timing;
  if (!vendor || vendor->n == 0)
    return;
  summarize(vendor, &med, &lo, &hi);
  snprintf(row->vendor, sizeof row->vendor, "%s", vendor_name);
  row->vendor_ms = med;
  row->vendor_median = rate(row, med);
  row->vendor_min = rate(row, hi);
  row->vendor_max = rate(row, lo);
  row->vendor_timing = vendor_timing;
  row->ratio = row->median / row->vendor_median;
}

/* ---------------------------------------------------------------- suites */

int bench_matches(const bench_ctx *ctx, const char *name) {
  return !ctx->opt->filter || strstr(name, ctx->opt->filter) != NULL;
}

int bench_wanted(const bench_ctx *ctx, const char *suite, const char *name) {
  if (!bench_matches(ctx, name))
    return 0;
  if (!ctx->opt->quiet)
    fprintf(stderr, "dlbench: %-5s %-9s %s\n", suite, ctx->props.spec, name);
  return 1;
}

int bench_fail(bench_ctx *ctx, const char *suite, const char *name, const char *what, int rc) {
  fprintf(stderr, "dlbench: %s on %s, %s: %s: %s\n", suite, ctx->props.spec, name, what,
          tool_error_text(rc));
  ctx->failures++;
  return rc;
}

/* ---------------------------------------------------------------- the machine */

static void read_cpu_model(char *out, size_t size) {
  char line[512];
  FILE *f = fopen("/proc/cpuinfo", "r");
  snprintf(out, size, "unknown");
  if (!f)
    return;
  while (fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (strncmp(line, "model name", 10) == 0 && colon) {
      colon += 1 + strspn(colon + 1, " \t");
      colon[strcspn(colon, "\n")] = '\0';
      snprintf(out, size, "%s", colon);
      break;
    }
  }
  fclose(f);
}

static void read_machine(bench_machine *m) {
  struct utsname u;
  time_t now = time(NULL);
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const char *threads = getenv("OPENBLAS_NUM_THREADS");
  read_cpu_model(m->cpu_model, sizeof m->cpu_model);
  m->cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
  m->host_memory = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
  if (uname(&u) == 0)
    snprintf(m->os, sizeof m->os, "%.30s %.60s %.30s", u.sysname, u.release, u.machine);
  else
    snprintf(m->os, sizeof m->os, "unknown");
  char config[96] = "";
  snprintf(config, sizeof config, "%s", openblas_get_config());
  snprintf(m->blas, sizeof m->blas, "%s, %d threads", config, openblas_get_num_threads());
  snprintf(m->blas_threads, sizeof m->blas_threads, "%s", threads ? threads : "unset");
  strftime(m->created, sizeof m->created, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
}

/* ---------------------------------------------------------------- devices */

/* The devices to measure: those --device names (each once), else all. A
 * spec that opens nothing is a usage error. */
static int open_devices(const dlbench_options *o, dlrt_device_t ***devs, int *n) {
  int count = o->n_specs ? o->n_specs : dlrt_device_count();
  if (count < 0) {
    fprintf(stderr, "dlbench: cannot list devices: %s\n", dlrt_last_error());
    return STATUS_FAIL;
  }
  *n = 0;
  if (!(*devs = calloc((size_t)count + 1, sizeof **devs))) {
    fputs("dlbench: out of host memory\n", stderr);
    return STATUS_FAIL;
  }
  for (int i = 0; i < count; i++) {
    dlrt_device_t *dev;
    int rc = o->n_specs ? dlrt_device_open(o->specs[i], &dev) : dlrt_device_get(i, &dev);
    if (rc != DLRT_OK && !o->n_specs) {
      fprintf(stderr, "dlbench: cannot open device %d: %s\n", i, dlrt_last_error());
      return STATUS_FAIL;
    }
    if (rc != DLRT_OK) {
      fprintf(stderr, "dlbench: --device %s: %s\n", o->specs[i], tool_error_text(rc));
      fputs("dlbench: run dlinfo to list devices\n", stderr);
      return rc == DLRT_ERR_BAD_SPEC || rc == DLRT_ERR_NO_DEVICE ? STATUS_USAGE : STATUS_FAIL;
    }
    int seen = 0;
    for (int j = 0; j < *n; j++)
      seen |= (*devs)[j] == dev;
    if (!seen)
      (*devs)[(*n)++] = dev;
  }
  return 0;
}

static int read_device_props(dlrt_device_t **devs, int n, bench_machine *m) {
  if (!(m->devices = calloc((size_t)n + 1, sizeof *m->devices))) {
    fputs("dlbench: out of host memory\n", stderr);
    return STATUS_FAIL;
  }
  for (m->n_devices = 0; m->n_devices < n; m->n_devices++) {
    int rc = dlrt_device_props_get(devs[m->n_devices], &m->devices[m->n_devices]);
    if (rc != DLRT_OK) {
      fprintf(stderr, "dlbench: cannot read device properties: %s\n", dlrt_last_error());
      return STATUS_FAIL;
    }
  }
  return 0;
}

/* --link on every device, then each device's model (DLRT_LINK's where no
 * --link) into the machine's description. */
static int read_links(const dlbench_options *o, dlrt_device_t **devs, int n, bench_machine *m) {
  m->links = calloc((size_t)n + 1, sizeof *m->links);
  m->link_text = calloc((size_t)n + 1, sizeof *m->link_text);
  if (!m->links || !m->link_text) {
    fputs("dlbench: out of host memory\n", stderr);
    return STATUS_FAIL;
  }
  for (int i = 0; i < n; i++) {
    int rc = o->link ? dlrt_link_set(devs[i], o->link) : DLRT_OK;
    if (rc == DLRT_OK) rc = dlrt_link_get(devs[i], &m->links[i]);
    if (rc == DLRT_OK && dlrt_link_describe(devs[i], m->link_text[i], sizeof *m->link_text) < 0)
      rc = DLRT_ERR_INVALID_ARG;
    if (rc != DLRT_OK) {
      fprintf(stderr, "dlbench: --link %s on %s: %s\n", o->link ? o->link : "(DLRT_LINK)",
              dlrt_device_spec(devs[i]), dlrt_last_error());
      return STATUS_FAIL;
    }
  }
  return 0;
}

/* ---------------------------------------------------------------- running */

/* Every chosen suite on every device, suite by suite. */
static int run_suites(const dlbench_options *o, dlrt_device_t **devs, bench_results *res) {
  int failures = 0;
  for (int s = 0; s < bench_suite_count; s++) {
    const bench_suite *suite = &bench_suites[s];
    if (!o->suites[s])
      continue;
    if (!suite->run) {
      fprintf(stderr, "dlbench: suite %s: not available yet; skipped\n", suite->name);
      if (bench_skip_add(res, suite->name, "", "not available yet"))
        return STATUS_FAIL;
      continue;
    }
    for (int d = 0; d < res->machine.n_devices; d++) {
      bench_ctx ctx = {.opt = &o->bench, .res = res, .dev = devs[d],
                       .props = res->machine.devices[d]};
      int status = suite->run(&ctx);
      failures += ctx.failures + (status != 0 && ctx.failures == 0);
    }
  }
  return failures ? STATUS_FAIL : 0;
}

/* A FIFO, device or socket (also through a link: /dev/stdout, a shell's
 * process substitution): written into as a stream. Anything else is saved
 * as a file, replaced only when the whole output is ready (dlrt_file_save),
 * so a run that fails or is killed leaves the previous results. */
static int is_stream(const char *path) {
  struct stat st;
  return strcmp(path, "-") == 0 ||
         (stat(path, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode) ||
                                   S_ISSOCK(st.st_mode)));
}

/* Writes one output format to `path`; 0 or STATUS_FAIL. */
static int write_output(const char *path, const char *option, const bench_results *res,
                        int (*writer)(FILE *, const bench_results *)) {
  char *text = NULL;
  size_t len = 0;
  int stream = is_stream(path);
  FILE *f = strcmp(path, "-") == 0 ? stdout
            : stream               ? fopen(path, "w")
                                   : open_memstream(&text, &len);
  if (!f) {
    fprintf(stderr, "dlbench: --%s %s: %s\n", option, path, strerror(errno));
    return STATUS_FAIL;
  }
  int rc = writer(f, res);
  if (fflush(f) != 0 || ferror(f))
    rc = -1;
  if (f != stdout && fclose(f) != 0)
    rc = -1;
  if (rc) {
    fprintf(stderr, "dlbench: --%s %s: write failed: %s\n", option, path, strerror(errno));
    free(text);
    return STATUS_FAIL;
  }
  if (!stream && (rc = dlrt_file_save(path, text, len)) < 0) {
    fprintf(stderr, "dlbench: --%s: %s\n", option, dlrt_last_error());
    free(text);
    return STATUS_FAIL;
  }
  free(text);
  return 0;
}

/* Checks that the output files can be saved before minutes of measuring,
 * touching none of them (a stream is not opened: a FIFO's reader would see
 * the end of its input). */
static int check_outputs(const dlbench_options *o) {
  const char *paths[] = {o->json, o->csv, o->report};
  const char *names[] = {"json", "csv", "report"};
  for (int i = 0; i < 3; i++) {
    if (!paths[i] || is_stream(paths[i]))
      continue;
    if (dlrt_save_path_check(paths[i]) != DLRT_OK) {
      fprintf(stderr, "dlbench: --%s: %s\n", names[i], dlrt_last_error());
      return STATUS_USAGE;
    }
  }
  return 0;
}

static int write_outputs(const dlbench_options *o, const bench_results *res) {
  int status = 0, taken = (o->json && !strcmp(o->json, "-")) ||
                          (o->csv && !strcmp(o->csv, "-")) ||
                          (o->report && !strcmp(o->report, "-"));
  FILE *table = taken ? stderr : stdout;
  if (bench_write_table(table, res) != 0)
    status = STATUS_FAIL;
  fflush(table);
  if (o->json && write_output(o->json, "json", res, bench_write_json))
    status = STATUS_FAIL;
  if (o->csv && write_output(o->csv, "csv", res, bench_write_csv))
    status = STATUS_FAIL;
  if (o->report && write_output(o->report, "report", res, bench_write_html))
    status = STATUS_FAIL;
  return status;
}

int main(int argc, char **argv) {
  dlbench_options o;
  bench_results res;
  memset(&res, 0, sizeof res);
  dlrt_device_t **devs = NULL;
  int n = 0, status, rc;

  const char *suite_names[BENCH_MAX_SUITES];
  int n_suites = bench_suite_count < BENCH_MAX_SUITES ? bench_suite_count : BENCH_MAX_SUITES;
  for (int i = 0; i < n_suites; i++) suite_names[i] = bench_suites[i].name;
  if ((status = dlbench_parse_options(argc, argv, suite_names, n_suites, &o)) != 0) {
    if (status == TOOL_HELP) dlbench_usage(stdout);
    if (status == TOOL_VERSION) printf("dlbench (dlrt) %s\n", dlrt_version_string());
    return status < 0 ? 0 : tool_usage_fail(o.error);
  }
  if (o.compare[0]) {
    status = bench_compare(o.compare[0], o.compare[1], stdout);
    dlbench_options_free(&o);
    return status;
  }
  if ((status = check_outputs(&o)) != 0)
    goto done;
  if ((rc = dlrt_init()) != DLRT_OK) {
    fprintf(stderr, "dlbench: cannot start dlrt: %s\n", dlrt_last_error());
    status = STATUS_FAIL;
    goto done;
  }
  if ((status = open_devices(&o, &devs, &n)) != 0 ||
      (status = read_device_props(devs, n, &res.machine)) != 0 ||
      (status = read_links(&o, devs, n, &res.machine)) != 0)
    goto done;
  read_machine(&res.machine);
  res.options = o.bench;
  status = run_suites(&o, devs, &res);
  int written = write_outputs(&o, &res);
  status = status ? status : written;

done:
  bench_results_free(&res);
  free(devs);
  dlbench_options_free(&o);
  dlrt_shutdown();
  return status;
}
