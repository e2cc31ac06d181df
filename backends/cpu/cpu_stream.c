/* cpu_stream.c — a worker thread per stream executing commands in order, and
 * events that complete when the worker passes them. */
#include "config.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_stream.h"
#include "util/clock.h"
#include "util/status.h"

typedef struct command {
  struct command *next;
  cpu_command_fn fn;
  size_t size;
  _Alignas(max_align_t) unsigned char payload[];
} command;

struct cpu_stream {
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t work;   /* the worker: a command arrived, or stop */
  pthread_cond_t idle;   /* synchronizers: a command finished */
  command *head, *tail;
  uint64_t enqueued, completed;
  int stop;
  int error;               /* first failure since the last synchronize */
  char error_detail[512];  /* its message, re-raised on the caller's thread */
};

/* Events are reference counted: a queued record or wait holds a reference, so
 * destroying an event with work in flight is safe (as in CUDA). */
struct cpu_event {
  pthread_mutex_t lock;
  pthread_cond_t done;
  int refs;
  uint64_t recorded;  /* generation of the last record */
  uint64_t completed; /* highest generation the stream has passed */
  double time_ms;     /* CLOCK_MONOTONIC when the last generation completed */
};

static void *worker(void *arg) {
  cpu_stream *s = arg;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->work, &s->lock);
    if (!s->head) break; /* stop, and nothing left */
    command *c = s->head;
    s->head = c->next;
    if (!s->head) s->tail = NULL;
    pthread_mutex_unlock(&s->lock);
    int rc = c->fn(c->payload);
    pthread_mutex_lock(&s->lock);
    if (rc < 0 && s->error == 0) {
      s->error = rc;
      snprintf(s->error_detail, sizeof s->error_detail, "%s", dlrt_last_error());
    }
    free(c);
    s->completed++;
    pthread_cond_broadcast(&s->idle);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

int cpu_stream_create(cpu_stream **out) {
  cpu_stream *s = calloc(1, sizeof *s);
  if (!s) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->work, NULL);
  pthread_cond_init(&s->idle, NULL);
  int err = pthread_create(&s->thread, NULL, worker, s);
  if (err) {
    pthread_cond_destroy(&s->idle);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->lock);
    free(s);
    return dlrt__set_error(DLRT_ERR_SYSTEM, "cannot start a stream thread: %s", strerror(err));
  }
  *out = s;
  return DLRT_OK;
}

void cpu_stream_destroy(cpu_stream *s) {
  if (!s) return;
  pthread_mutex_lock(&s->lock);
  s->stop = 1;
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->thread, NULL); /* the worker drains the queue first */
  pthread_cond_destroy(&s->idle);
  pthread_cond_destroy(&s->work);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

int cpu_stream_synchronize(cpu_stream *s) {
  pthread_mutex_lock(&s->lock);
  uint64_t target = s->enqueued;
  while (s->completed < target) pthread_cond_wait(&s->idle, &s->lock);
  int rc = s->error;
  char detail[sizeof s->error_detail];
  memcpy(detail, s->error_detail, sizeof detail);
  s->error = 0;
  pthread_mutex_unlock(&s->lock);
  if (rc < 0) return dlrt__set_error(rc, "%s", detail);
  return DLRT_OK;
}

int cpu_stream_enqueue(cpu_stream *s, cpu_command_fn fn, const void *payload, size_t size) {
  command *c = malloc(sizeof *c + size);
  if (!c) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory queueing a command");
  c->next = NULL;
  c->fn = fn;
  c->size = size;
  if (size) memcpy(c->payload, payload, size);
  pthread_mutex_lock(&s->lock);
  if (s->tail) s->tail->next = c;
  else s->head = c;
  s->tail = c;
  s->enqueued++;
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->lock);
  return DLRT_OK;
}

/* ---------------------------------------------------------------- events */

int cpu_event_create(cpu_event **out) {
  cpu_event *e = calloc(1, sizeof *e);
  if (!e) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  pthread_mutex_init(&e->lock, NULL);
  pthread_cond_init(&e->done, NULL);
  e->refs = 1;
  *out = e;
  return DLRT_OK;
}

static void event_unref(cpu_event *e) {
  pthread_mutex_lock(&e->lock);
  int last = --e->refs == 0;
  pthread_mutex_unlock(&e->lock);
  if (last) {
    pthread_cond_destroy(&e->done);
    pthread_mutex_destroy(&e->lock);
    free(e);
  }
}

void cpu_event_destroy(cpu_event *e) {
  if (e) event_unref(e);
}

typedef struct {
  cpu_event *event;
  uint64_t generation;
} event_command;

static int complete_event(void *payload) {
  event_command *c = payload;
  cpu_event *e = c->event;
  pthread_mutex_lock(&e->lock);
  if (c->generation > e->completed) {
    e->completed = c->generation;
    e->time_ms = dlrt__now_ms();
  }
  pthread_cond_broadcast(&e->done);
  pthread_mutex_unlock(&e->lock);
  event_unref(e);
  return DLRT_OK;
}

int cpu_event_record(cpu_event *e, cpu_stream *s) {
  pthread_mutex_lock(&e->lock);
  event_command c = {e, ++e->recorded};
  e->refs++;
  pthread_mutex_unlock(&e->lock);
  int rc = cpu_stream_enqueue(s, complete_event, &c, sizeof c);
  if (rc < 0) event_unref(e);
  return rc;
}

/* Blocks until generation `g` of the event has completed. */
static void wait_generation(cpu_event *e, uint64_t g) {
  pthread_mutex_lock(&e->lock);
  while (e->completed < g) pthread_cond_wait(&e->done, &e->lock);
  pthread_mutex_unlock(&e->lock);
}

static int wait_event(void *payload) {
  event_command *c = payload;
  wait_generation(c->event, c->generation);
  event_unref(c->event);
  return DLRT_OK;
}

int cpu_stream_wait_event(cpu_stream *s, cpu_event *e) {
  pthread_mutex_lock(&e->lock);
  event_command c = {e, e->recorded};
  int already = e->completed >= e->recorded;
  if (!already) e->refs++;
  pthread_mutex_unlock(&e->lock);
  if (already) return DLRT_OK;
  int rc = cpu_stream_enqueue(s, wait_event, &c, sizeof c);
  if (rc < 0) event_unref(e);
  return rc;
}

int cpu_event_synchronize(cpu_event *e) {
  pthread_mutex_lock(&e->lock);
  uint64_t g = e->recorded;
  pthread_mutex_unlock(&e->lock);
  wait_generation(e, g);
  return DLRT_OK;
}

int cpu_event_query(cpu_event *e) {
  pthread_mutex_lock(&e->lock);
  int done = e->completed >= e->recorded;
  pthread_mutex_unlock(&e->lock);
  return done;
}

int cpu_event_elapsed_ms(cpu_event *start, cpu_event *end, float *ms) {
  if (!cpu_event_query(start) || !cpu_event_query(end))
    return dlrt__set_error(DLRT_ERR_STATE, "elapsed time of events that have not completed: "
                           "synchronize the later event first");
  pthread_mutex_lock(&start->lock);
  double t0 = start->time_ms;
  pthread_mutex_unlock(&start->lock);
  pthread_mutex_lock(&end->lock);
  double t1 = end->time_ms;
  pthread_mutex_unlock(&end->lock);
  *ms = (float)(t1 - t0);
  return DLRT_OK;
}
