/* host_gate.c — a reference-counted gate on a mutex and a condition. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "util/clock.h"
#include "util/host_gate.h"
#include "util/status.h"

struct dlrt__host_gate {
  pthread_mutex_t lock;
  pthread_cond_t opened;
  int open;
  double at; /* open_at's time (0: now) */
  int refs;
};

int dlrt__host_gate_create(dlrt__host_gate **out) {
  dlrt__host_gate *g = calloc(1, sizeof *g);
  if (!g) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory for a link gate");
  pthread_mutex_init(&g->lock, NULL);
  pthread_cond_init(&g->opened, NULL);
  g->refs = 2; /* the waiter's and the opener's */
  *out = g;
  return DLRT_OK;
}

/* Gives one reference back with the lock held; frees the gate on the last. */
static void unref_locked(dlrt__host_gate *g) {
  int last = --g->refs == 0;
  pthread_mutex_unlock(&g->lock);
  if (last) {
    pthread_cond_destroy(&g->opened);
    pthread_mutex_destroy(&g->lock);
    free(g);
  }
}

/* Sleeps until `when` on CLOCK_MONOTONIC. Linux lets an ordinary thread's
 * timer end up to 50 us late; the waiting threads ask for 1 us, once. */
static void sleep_until(double when) {
#ifdef PR_SET_TIMERSLACK
  static _Thread_local int slack_set;
  if (!slack_set) {
    prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
    slack_set = 1;
  }
#endif
  struct timespec at;
  at.tv_sec = (time_t)when;
  at.tv_nsec = (long)((when - (double)at.tv_sec) * 1e9);
  if (at.tv_nsec >= 1000000000L) at.tv_sec++, at.tv_nsec -= 1000000000L;
  if (at.tv_nsec < 0) at.tv_nsec = 0;
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) == EINTR) {
  }
}

void dlrt__host_gate_wait(dlrt__host_gate *g) {
  pthread_mutex_lock(&g->lock);
  while (!g->open) pthread_cond_wait(&g->opened, &g->lock);
  double at = g->at;
  unref_locked(g);
  if (at > 0 && at > dlrt__now_s()) sleep_until(at);
}

void dlrt__host_gate_drop(dlrt__host_gate *g) {
  pthread_mutex_lock(&g->lock);
  unref_locked(g);
}

void dlrt__host_gate_open_at(dlrt__host_gate *g, double when) {
  pthread_mutex_lock(&g->lock);
  g->open = 1;
  g->at = when;
  pthread_cond_broadcast(&g->opened);
  unref_locked(g);
}

void dlrt__host_gate_open(dlrt__host_gate *g) { dlrt__host_gate_open_at(g, 0); }
