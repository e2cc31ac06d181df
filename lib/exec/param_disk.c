/* param_disk.c — streamed parameters' optimizer state on disk, behind a
 * host budget (param_disk.h; param_stream_host.c,
 * dlrt_exec_param_state_limit): each such parameter's state (Adam's two
 * moments, SGD's momentum: n_state x its elements) has its place in the
 * spill file (disk.h), reserved at once, state after state (a master on
 * disk is the last of them: param_stream_host.c), and is in host
 * memory only a chunk at a time, in one of a few slots around its update:
 * read ahead by an I/O thread in the order the updates will come, updated
 * in place, then written back by the same thread while later chunks are
 * updated. So the budget needs a few chunks, not whole tensors (gpt2-medium's
 * embedding alone has 412 MB of Adam state). A slot written back stays
 * readable (clean) until another chunk needs it. A chunk never written
 * reads as zeros: the optimizer's initial state. The update is elementwise,
 * so chunks give the same bits as one whole-tensor update. The same
 * thread reads one part of a chunk (a master on disk, for its fp32 fetch:
 * param_master.c) into the caller's buffer ahead of the slots' work, from
 * the chunk's slot where one holds it. Which parameters go there, and the
 * chunk: param_disk_fit.c. */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "exec/param_disk.h"
#include "mem/disk.h"
#include "util/clock.h"
#include "util/status.h"

enum { SLOT_FREE, SLOT_READING, SLOT_READY, SLOT_IN_USE, SLOT_WRITING };

typedef struct {
  int owner; /* a chunk (an index among all parameters' chunks), -1: none */
  int state;
  uint64_t last; /* when it was last handed out (least recently used goes first) */
  float *buf;    /* n_state x chunk floats: state j at buf + j * chunk */
} slot;

struct dlrt__pdisk {
  int n;
  int64_t *numel;  /* per parameter: its elements, 0: state in host memory */
  int *n_state;
  int64_t *offset; /* its states in the file, one after the other */
  int *first;      /* its chunks: first[i] .. first[i + 1] - 1 */
  int *param_of;   /* per chunk: its parameter */
  int n_chunks;
  int64_t chunk;   /* elements of each state per chunk */
  char *written;   /* per chunk: its place holds data (else zeros) */
  int *slot_of;    /* per chunk: -1, in no host slot */
  uint64_t *used;  /* per chunk: the round in which it was last handed out */
  uint64_t round, clock;
  int n_slots;
  slot *s;
  dlrt__disk disk;
  pthread_t thread;
  int started, stop;
  pthread_mutex_t lock;
  pthread_cond_t work, changed;
  int *queue, head, tail; /* slots to read or write (their state says which), a ring */
  /* Reads of one part of a chunk into the caller's memory (a master's
   * fetch: dlrt__pdisk_part_start), a ring; part_busy: one being done. */
  dlrt__pdisk_part *parts[DLRT__PDISK_PARTS];
  int part_head, part_tail, part_busy;
  int failed;
  char error[512];
  dlrt__pdisk_stats st;
};

/* Chunk q's parameter i, its first element and its element count. */
static int64_t chunk_span(const dlrt__pdisk *d, int q, int *i, int64_t *at) {
  *i = d->param_of[q];
  *at = (int64_t)(q - d->first[*i]) * d->chunk;
  int64_t left = d->numel[*i] - *at;
  return left < d->chunk ? left : d->chunk;
}

/* Chunk q between its slot's buffer and the file (each state's part). */
static int chunk_io(dlrt__pdisk *d, int q, float *buf, int write) {
  int i;
  int64_t at, count = chunk_span(d, q, &i, &at);
  int rc = DLRT_OK;
  for (int j = 0; j < d->n_state[i] && rc == DLRT_OK; j++) {
    int64_t where = d->offset[i] + ((int64_t)j * d->numel[i] + at) * 4;
    float *mine = buf + (int64_t)j * d->chunk;
    rc = write ? dlrt__disk_write(&d->disk, where, mine, (size_t)count * 4)
               : dlrt__disk_read(&d->disk, where, mine, (size_t)count * 4);
  }
  return rc;
}

static uint64_t chunk_bytes(const dlrt__pdisk *d, int q) {
  int i;
  int64_t at, count = chunk_span(d, q, &i, &at);
  return (uint64_t)count * (uint64_t)d->n_state[i] * 4u;
}

/* Part read r (lock held, returned held): from chunk q's slot where one
 * holds it (written back or being written: as new as the file or newer),
 * waiting while an update has it; else from the file (a chunk never written
 * reads as zeros). */
static void part_read(dlrt__pdisk *d, dlrt__pdisk_part *r) {
  int q = d->first[r->i] + r->c, i, k;
  int64_t at, count = chunk_span(d, q, &i, &at);
  while ((k = d->slot_of[q]) >= 0 && d->s[k].state == SLOT_IN_USE)
    pthread_cond_wait(&d->changed, &d->lock);
  size_t bytes = (size_t)count * 4;
  r->count = count;
  if (k >= 0 && (d->s[k].state == SLOT_READY || d->s[k].state == SLOT_WRITING)) {
    /* Under the lock: a clean slot may be handed to an update meanwhile. */
    memcpy(r->dst, d->s[k].buf + (int64_t)r->part * d->chunk, bytes);
    d->st.part_slot_bytes += bytes;
    return;
  }
  int was_written = d->written[q];
  pthread_mutex_unlock(&d->lock);
  double t0 = dlrt__now_ms();
  int rc = DLRT_OK;
  if (was_written)
    rc = dlrt__disk_read(&d->disk, d->offset[i] + ((int64_t)r->part * d->numel[i] + at) * 4,
                         r->dst, bytes);
  else
    memset(r->dst, 0, bytes);
  double ms = dlrt__now_ms() - t0;
  pthread_mutex_lock(&d->lock);
  if (rc < 0 && !d->failed) {
    d->failed = 1;
    snprintf(d->error, sizeof d->error, "%s", dlrt_last_error());
  }
  if (was_written) d->st.read_bytes += bytes, d->st.part_read_bytes += bytes, d->st.read_ms += ms;
}

static void *io_main(void *arg) {
  dlrt__pdisk *d = arg;
  pthread_mutex_lock(&d->lock);
  for (;;) {
    while (!d->stop && d->head == d->tail && d->part_head == d->part_tail)
      pthread_cond_wait(&d->work, &d->lock);
    if (d->part_head != d->part_tail) {
      /* A part read first: the compute waits for it at its fetch, an
       * update only later. */
      dlrt__pdisk_part *r = d->parts[d->part_head % DLRT__PDISK_PARTS];
      d->part_busy = 1;
      part_read(d, r);
      d->part_head++, d->part_busy = 0;
      r->done = 1;
      pthread_cond_broadcast(&d->changed);
      continue;
    }
    if (d->head == d->tail) break;
    slot *x = &d->s[d->queue[d->head++ % d->n_slots]];
    int q = x->owner, write = x->state == SLOT_WRITING, was_written = d->written[q];
    pthread_mutex_unlock(&d->lock);
    double t0 = dlrt__now_ms();
    int rc = DLRT_OK;
    if (write || was_written) rc = chunk_io(d, q, x->buf, write);
    else memset(x->buf, 0, sizeof(float) * (size_t)d->chunk * (size_t)d->n_state[d->param_of[q]]);
    double ms = dlrt__now_ms() - t0;
    pthread_mutex_lock(&d->lock);
    if (rc < 0 && !d->failed) {
      d->failed = 1;
      snprintf(d->error, sizeof d->error, "%s", dlrt_last_error());
    }
    if (write) d->written[q] = 1, d->st.written_bytes += chunk_bytes(d, q), d->st.write_ms += ms;
    else if (was_written) d->st.read_bytes += chunk_bytes(d, q), d->st.read_ms += ms;
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

/* A slot chunk may take, or -1: a free one, else the least recently used
 * clean one (for a read ahead, only one whose chunk was handed out this
 * round already: it will not be needed again before the next). */
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

/* Starts reading chunk q into slot k; lock held. */
static void start_read(dlrt__pdisk *d, int q, int k) {
  slot *x = &d->s[k];
  if (x->owner >= 0) d->slot_of[x->owner] = -1;
  x->owner = q, x->state = SLOT_READING;
  d->slot_of[q] = k;
  queue_io(d, k);
}

/* Chunk c of parameter i, or -1. */
static int chunk_of(const dlrt__pdisk *d, int i, int c) {
  if (!d || i < 0 || i >= d->n || c < 0 || c >= d->first[i + 1] - d->first[i]) return -1;
  return d->first[i] + c;
}

int dlrt__pdisk_chunks(const dlrt__pdisk *d, int i) {
  return d && i >= 0 && i < d->n ? d->first[i + 1] - d->first[i] : 0;
}

int64_t dlrt__pdisk_chunk(const dlrt__pdisk *d) { return d ? d->chunk : 0; }

void dlrt__pdisk_prefetch(dlrt__pdisk *d, int i, int c) {
  int q = chunk_of(d, i, c);
  if (q < 0) return;
  pthread_mutex_lock(&d->lock);
  if (d->slot_of[q] < 0) {
    int k = slot_for(d, 1);
    if (k >= 0) start_read(d, q, k), d->st.prefetches++;
  }
  pthread_mutex_unlock(&d->lock);
}

int dlrt__pdisk_get(dlrt__pdisk *d, int i, int c, float **state, int64_t *count) {
  int q = chunk_of(d, i, c);
  if (q < 0)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "optimizer state on disk: parameter %d has "
                           "no chunk %d there", i, c);
  double t0 = dlrt__now_ms();
  pthread_mutex_lock(&d->lock);
  int rc = DLRT_OK;
  for (;;) {
    if (d->failed) {
      rc = failed(d);
      break;
    }
    int k = d->slot_of[q];
    if (k >= 0 && d->s[k].state == SLOT_READY) {
      d->s[k].state = SLOT_IN_USE;
      d->s[k].last = ++d->clock;
      d->used[q] = d->round;
      *state = d->s[k].buf;
      int p;
      int64_t at;
      *count = chunk_span(d, q, &p, &at);
      break;
    }
    if (k < 0 && (k = slot_for(d, 0)) >= 0) {
      start_read(d, q, k);
      d->st.misses++;
      continue;
    }
    pthread_cond_wait(&d->changed, &d->lock); /* a read or a write to finish */
  }
  d->st.wait_ms += dlrt__now_ms() - t0;
  pthread_mutex_unlock(&d->lock);
  return rc;
}

int dlrt__pdisk_put(dlrt__pdisk *d, int i, int c) {
  int q = chunk_of(d, i, c);
  if (q < 0) return DLRT_OK;
  pthread_mutex_lock(&d->lock);
  int k = d->slot_of[q], rc = d->failed ? failed(d) : DLRT_OK;
  if (k >= 0 && d->s[k].state == SLOT_IN_USE) {
    d->s[k].state = SLOT_WRITING;
    queue_io(d, k);
  }
  pthread_mutex_unlock(&d->lock);
  return rc;
}

int dlrt__pdisk_part_start(dlrt__pdisk *d, dlrt__pdisk_part *r) {
  if (chunk_of(d, r->i, r->c) < 0 || r->part < 0 || r->part >= d->n_state[r->i])
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "state on disk: parameter %d has no part %d "
                           "of chunk %d there", r->i, r->part, r->c);
  pthread_mutex_lock(&d->lock);
  int rc = d->failed ? failed(d) : DLRT_OK;
  if (rc == DLRT_OK && d->part_tail - d->part_head >= DLRT__PDISK_PARTS)
    rc = dlrt__set_error(DLRT_ERR_STATE, "state on disk: more than %d part reads queued",
                         (int)DLRT__PDISK_PARTS);
  if (rc == DLRT_OK) {
    r->done = 0, r->count = 0;
    d->parts[d->part_tail++ % DLRT__PDISK_PARTS] = r;
    d->st.part_reads++;
    pthread_cond_signal(&d->work);
  }
  pthread_mutex_unlock(&d->lock);
  return rc;
}

int dlrt__pdisk_part_wait(dlrt__pdisk *d, dlrt__pdisk_part *r) {
  pthread_mutex_lock(&d->lock);
  while (!r->done) pthread_cond_wait(&d->changed, &d->lock);
  int rc = d->failed ? failed(d) : DLRT_OK;
  pthread_mutex_unlock(&d->lock);
  return rc;
}

void dlrt__pdisk_new_round(dlrt__pdisk *d) {
  if (!d) return;
  pthread_mutex_lock(&d->lock);
  d->round++;
  pthread_mutex_unlock(&d->lock);
}

/* Waits until no read or write (part reads too) is queued or running;
 * lock held. */
static void idle(dlrt__pdisk *d) {
  for (;;) {
    int busy = d->part_head != d->part_tail || d->part_busy;
    for (int k = 0; k < d->n_slots; k++)
      busy |= d->s[k].state == SLOT_READING || d->s[k].state == SLOT_WRITING;
    if (!busy) return;
    pthread_cond_wait(&d->changed, &d->lock);
  }
}

/* Bytes [at, at + bytes) of parameter i's states (one after the other) to
 * or from the file, chunk by chunk: a chunk never written reads as zeros,
 * and is zeroed first where a write covers only part of it. A slot holding
 * a chunk written here is dropped (the file is newer). Lock held, idle. */
static int range_io(dlrt__pdisk *d, int i, size_t at, char *buf, size_t bytes, int write) {
  size_t state_bytes = (size_t)d->numel[i] * 4, chunk_b = (size_t)d->chunk * 4;
  float *zeros = NULL;
  int rc = DLRT_OK;
  for (size_t done = 0; done < bytes && rc == DLRT_OK;) {
    size_t pos = at + done, j = pos / state_bytes, in_state = pos % state_bytes;
    int q = d->first[i] + (int)(in_state / chunk_b);
    size_t chunk_end = (size_t)(q - d->first[i]) * chunk_b + chunk_b;
    if (chunk_end > state_bytes) chunk_end = state_bytes;
    size_t take = chunk_end - in_state < bytes - done ? chunk_end - in_state : bytes - done;
    int64_t where = d->offset[i] + (int64_t)(j * state_bytes + in_state);
    if (!write) {
      if (d->written[q]) rc = dlrt__disk_read(&d->disk, where, buf + done, take);
      else memset(buf + done, 0, take);
    } else {
      if (!d->written[q]) {
        /* Zeros in every state's part of the chunk first: it is written now. */
        int p;
        int64_t first, count = chunk_span(d, q, &p, &first);
        if (!zeros && !(zeros = calloc((size_t)d->chunk, sizeof(float))))
          rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
        for (int s = 0; s < d->n_state[i] && rc == DLRT_OK; s++)
          rc = dlrt__disk_write(&d->disk, d->offset[i] + ((int64_t)s * d->numel[i] + first) * 4,
                                zeros, (size_t)count * 4);
        if (rc == DLRT_OK) d->written[q] = 1;
      }
      if (rc == DLRT_OK) rc = dlrt__disk_write(&d->disk, where, buf + done, take);
      if (rc == DLRT_OK) d->st.written_bytes += take;
      int k = d->slot_of[q];
      if (k >= 0) d->slot_of[q] = -1, d->s[k].owner = -1, d->s[k].state = SLOT_FREE;
    }
    done += take;
  }
  free(zeros);
  return rc;
}

int dlrt__pdisk_io(dlrt__pdisk *d, int i, size_t at, void *buf, size_t bytes, int write) {
  pthread_mutex_lock(&d->lock);
  idle(d);
  int rc = d->failed ? failed(d) : DLRT_OK;
  size_t whole = (size_t)d->numel[i] * 4 * (size_t)d->n_state[i];
  if (rc == DLRT_OK && (at > whole || bytes > whole - at))
    rc = dlrt__set_error(DLRT_ERR_INVALID_ARG, "optimizer state on disk: bytes %zu..%zu are "
                         "past parameter %d's %zu", at, at + bytes, i, whole);
  /* Every slot is clean now (the file holds what it holds). */
  if (rc == DLRT_OK) rc = range_io(d, i, at, buf, bytes, write);
  pthread_mutex_unlock(&d->lock);
  return rc;
}

int dlrt__pdisk_create(int n, const int64_t *numel, const int *n_state, int64_t chunk,
                       int n_slots, dlrt__pdisk **out) {
  *out = NULL;
  dlrt__pdisk *d = calloc(1, sizeof *d);
  size_t nn = (size_t)(n ? n : 1);
  if (!d) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  d->n = n, d->n_slots = n_slots;
  pthread_mutex_init(&d->lock, NULL);
  pthread_cond_init(&d->work, NULL), pthread_cond_init(&d->changed, NULL);
  d->numel = calloc(nn, sizeof *d->numel);
  d->n_state = calloc(nn, sizeof *d->n_state);
  d->offset = calloc(nn, sizeof *d->offset);
  d->first = calloc(nn + 1, sizeof *d->first);
  d->s = calloc((size_t)n_slots, sizeof *d->s);
  d->queue = calloc((size_t)n_slots, sizeof *d->queue);
  int rc = DLRT_OK;
  if (!d->numel || !d->n_state || !d->offset || !d->first || !d->s || !d->queue)
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  int64_t largest = 0;
  int most_states = 1;
  for (int i = 0; i < n && rc == DLRT_OK; i++)
    if (numel[i] > largest) largest = numel[i];
  d->chunk = chunk < largest ? chunk : largest;
  if (d->chunk < 1) d->chunk = 1;
  for (int i = 0; i < n && rc == DLRT_OK; i++) {
    d->numel[i] = numel[i];
    d->n_state[i] = numel[i] ? n_state[i] : 0;
    if (d->n_state[i] > most_states) most_states = d->n_state[i];
    d->first[i + 1] = d->first[i] + (int)((numel[i] + d->chunk - 1) / d->chunk);
  }
  d->n_chunks = rc == DLRT_OK ? d->first[n] : 0;
  size_t nq = (size_t)(d->n_chunks ? d->n_chunks : 1);
  if (rc == DLRT_OK &&
      (!(d->param_of = malloc(nq * sizeof *d->param_of)) || !(d->written = calloc(nq, 1)) ||
       !(d->slot_of = malloc(nq * sizeof *d->slot_of)) || !(d->used = calloc(nq, sizeof *d->used))))
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  for (int i = 0; i < n && rc == DLRT_OK; i++)
    for (int q = d->first[i]; q < d->first[i + 1]; q++) d->param_of[q] = i, d->slot_of[q] = -1;
  d->round = 1; /* chunks never handed out are not this round's */
  size_t slot_floats = (size_t)d->chunk * (size_t)most_states;
  for (int k = 0; k < n_slots && rc == DLRT_OK; k++) {
    d->s[k].owner = -1;
    if (!(d->s[k].buf = malloc(slot_floats * sizeof(float))))
      rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory: %d slots of %.1f MiB for the "
                           "optimizer state on disk", n_slots,
                           (double)(slot_floats * sizeof(float)) / 1048576.0);
  }
  /* Every state's place in the file reserved now: a folder too small fails here. */
  if (rc == DLRT_OK) rc = dlrt__disk_open(&d->disk);
  for (int i = 0; i < n && rc == DLRT_OK; i++)
    if (numel[i])
      rc = dlrt__disk_reserve(&d->disk, (size_t)numel[i] * 4 * (size_t)d->n_state[i],
                              &d->offset[i]);
  if (rc == DLRT_OK && pthread_create(&d->thread, NULL, io_main, d) != 0)
    rc = dlrt__set_error(DLRT_ERR_OOM, "cannot start the optimizer state's disk thread");
  if (rc == DLRT_OK) d->started = 1;
  if (rc < 0) {
    dlrt__pdisk_destroy(d);
    return rc;
  }
  d->st.disk_bytes = (uint64_t)d->disk.end;
  d->st.slot_bytes = (uint64_t)slot_floats * sizeof(float) * (uint64_t)n_slots;
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
  free(d->numel), free(d->n_state), free(d->offset), free(d->first), free(d->param_of);
  free(d->written), free(d->slot_of), free(d->used);
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
