/* link.c — the host link model on a device: dlrt_link_set / _get, the
 * GEMM rate the presets scale by, the copy engines' clocks, and the timer
 * thread that opens each modelled copy's gate at its end (link.h). */
#include "config.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "device/link.h"
#include "device/registry.h"
#include "util/clock.h"
#include "util/file.h"
#include "util/status.h"

/* The size and tries of the GEMM a preset's rate is measured by: a square
 * of a training layer's size, the best of a few runs after a warm-up, the
 * tries cut short past MEASURE_BUDGET_S. */
#define MEASURE_N 1024
#define MEASURE_TRIES 3
#define MEASURE_BUDGET_S 1.0

struct dlrt__link {
  pthread_mutex_t lock; /* guards everything below */
  int active;
  char spec[64];
  dlrt_link_spec parsed;
  double bytes_per_s, latency_s;
  dlrt__link_engine engines[DLRT__LINK_DIRECTIONS];
  /* The device's GEMM rate, measured on the first preset and kept. */
  double gemm_flops;
  char gemm_how[64];
  int timed; /* holds the timer thread (a backend without gate_open_at) */
};

/* ---------------------------------------------------------------- the timer */

/* A modelled copy between its notice and its gate's opening. */
typedef struct link_job {
  struct link_job *next; /* the timer's list, by end */
  struct dlrt__link *link;
  const dlrt_backend_iface *be;
  void *gate;
  int dir;
  uint64_t bytes;
  double seconds;
  double end; /* set when the stream reaches the notice */
} link_job;

static struct {
  pthread_mutex_t lock;
  pthread_cond_t wake; /* on CLOCK_MONOTONIC, dlrt__now_s's clock */
  pthread_once_t once;
  pthread_t thread;
  int running, stop;
  int links; /* devices with a model: the thread runs while there are any */
  link_job *head; /* by end, earliest first */
} timer = {.lock = PTHREAD_MUTEX_INITIALIZER, .once = PTHREAD_ONCE_INIT};

static void timer_init_cond(void) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&timer.wake, &attr);
  pthread_condattr_destroy(&attr);
}

/* Opens each gate when its copy's modelled end comes. */
static void *timer_main(void *unused) {
  (void)unused;
#ifdef PR_SET_TIMERSLACK
  /* Linux lets a timed wait of an ordinary thread end up to 50 us late, a
   * copy's own time at 12 GB/s for 600 KB: ask for 1 us. */
  prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
#endif
  pthread_mutex_lock(&timer.lock);
  for (;;) {
    link_job *due = NULL;
    double now = dlrt__now_s();
    while (timer.head && (timer.head->end <= now || timer.stop)) {
      link_job *j = timer.head;
      timer.head = j->next;
      j->next = due;
      due = j;
    }
    if (due) {
      pthread_mutex_unlock(&timer.lock);
      while (due) {
        link_job *j = due;
        due = j->next;
        j->be->gate_open(j->gate);
        free(j);
      }
      pthread_mutex_lock(&timer.lock);
      continue;
    }
    if (timer.stop) break;
    if (timer.head) {
      struct timespec at = dlrt__timespec_at(timer.head->end);
      pthread_cond_timedwait(&timer.wake, &timer.lock, &at);
    } else {
      pthread_cond_wait(&timer.wake, &timer.lock);
    }
  }
  pthread_mutex_unlock(&timer.lock);
  return NULL;
}

/* A device made its model: starts the timer thread if it is not running. */
static int timer_start(void) {
  pthread_once(&timer.once, timer_init_cond);
  pthread_mutex_lock(&timer.lock);
  int rc = DLRT_OK;
  if (!timer.running) {
    timer.stop = 0;
    int err = pthread_create(&timer.thread, NULL, timer_main, NULL);
    if (err)
      rc = dlrt__set_error(DLRT_ERR_SYSTEM, "cannot start the link model's timer thread: %s",
                           strerror(err));
    else
      timer.running = 1;
  }
  if (rc == DLRT_OK) timer.links++;
  pthread_mutex_unlock(&timer.lock);
  return rc;
}

/* A device's model went (its streams idle): the last stops the thread. */
static void timer_stop(void) {
  pthread_mutex_lock(&timer.lock);
  int last = --timer.links == 0 && timer.running;
  if (last) {
    timer.stop = 1;
    pthread_cond_signal(&timer.wake);
  }
  pthread_mutex_unlock(&timer.lock);
  if (!last) return;
  pthread_join(timer.thread, NULL); /* it opens whatever is left first */
  pthread_mutex_lock(&timer.lock);
  timer.running = 0;
  timer.stop = 0;
  pthread_mutex_unlock(&timer.lock);
}

static void timer_add(link_job *j) {
  pthread_mutex_lock(&timer.lock);
  link_job **at = &timer.head;
  while (*at && (*at)->end <= j->end) at = &(*at)->next;
  j->next = *at;
  *at = j;
  if (timer.head == j) pthread_cond_signal(&timer.wake);
  pthread_mutex_unlock(&timer.lock);
}

/* ---------------------------------------------------------------- copies */

static struct dlrt__link *link_of(const dlrt_device_t *dev) {
  return __atomic_load_n(&dev->link, __ATOMIC_ACQUIRE);
}

/* The stream reached the notice: the engine takes the copy from now. Runs
 * on a backend's thread, so it only takes two short locks. */
static void on_reached(void *arg) {
  link_job *j = arg;
  double now = dlrt__now_s();
  pthread_mutex_lock(&j->link->lock);
  j->end = dlrt__link_engine_take(&j->link->engines[j->dir], now, j->seconds, j->bytes);
  pthread_mutex_unlock(&j->link->lock);
  if (j->be->gate_open_at) { /* the stream's thread waits for the time itself */
    j->be->gate_open_at(j->gate, j->end);
    free(j);
    return;
  }
  timer_add(j);
}

int dlrt__link_begin(dlrt_stream_t *s, int dir, uint64_t bytes, void **gate) {
  dlrt_device_t *dev = s->dev;
  struct dlrt__link *link = link_of(dev);
  *gate = NULL;
  if (!link) return DLRT_OK;
  pthread_mutex_lock(&link->lock);
  int active = link->active;
  double seconds = active ? dlrt__link_seconds(link->bytes_per_s, link->latency_s, bytes) : 0;
  pthread_mutex_unlock(&link->lock);
  if (!active) return DLRT_OK;
  const dlrt_backend_iface *be = dev->be;
  link_job *j = calloc(1, sizeof *j);
  if (!j) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory queueing a modelled copy");
  *j = (link_job){.link = link, .be = be, .dir = dir, .bytes = bytes, .seconds = seconds};
  int rc = be->gate_create(dev->ctx, &j->gate);
  if (rc < 0) {
    free(j);
    return rc;
  }
  void *g = j->gate; /* j is the timer's once the notice is queued */
  if ((rc = be->stream_notify(s->ctx, on_reached, j)) < 0) {
    be->gate_open(g);
    be->stream_wait_gate(s->ctx, g); /* passes at once, and frees it */
    free(j);
    return rc;
  }
  *gate = g;
  return DLRT_OK;
}

int dlrt__link_end(dlrt_stream_t *s, void *gate, int copy_rc) {
  if (!gate) return copy_rc;
  int rc = s->dev->be->stream_wait_gate(s->ctx, gate);
  return copy_rc < 0 ? copy_rc : rc;
}

/* Takes a copy on one engine of a device's model at `now`; its end, or 0. */
static double take_now(dlrt_device_t *dev, int dir, uint64_t bytes, double now) {
  struct dlrt__link *link = link_of(dev);
  double end = 0;
  if (!link) return 0;
  pthread_mutex_lock(&link->lock);
  if (link->active)
    end = dlrt__link_engine_take(&link->engines[dir], now,
                                 dlrt__link_seconds(link->bytes_per_s, link->latency_s, bytes),
                                 bytes);
  pthread_mutex_unlock(&link->lock);
  return end;
}

double dlrt__link_between(dlrt_device_t *src, dlrt_device_t *dst, uint64_t bytes) {
  double now = dlrt__now_s();
  double a = take_now(src, DLRT__LINK_D2H, bytes, now);
  double b = take_now(dst, DLRT__LINK_H2D, bytes, now);
  return a > b ? a : b;
}

void dlrt__link_sleep_until(double end) {
  if (end > 0) dlrt__sleep_until_s(end);
}

/* ---------------------------------------------------------------- the GEMM rate */

/* Seconds of the best of a few n x n x n GEMMs of `dtype` on the device's
 * default stream, in raw memory of its own (lib/device has no buffers). */
static int time_gemm(dlrt_device_t *dev, dlrt_dtype dtype, int64_t n, double *best_s) {
  const dlrt_backend_iface *be = dev->be;
  void *stream = dev->default_stream->ctx;
  size_t bytes = (size_t)(n * n) * dlrt_dtype_size(dtype);
  dlrt_mem m[3] = {{0}};
  int made = 0, rc = DLRT_OK;
  *best_s = INFINITY;
  for (; made < 3 && rc == DLRT_OK; made++)
    if ((rc = be->mem_alloc(dev->ctx, bytes, &m[made])) < 0) break;
  /* 0x3c in every byte: fp32 0.0115, bf16 0.0115, no denormals to slow it. */
  for (int i = 0; i < 3 && rc == DLRT_OK; i++) rc = be->memset(stream, m[i], 0, 0x3c, bytes);
  dlrt_gemm_desc d = dlrt_gemm_desc_make(dtype, 0, 0, n, n, n, 1.0f, 0.0f);
  double spent = 0;
  for (int i = 0; i <= MEASURE_TRIES && rc == DLRT_OK; i++) {
    if (i > 1 && spent > MEASURE_BUDGET_S) break;
    double t0 = dlrt__now_s();
    if ((rc = be->gemm(stream, &d, m[0], 0, m[1], 0, m[2], 0)) == DLRT_OK)
      rc = be->stream_synchronize(stream);
    double t = dlrt__now_s() - t0;
    spent += t;
    if (i > 0 && t < *best_s) *best_s = t; /* run 0 warms up */
  }
  if (rc < 0) be->stream_synchronize(stream);
  for (int i = 0; i < made; i++) be->mem_free(dev->ctx, m[i]);
  return rc;
}

/* The device's GEMM rate: fp32, and bf16 too where the device is not the
 * host's CPU (a GPU trains at its 16-bit tensor rate), the faster. */
static int measure_flops(dlrt_device_t *dev, double *flops, char *how, size_t how_size) {
  dlrt_device_props props;
  int rc = dev->be->device_props(dev->be_ctx, dev->index, &props);
  if (rc < 0) return rc;
  dlrt_dtype types[2] = {DLRT_F32, DLRT_BF16};
  int n_types = props.kind == DLRT_DEVICE_CPU ? 1 : 2;
  double work = 2.0 * MEASURE_N * MEASURE_N * MEASURE_N;
  *flops = 0;
  for (int i = 0; i < n_types; i++) {
    double s;
    rc = time_gemm(dev, types[i], MEASURE_N, &s);
    if (rc == DLRT_ERR_UNSUPPORTED && i > 0) { /* no 16-bit GEMM: fp32 it is */
      dlrt_clear_error();
      continue;
    }
    if (rc < 0)
      return dlrt__set_error(rc, "%s: cannot measure the GEMM rate a link preset needs: %s",
                             dev->spec, dlrt_last_error());
    if (s > 0 && work / s > *flops) {
      *flops = work / s;
      snprintf(how, how_size, "%s GEMM %d^3, best of %d", dlrt_dtype_name(types[i]),
               MEASURE_N, MEASURE_TRIES);
    }
  }
  if (!(*flops > 0))
    return dlrt__set_error(DLRT_ERR_BACKEND, "%s: the GEMM a link preset is measured by "
                           "took no time", dev->spec);
  return DLRT_OK;
}

/* ---------------------------------------------------------------- the rate, kept */

/* DLRT_LINK_FLOPS: "30e9", "30G", "30 GFLOP/s", "1.5TFLOPS" into FLOP/s. */
static int parse_flops(const char *text, double *out) {
  char *end;
  double v = strtod(text, &end);
  if (end == text || !isfinite(v) || !(v > 0))
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "DLRT_LINK_FLOPS \"%s\" is not a rate above "
                           "zero: give FLOP/s such as 30e9 or 30GFLOP/s", text);
  while (*end == ' ') end++;
  static const char prefixes[] = "KMGTP";
  const char *at = *end ? strchr(prefixes, toupper((unsigned char)*end)) : NULL;
  if (at) {
    v *= pow(1e3, (double)(at - prefixes + 1));
    end++;
  }
  if (*end && strcasecmp(end, "FLOP/s") != 0 && strcasecmp(end, "FLOPS") != 0)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "DLRT_LINK_FLOPS \"%s\": \"%s\" is not a "
                           "unit: give FLOP/s with an optional K, M, G, T or P (30GFLOP/s)",
                           text, end);
  *out = v;
  return DLRT_OK;
}

/* The file that keeps a device's measured rate, beside the planner's
 * profiles ($DLRT_PROFILE_CACHE, else $XDG_CACHE_HOME/dlrt); 0 when
 * neither is set. Keyed by the device, its name and (CPU) its threads. */
static int flops_cache_path(dlrt_device_t *dev, const dlrt_device_props *props, char *path,
                            size_t size) {
  char key[sizeof dev->spec + sizeof props->name + sizeof props->driver + 16];
  snprintf(key, sizeof key, "%s|%s|%s|%d", dev->spec, props->name, props->driver,
           props->threads);
  uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
  for (const char *c = key; *c; c++) h = (h ^ (unsigned char)*c) * 0x100000001b3ULL;
  char name[64];
  snprintf(name, sizeof name, "link-flops-%016" PRIx64 ".txt", h);
  return dlrt__cache_file(name, path, size);
}

static int flops_from_file(const char *path, double *flops, char *how, size_t how_size) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[128] = "";
  int ok = fscanf(f, "dlrt-link-flops-1 %lf ", flops) == 1 && *flops > 0 &&
           fgets(line, sizeof line, f) != NULL;
  fclose(f);
  if (!ok) return 0;
  line[strcspn(line, "\n")] = '\0';
  snprintf(how, how_size, "%.50s, cached", line);
  return 1;
}

/* Written to a temporary name and renamed, so a reader never sees half. */
static void flops_to_file(const char *path, double flops, const char *how) {
  char tmp[640];
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) return;
  fprintf(f, "dlrt-link-flops-1 %.17g %s\n", flops, how); /* read back exactly */
  if (fclose(f) == 0 && rename(tmp, path) == 0) return;
  unlink(tmp);
}

/* The rate a preset divides by: DLRT_LINK_FLOPS if set, else the rate this
 * device measured before (the cache file), else measured now and kept, so
 * that every process gets the same link. DLRT_PROFILE_FRESH=1 measures
 * again. */
static int preset_flops(dlrt_device_t *dev, double *flops, char *how, size_t how_size) {
  const char *pinned = getenv("DLRT_LINK_FLOPS");
  if (pinned && *pinned) {
    int rc = parse_flops(pinned, flops);
    if (rc == DLRT_OK) snprintf(how, how_size, "DLRT_LINK_FLOPS");
    return rc;
  }
  dlrt_device_props props;
  int rc = dev->be->device_props(dev->be_ctx, dev->index, &props);
  if (rc < 0) return rc;
  const char *fresh = getenv("DLRT_PROFILE_FRESH");
  char path[600];
  int cached = flops_cache_path(dev, &props, path, sizeof path);
  if (cached && !(fresh && *fresh && strcmp(fresh, "0") != 0) &&
      flops_from_file(path, flops, how, how_size))
    return DLRT_OK;
  if ((rc = measure_flops(dev, flops, how, how_size)) < 0) return rc;
  if (cached) flops_to_file(path, *flops, how);
  return DLRT_OK;
}

/* ---------------------------------------------------------------- setting it */

/* The device's model, made on first use. */
static int link_make(dlrt_device_t *dev, struct dlrt__link **out) {
  struct dlrt__link *link = link_of(dev);
  if (link) {
    *out = link;
    return DLRT_OK;
  }
  /* Its own lock: a device opening (under dev->lock) makes DLRT_LINK's. */
  static pthread_mutex_t make_lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&make_lock);
  int rc = DLRT_OK;
  if (!(link = dev->link)) {
    link = calloc(1, sizeof *link);
    if (!link) rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory for a link model");
    else if (!dev->be->gate_open_at && (rc = timer_start()) < 0) free(link);
    else link->timed = !dev->be->gate_open_at;
    if (rc == DLRT_OK) {
      pthread_mutex_init(&link->lock, NULL);
      __atomic_store_n(&dev->link, link, __ATOMIC_RELEASE);
    }
  }
  pthread_mutex_unlock(&make_lock);
  if (rc == DLRT_OK) *out = link;
  return rc;
}

/* Puts the parsed spec on an open device whose streams are idle. */
static int install(dlrt_device_t *dev, const char *text, const dlrt_link_spec *spec) {
  struct dlrt__link *link = link_of(dev);
  if (spec->none) {
    if (link) {
      pthread_mutex_lock(&link->lock);
      link->active = 0;
      memset(link->engines, 0, sizeof link->engines);
      pthread_mutex_unlock(&link->lock);
    }
    return DLRT_OK;
  }
  const dlrt_backend_iface *be = dev->be;
  if (!be->stream_notify || !be->gate_create || !be->stream_wait_gate || !be->gate_open)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "%s: the %s backend cannot hold a stream "
                           "until a modelled time, so it cannot carry a link model", dev->spec,
                           be->name);
  int rc = link_make(dev, &link);
  if (rc < 0) return rc;
  double flops = 0;
  char how[64] = "";
  pthread_mutex_lock(&link->lock);
  flops = link->gemm_flops;
  pthread_mutex_unlock(&link->lock);
  if (spec->preset && flops == 0) {
    if ((rc = preset_flops(dev, &flops, how, sizeof how)) < 0) return rc;
    pthread_mutex_lock(&link->lock);
    link->gemm_flops = flops;
    snprintf(link->gemm_how, sizeof link->gemm_how, "%s", how);
    pthread_mutex_unlock(&link->lock);
  }
  pthread_mutex_lock(&link->lock);
  snprintf(link->spec, sizeof link->spec, "%s", text);
  link->parsed = *spec;
  link->bytes_per_s = spec->preset ? flops / spec->preset->flop_per_byte : spec->bytes_per_s;
  link->latency_s = spec->latency_s;
  memset(link->engines, 0, sizeof link->engines);
  link->active = 1;
  pthread_mutex_unlock(&link->lock);
  return DLRT_OK;
}

int dlrt_link_set(dlrt_device_t *dev, const char *text) {
  DLRT__CHECK_ARG(dev, "dlrt_link_set: device is NULL");
  dlrt_link_spec spec;
  int rc = dlrt_link_parse(text, &spec);
  if (rc == DLRT_OK) rc = dlrt__device_ensure_open(dev);
  if (rc == DLRT_OK) rc = dlrt__device_sync_all(dev);
  if (rc == DLRT_OK) rc = install(dev, text ? text : "none", &spec);
  return rc;
}

int dlrt__link_open_env(dlrt_device_t *dev) {
  const char *text = getenv("DLRT_LINK");
  dlrt_link_spec spec;
  if (!text || !*text) return DLRT_OK;
  int rc = dlrt_link_parse(text, &spec);
  if (rc == DLRT_OK) rc = install(dev, text, &spec);
  if (rc < 0) return dlrt__set_error(rc, "DLRT_LINK: %s", dlrt_last_error());
  return DLRT_OK;
}

void dlrt__link_close(dlrt_device_t *dev) {
  struct dlrt__link *link = dev->link;
  if (!link) return;
  dev->link = NULL;
  int timed = link->timed;
  pthread_mutex_destroy(&link->lock);
  free(link);
  if (timed) timer_stop();
}

/* ---------------------------------------------------------------- reading it */

int dlrt_link_get(dlrt_device_t *dev, dlrt_link_info *out) {
  DLRT__CHECK_ARG(dev && out, "dlrt_link_get: device or out is NULL");
  memset(out, 0, sizeof *out);
  int rc = dlrt__device_ensure_open(dev); /* DLRT_LINK's model comes with the opening */
  if (rc < 0) return rc;
  struct dlrt__link *link = link_of(dev);
  if (!link) return DLRT_OK;
  pthread_mutex_lock(&link->lock);
  if (link->active) {
    out->active = 1;
    snprintf(out->spec, sizeof out->spec, "%s", link->spec);
    out->preset = link->parsed.preset;
    out->bytes_per_s = link->bytes_per_s;
    out->latency_s = link->latency_s;
    if (link->parsed.preset) {
      out->device_flops = link->gemm_flops;
      snprintf(out->flops_how, sizeof out->flops_how, "%s", link->gemm_how);
    }
    for (int d = 0; d < DLRT__LINK_DIRECTIONS; d++) {
      out->copies[d] = link->engines[d].copies;
      out->bytes[d] = link->engines[d].bytes;
      out->busy_s[d] = link->engines[d].busy_s;
      out->queued_s[d] = link->engines[d].queued_s;
    }
  }
  pthread_mutex_unlock(&link->lock);
  return DLRT_OK;
}

double dlrt_link_seconds(dlrt_device_t *dev, uint64_t bytes) {
  dlrt_link_info info;
  if (!dev || dlrt_link_get(dev, &info) < 0 || !info.active) return 0;
  return dlrt__link_seconds(info.bytes_per_s, info.latency_s, bytes);
}

/* "12.0 GB/s", "6.90 MB/s": three figures in decimal units. */
static void rate_text(double v, char *out, size_t size) {
  static const char *const units[] = {"B/s", "KB/s", "MB/s", "GB/s", "TB/s"};
  int u = 0;
  while (u < 4 && v >= 1000) v /= 1000, u++;
  snprintf(out, size, v >= 100 ? "%.0f %s" : v >= 10 ? "%.1f %s" : "%.2f %s", v, units[u]);
}

/* "10 us", "1.5 ms". */
static void time_text(double s, char *out, size_t size) {
  if (s == 0) snprintf(out, size, "0 s");
  else if (s < 1e-3) snprintf(out, size, "%.3g us", s * 1e6);
  else if (s < 1) snprintf(out, size, "%.3g ms", s * 1e3);
  else snprintf(out, size, "%.3g s", s);
}

int dlrt_link_describe(dlrt_device_t *dev, char *buf, size_t size) {
  DLRT__CHECK_ARG(dev && (buf || size == 0), "dlrt_link_describe: device or buf is NULL");
  dlrt_link_info info;
  char rate[32], latency[32];
  int rc = dlrt_link_get(dev, &info);
  if (rc < 0) return rc;
  if (!info.active) return snprintf(buf, size, "none");
  rate_text(info.bytes_per_s, rate, sizeof rate);
  time_text(info.latency_s, latency, sizeof latency);
  if (!info.preset)
    return snprintf(buf, size, "%s + %s per copy, each direction", rate, latency);
  return snprintf(buf, size, "%s: %s + %s per copy, each direction (%s's %.0f FLOP/B at this "
                  "device's %.1f GFLOP/s, %s)", info.preset->name, rate, latency,
                  info.preset->name, info.preset->flop_per_byte, info.device_flops / 1e9,
                  info.flops_how);
}
