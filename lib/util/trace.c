/* trace.c — writes the Chrome trace (see trace.h): one JSON array, one
 * event per line, flushed per event so a run that dies still leaves a
 * readable trace (the viewers accept an array without its closing
 * bracket). */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlrt.h"
#include "util/clock.h"
#include "util/json_escape.h"
#include "util/status.h"
#include "util/trace.h"

static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *trace_file;
static int trace_checked; /* DLRT_TRACE read */
static int trace_events;
static double trace_t0;
static dlrt__trace_sink trace_sink;
static void *trace_sink_ctx;

static int open_locked(const char *path) {
  FILE *f = fopen(path, "w");
  if (!f)
    return dlrt__set_error(DLRT_ERR_IO, "cannot write the trace %s: %s", path, strerror(errno));
  fputs("[\n", f);
  fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": "
          "\"dlrt\"}}", (int)getpid());
  static const char *const tracks[] = {NULL, "compute stream", "copy stream", "host"};
  for (int t = 1; t <= 3; t++)
    fprintf(f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
            "\"args\": {\"name\": \"%s\"}}", (int)getpid(), t, tracks[t]);
  fflush(f);
  trace_file = f;
  trace_events = 0;
  trace_t0 = dlrt__now_us();
  return DLRT_OK;
}

int dlrt_trace_start(const char *path) {
  DLRT__CHECK_ARG(path && *path, "dlrt_trace_start: path is NULL or empty");
  pthread_mutex_lock(&trace_lock);
  trace_checked = 1;
  if (trace_file) fclose(trace_file), trace_file = NULL;
  int rc = open_locked(path);
  pthread_mutex_unlock(&trace_lock);
  return rc;
}

void dlrt_trace_stop(void) {
  pthread_mutex_lock(&trace_lock);
  if (trace_file) {
    fputs("\n]\n", trace_file);
    fclose(trace_file);
    trace_file = NULL;
  }
  pthread_mutex_unlock(&trace_lock);
}

int dlrt__trace_on(void) {
  pthread_mutex_lock(&trace_lock);
  if (!trace_checked) {
    trace_checked = 1;
    const char *path = getenv("DLRT_TRACE");
    if (path && *path && open_locked(path) == DLRT_OK) atexit(dlrt_trace_stop);
  }
  int on = trace_file != NULL || trace_sink != NULL;
  pthread_mutex_unlock(&trace_lock);
  return on;
}

void dlrt__trace_set_sink(dlrt__trace_sink sink, void *ctx) {
  pthread_mutex_lock(&trace_lock);
  trace_sink = sink;
  trace_sink_ctx = ctx;
  pthread_mutex_unlock(&trace_lock);
}

double dlrt__trace_now_us(void) { return dlrt__now_us() - trace_t0; }

/* Names come from tensors and ops (plain ASCII), but are written as any
 * JSON string is. */
static void file_sink(void *f, const char *bytes, size_t n) { fwrite(bytes, 1, n, f); }

void dlrt__trace_span(const char *name, const char *cat, int tid, double start_us,
                      double end_us) {
  pthread_mutex_lock(&trace_lock);
  if (trace_sink) trace_sink(trace_sink_ctx, name, cat, tid, start_us, end_us);
  if (trace_file) {
    fputs(",\n{\"name\": ", trace_file);
    dlrt__json_write_string(file_sink, trace_file, name);
    fprintf(trace_file, ", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, "
            "\"ts\": %.3f, \"dur\": %.3f}", cat, (int)getpid(), tid, start_us,
            end_us > start_us ? end_us - start_us : 0.0);
    fflush(trace_file);
    trace_events++;
  }
  pthread_mutex_unlock(&trace_lock);
}

void dlrt__trace_counter(const char *name, uint64_t value) {
  double now = dlrt__trace_now_us();
  pthread_mutex_lock(&trace_lock);
  if (trace_file) {
    fputs(",\n{\"name\": ", trace_file);
    dlrt__json_write_string(file_sink, trace_file, name);
    fprintf(trace_file, ", \"ph\": \"C\", \"pid\": %d, \"ts\": %.3f, \"args\": {\"bytes\": "
            "%llu}}", (int)getpid(), now, (unsigned long long)value);
    fflush(trace_file);
  }
  pthread_mutex_unlock(&trace_lock);
}
