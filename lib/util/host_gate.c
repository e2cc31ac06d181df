/* host_gate.c — a reference-counted gate on a mutex and a condition. */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>

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

void dlrt__host_gate_wait(dlrt__host_gate *g) {
  pthread_mutex_lock(&g->lock);
  while (!g->open) pthread_cond_wait(&g->opened, &g->lock);
  double at = g->at;
  unref_locked(g);
  if (at > 0) dlrt__sleep_until_s(at);
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
