/* cpu_pool.c — see cpu_pool.h. Workers start on the first region. */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "cpu_pool.h"

#define MAX_WORKERS 256

static struct {
  pthread_mutex_t region; /* one region at a time */
  pthread_mutex_t lock;
  pthread_cond_t wake, done;
  pthread_t threads[MAX_WORKERS];
  int started;            /* workers running */
  int wanted;             /* threads per region, caller included (0: cores) */
  uint64_t generation;    /* bumped per region; workers run once per bump */
  int participants;       /* threads (caller included) in this region */
  int pending;            /* workers yet to finish this region */
  int stop;
  int64_t slices;
  void (*fn)(void *, int64_t);
  void *ctx;
} pool = {.region = PTHREAD_MUTEX_INITIALIZER, .lock = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

/* Part `part` of `parts` runs a contiguous run of slices. */
static void run_part(int part, int parts) {
  int64_t begin = pool.slices * part / parts, end = pool.slices * (part + 1) / parts;
  for (int64_t s = begin; s < end; s++) pool.fn(pool.ctx, s);
}

static void *worker(void *arg) {
  int index = (int)(intptr_t)arg; /* 1.. : the caller is part 0 */
  uint64_t seen = 0;
  pthread_mutex_lock(&pool.lock);
  for (;;) {
    while (!pool.stop && pool.generation == seen) pthread_cond_wait(&pool.wake, &pool.lock);
    if (pool.stop) break;
    seen = pool.generation;
    int parts = pool.participants;
    if (index >= parts) continue; /* not needed this time */
    pthread_mutex_unlock(&pool.lock);
    run_part(index, parts);
    pthread_mutex_lock(&pool.lock);
    if (--pool.pending == 0) pthread_cond_signal(&pool.done);
  }
  pthread_mutex_unlock(&pool.lock);
  return NULL;
}

static int cores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > MAX_WORKERS ? MAX_WORKERS : (int)n;
}

int cpu_pool_size(void) {
  pthread_mutex_lock(&pool.lock);
  int n = pool.wanted ? pool.wanted : cores();
  pthread_mutex_unlock(&pool.lock);
  return n;
}

void cpu_pool_set_threads(int threads) {
  pthread_mutex_lock(&pool.lock);
  pool.wanted = threads < 0 ? 0 : threads > MAX_WORKERS ? MAX_WORKERS : threads;
  pthread_mutex_unlock(&pool.lock);
}

void cpu_pool_run(int64_t slices, void (*fn)(void *, int64_t), void *ctx) {
  pthread_mutex_lock(&pool.region);
  pthread_mutex_lock(&pool.lock);
  int parts = pool.wanted ? pool.wanted : cores();
  if (parts > slices) parts = (int)slices;
  /* Start the workers this region needs (a failed start just means fewer). */
  while (pool.started < parts - 1 &&
         pthread_create(&pool.threads[pool.started], NULL, worker,
                        (void *)(intptr_t)(pool.started + 1)) == 0)
    pool.started++;
  if (parts > pool.started + 1) parts = pool.started + 1;
  pool.slices = slices;
  pool.fn = fn;
  pool.ctx = ctx;
  pool.participants = parts;
  pool.pending = parts - 1;
  if (parts > 1) {
    pool.generation++;
    pthread_cond_broadcast(&pool.wake);
  }
  pthread_mutex_unlock(&pool.lock);
  run_part(0, parts);
  pthread_mutex_lock(&pool.lock);
  while (pool.pending > 0) pthread_cond_wait(&pool.done, &pool.lock);
  pthread_mutex_unlock(&pool.lock);
  pthread_mutex_unlock(&pool.region);
}

void cpu_pool_shutdown(void) {
  pthread_mutex_lock(&pool.region);
  pthread_mutex_lock(&pool.lock);
  pool.stop = 1;
  pthread_cond_broadcast(&pool.wake);
  int started = pool.started;
  pthread_mutex_unlock(&pool.lock);
  for (int i = 0; i < started; i++) pthread_join(pool.threads[i], NULL);
  pthread_mutex_lock(&pool.lock);
  pool.started = 0;
  pool.stop = 0;
  pool.generation = 0;
  pthread_mutex_unlock(&pool.lock);
  pthread_mutex_unlock(&pool.region);
}
