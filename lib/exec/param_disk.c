/* param_disk.c — streamed parameters' optimizer state on disk, behind a
 * host budget (param_stream.c, dlrt_exec_param_state_limit): each such
 * parameter's state (Adam's two moments, SGD's momentum: n_state x its
 * bytes) has a slot in the spill file (disk.h), reserved at once, and is in
 * host memory only in one of a few slots around its update: read ahead by
 * an I/O thread in the order the updates will come, updated in place, then
 * written back by the same thread while later updates run. A slot written
 * back stays readable (clean) until another parameter needs it. A slot
 * never written reads as zeros: the optimizer's initial state. */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "exec/param_stream.h"
#include "mem/disk.h"
#include "util/clock.h"
#include "util/status.h"

enum { SLOT_FREE, SLOT_READING, SLOT_READY, SLOT_IN_USE, SLOT_WRITING };

typedef struct {
  int owner; /* parameter, -1: none */
  int state;
  uint64_t last; /* when it was last handed out (least recently used goes first) */
  float *buf;
} slot;

struct dlrt__pdisk {
  int n;
  size_t *bytes;   /* per parameter: its state's bytes, 0: in host memory */
  int64_t *offset; /* its slot in the file */
  char *written;   /* its slot holds data (else zeros) */
  int *slot_of;    /* -1: in no host slot */
  uint64_t *used;  /* the round in which it was last handed out */
  uint64_t round, clock;
  int n_slots;
  slot *s;
  dlrt__disk disk;
  pthread_t thread;
  int started, stop;
  pthread_mutex_t lock;
  pthread_cond_t work, changed;
  int *queue, head, tail; /* slots to read or write (their state says which), a ring */
  int failed;
  char error[512];
  dlrt__pdisk_stats st;
};

static void *io_main(void *arg) {
  dlrt__pdisk *d = arg;
  pthread_mutex_lock(&d->lock);
  for (;;) {
    while (!d->stop && d->head == d->tail) pthread_cond_wait(&d->work, &d->lock);
    if (d->head == d->tail) break;
    slot *x = &d->s[d->queue[d->head++ % d->n_slots]];
    int i = x->owner, write = x->state == SLOT_WRITING, was_written = d->written[i];
    pthread_mutex_unlock(&d->lock);
    double t0 = dlrt__now_ms();
    int rc = DLRT_OK;
    if (write) rc = dlrt__disk_write(&d->disk, d->offset[i], x->buf, d->bytes[i]);
    else if (was_written) rc = dlrt__disk_read(&d->disk, d->offset[i], x->buf, d->bytes[i]);
    else memset(x->buf, 0, d->bytes[i]);
    double ms = dlrt__now_ms() - t0;
    pthread_mutex_lock(&d->lock);
    if (rc < 0 && !d->failed) {
      d->failed = 1;
      snprintf(d->error, sizeof d->error, "%s", dlrt_last_error());
    }
    if (write) d->written[i] = 1, d->st.written_bytes += d->bytes[i], d->st.write_ms += ms;
    else if (was_written) d->st.read_bytes += d->bytes[i], d->st.read_ms += ms;
    x->state = SLOT_READY; /* clean either way: readable until it is needed elsewhere */
    pthread_cond_broadcast(&d->changed);
  }
  pthread_mutex_unlock(&d->lock);
  return NULL;
}

static int failed(dlrt__pdisk *d) {
  return dlrt__set_error(DLRT_ERR_IO, "optimizer state on disk (--offload params with "
                         "--host-limit): %s", d->error);
}

/* Queues slot k's read or write (its state says which); lock held. */
static void queue_io(dlrt__pdisk *d, int k) {
  d->queue[d->tail++ % d->n_slots] = k;
  pthread_cond_signal(&d->work);
}

/* A slot parameter i may take, or -1: a free one, else the least recently
 * used clean one (for a read ahead, only one whose parameter was handed out
 * this round already: it will not be needed again before the next). */
static int slot_for(dlrt__pdisk *d, int ahead) {
  int best = -1;
  for (int k = 0; k < d->n_slots; k++) {
    slot *x = &d->s[k];
    if (x->state == SLOT_FREE) return k;
    if (x->state != SLOT_READY || (ahead && d->used[x->owner] != d->round)) continue;
    if (best < 0 || x->last < d->s[best].last) best = k;
  }
  return best;
}

/* Starts reading parameter i's state into slot k; lock held. */
static void start_read(dlrt__pdisk *d, int i, int k) {
  slot *x = &d->s[k];
  if (x->owner >= 0) d->slot_of[x->owner] = -1;
  x->owner = i, x->state = SLOT_READING;
  d->slot_of[i] = k;
  queue_io(d, k);
}

void dlrt__pdisk_prefetch(dlrt__pdisk *d, int i) {
  if (!d || i < 0 || i >= d->n || !d->bytes[i]) return;
  pthread_mutex_lock(&d->lock);
  if (d->slot_of[i] < 0) {
    int k = slot_for(d, 1);
    if (k >= 0) start_read(d, i, k), d->st.prefetches++;
  }
  pthread_mutex_unlock(&d->lock);
}

int dlrt__pdisk_get(dlrt__pdisk *d, int i, float **state) {
  double t0 = dlrt__now_ms();
  pthread_mutex_lock(&d->lock);
  int rc = DLRT_OK;
  for (;;) {
    if (d->failed) {
      rc = failed(d);
      break;
    }
    int k = d->slot_of[i];
    if (k >= 0 && d->s[k].state == SLOT_READY) {
      d->s[k].state = SLOT_IN_USE;
      d->s[k].last = ++d->clock;
      d->used[i] = d->round;
      *state = d->s[k].buf;
      break;
    }
    if (k < 0 && (k = slot_for(d, 0)) >= 0) {
      start_read(d, i, k);
      d->st.misses++;
      continue;
    }
    pthread_cond_wait(&d->changed, &d->lock); /* a read or a write to finish */
  }
  pthread_mutex_unlock(&d->lock);
  d->st.wait_ms += dlrt__now_ms() - t0;
  return rc;
}

int dlrt__pdisk_put(dlrt__pdisk *d, int i) {
  pthread_mutex_lock(&d->lock);
  int k = d->slot_of[i], rc = d->failed ? failed(d) : DLRT_OK;
  if (k >= 0 && d->s[k].state == SLOT_IN_USE) {
    d->s[k].state = SLOT_WRITING;
    queue_io(d, k);
  }
  pthread_mutex_unlock(&d->lock);
  return rc;
}

void dlrt__pdisk_new_round(dlrt__pdisk *d) {
  if (!d) return;
  pthread_mutex_lock(&d->lock);
  d->round++;
  pthread_mutex_unlock(&d->lock);
}

/* Waits until no read or write is queued or running; lock held. */
static void idle(dlrt__pdisk *d) {
  for (;;) {
    int busy = 0;
    for (int k = 0; k < d->n_slots; k++)
      busy |= d->s[k].state == SLOT_READING || d->s[k].state == SLOT_WRITING;
    if (!busy) return;
    pthread_cond_wait(&d->changed, &d->lock);
  }
}

int dlrt__pdisk_io(dlrt__pdisk *d, int i, size_t at, void *buf, size_t bytes, int write) {
  pthread_mutex_lock(&d->lock);
  idle(d);
  int rc = d->failed ? failed(d) : DLRT_OK, k = d->slot_of[i];
  if (rc == DLRT_OK && k >= 0) {
    /* Its slot is current: read there, or write there and to disk. */
    char *mine = (char *)d->s[k].buf + at;
    if (!write) memcpy(buf, mine, bytes);
    else memcpy(mine, buf, bytes);
  }
  if (rc == DLRT_OK && write) {
    /* The whole state to disk: from the slot, or the untouched rest read
     * first (zeros where never written). */
    float *whole = k >= 0 ? d->s[k].buf : malloc(d->bytes[i]);
    if (!whole) rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
    else if (k < 0 && d->written[i])
      rc = dlrt__disk_read(&d->disk, d->offset[i], whole, d->bytes[i]);
    else if (k < 0) memset(whole, 0, d->bytes[i]);
    if (rc == DLRT_OK && k < 0) memcpy((char *)whole + at, buf, bytes);
    if (rc == DLRT_OK) rc = dlrt__disk_write(&d->disk, d->offset[i], whole, d->bytes[i]);
    if (rc == DLRT_OK) d->written[i] = 1, d->st.written_bytes += d->bytes[i];
    if (k < 0) free(whole);
  } else if (rc == DLRT_OK && k < 0) {
    if (d->written[i]) rc = dlrt__disk_read(&d->disk, d->offset[i] + (int64_t)at, buf, bytes);
    else memset(buf, 0, bytes);
  }
  pthread_mutex_unlock(&d->lock);
  return rc;
}

int dlrt__pdisk_create(int n, const size_t *bytes, int n_slots, dlrt__pdisk **out) {
  *out = NULL;
  dlrt__pdisk *d = calloc(1, sizeof *d);
  size_t nn = (size_t)(n ? n : 1);
  if (!d) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  d->n = n, d->n_slots = n_slots;
  pthread_mutex_init(&d->lock, NULL);
  pthread_cond_init(&d->work, NULL), pthread_cond_init(&d->changed, NULL);
  d->bytes = calloc(nn, sizeof *d->bytes);
  d->offset = calloc(nn, sizeof *d->offset);
  d->written = calloc(nn, 1);
  d->slot_of = malloc(nn * sizeof *d->slot_of);
  d->used = calloc(nn, sizeof *d->used);
  d->s = calloc((size_t)n_slots, sizeof *d->s);
  d->queue = calloc((size_t)n_slots, sizeof *d->queue);
  int rc = DLRT_OK;
  if (!d->bytes || !d->offset || !d->written || !d->slot_of || !d->used || !d->s || !d->queue)
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  size_t largest = 0;
  for (int i = 0; i < n && rc == DLRT_OK; i++) {
    d->slot_of[i] = -1;
    d->bytes[i] = bytes[i];
    if (bytes[i] > largest) largest = bytes[i];
  }
  d->round = 1; /* parameters never handed out are not this round's */
  for (int k = 0; k < n_slots && rc == DLRT_OK; k++) {
    d->s[k].owner = -1;
    if (!(d->s[k].buf = malloc(largest ? largest : 4)))
      rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory: %d slots of %.1f MiB for the "
                           "optimizer state on disk", n_slots, (double)largest / 1048576.0);
  }
  /* Every slot in the file reserved now: a folder too small fails here. */
  if (rc == DLRT_OK) rc = dlrt__disk_open(&d->disk);
  for (int i = 0; i < n && rc == DLRT_OK; i++)
    if (bytes[i]) rc = dlrt__disk_reserve(&d->disk, bytes[i], &d->offset[i]);
  if (rc == DLRT_OK && pthread_create(&d->thread, NULL, io_main, d) != 0)
    rc = dlrt__set_error(DLRT_ERR_OOM, "cannot start the optimizer state's disk thread");
  if (rc == DLRT_OK) d->started = 1;
  if (rc < 0) {
    dlrt__pdisk_destroy(d);
    return rc;
  }
  d->st.disk_bytes = (uint64_t)d->disk.end;
  d->st.slot_bytes = (uint64_t)largest * (uint64_t)n_slots;
  *out = d;
  return DLRT_OK;
}

void dlrt__pdisk_destroy(dlrt__pdisk *d) {
  if (!d) return;
  if (d->started) {
    pthread_mutex_lock(&d->lock);
    d->stop = 1;
    pthread_cond_signal(&d->work);
    pthread_mutex_unlock(&d->lock);
    pthread_join(d->thread, NULL);
  }
  for (int k = 0; d->s && k < d->n_slots; k++) free(d->s[k].buf);
  dlrt__disk_close(&d->disk);
  pthread_mutex_destroy(&d->lock);
  pthread_cond_destroy(&d->work), pthread_cond_destroy(&d->changed);
  free(d->bytes), free(d->offset), free(d->written), free(d->slot_of), free(d->used);
  free(d->s), free(d->queue);
  free(d);
}

void dlrt__pdisk_stats_get(dlrt__pdisk *d, dlrt__pdisk_stats *out) {
  memset(out, 0, sizeof *out);
  if (!d) return;
  pthread_mutex_lock(&d->lock);
  *out = d->st;
  pthread_mutex_unlock(&d->lock);
}
