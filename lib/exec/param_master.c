/* param_master.c — fp32 masters on disk fetched ahead of need (parameter
 * streaming under --host-limit, param_stream_internal.h).
 *
 * A master on disk is the last part of its parameter's place in the spill
 * file (param_disk.c), updated chunk by chunk in the slots. A node that
 * reads the master itself in fp32 (every node of an fp32 run; layer norms
 * and a tied head under mixed precision) needs it on the device: its
 * fetch. Here those fetches are planned at each run's start, in the order
 * the run will make them (the same rule as param_stream.c's fetches and
 * releases, replayed on the run's tables), and the master's part of each
 * chunk alone (a third of a chunk's bytes with Adam) is read by the disk's
 * I/O thread into a small staging area: DLRT__PDISK_STAGES buffers of a
 * chunk of one state, pinned (dlrt__host_alloc_staging: within
 * DLRT_PINNED_LIMIT) and counted in --host-limit beside the slots
 * (dlrt__param_disk_fit_masters), so that the h2d copies are truly
 * asynchronous and the updates' read-ahead keeps its four slots. The
 * reads run ahead as far as the stages allow: at the run's start, after
 * each fetch, and at each node (a stage whose copy has ended is read into
 * again); the fetch itself is `ahead` nodes before the use. At the fetch
 * the executor waits only for reads not done yet, queues each chunk's copy
 * on the copy stream and records an event after it: the kernel waits for
 * the fetch by its event as for any other, and a stage is read into again
 * only once its copy is done (an event query; a wait only when every stage
 * is still being copied from). (Reads started only one look-ahead before
 * their fetch left the executor waiting twice as long for them on
 * gpt2-medium, whose chosen look-ahead is one node.)
 *
 * Coherence: a run's plan is made after the last run's updates have all
 * been put back (stream_begin_run joins them), and within a run every
 * fetch of a parameter comes before its update (its update waits for its
 * last use). A part read takes the chunk from its slot where one holds it
 * (a write-back not done yet is newer than the file), else from the file;
 * writes of masters (initial values, a checkpoint's import) drop what is
 * staged (dlrt__pmaster_drop). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "exec/param_stream_internal.h"
#include "mem/buffer.h"
#include "util/clock.h"
#include "util/status.h"

typedef struct {
  float *buf;            /* pinned: a chunk of one state */
  dlrt_event_t *copied;  /* recorded after the last copy from buf */
  int copying;           /* a copy from buf is queued and not known to be done */
  uint64_t copy_seq;     /* when that copy was queued (oldest first when waiting) */
  int piece;             /* the plan's piece read into it (-1: none; -2: off the plan) */
  int issued;            /* its read is with the I/O thread or done (req) */
  dlrt__pdisk_part req;
} stage;

struct dlrt__pmaster {
  stage s[DLRT__PDISK_STAGES];
  /* The run's fetches of masters on disk, in order: fetch j is of
   * parameter param[j]; its chunks are the pieces first[j] .. first[j + 1]
   * - 1 (piece m: chunk m - first[j]). */
  int n_fetch, cap_fetch, *param, *first;
  int n_pieces, *entry_of; /* per piece: its fetch */
  int consumed;   /* fetches made */
  int next_piece; /* the next piece to read */
  uint64_t copies;
};

/* ---------------------------------------------------------------- stages */

static int stage_wait(dlrt__pstream *ps, stage *x) {
  if (!x->issued) return DLRT_OK;
  return dlrt__pdisk_part_wait(ps->disk, &x->req);
}

/* Stage x free for a read now: nothing read into it waits to be copied,
 * and its last copy is done (asked, not waited for). */
static int stage_free(stage *x) {
  if (x->piece != -1 || x->issued) return 0;
  if (x->copying && dlrt_event_query(x->copied) == 1) x->copying = 0;
  return !x->copying;
}

/* Starts reading chunk c of parameter i's master into stage x. */
static int stage_read(dlrt__pstream *ps, stage *x, int i, int c, int piece) {
  streamed *p = &ps->p[i];
  x->req = (dlrt__pdisk_part){.i = i, .c = c, .part = p->n_state, .dst = x->buf};
  int rc = dlrt__pdisk_part_start(ps->disk, &x->req);
  x->piece = rc == DLRT_OK ? piece : -1;
  x->issued = rc == DLRT_OK;
  return rc;
}

/* Stages holding pieces before `below` (every piece: INT32_MAX) are
 * emptied, their reads waited for. */
static int stages_drop(dlrt__pstream *ps, int below) {
  dlrt__pmaster *m = ps->master;
  int rc = DLRT_OK;
  for (int k = 0; k < DLRT__PDISK_STAGES; k++) {
    stage *x = &m->s[k];
    if (x->piece == -1 || x->piece >= below) continue;
    int rc2 = stage_wait(ps, x);
    if (rc == DLRT_OK) rc = rc2;
    x->piece = -1, x->issued = 0;
  }
  return rc;
}

/* A stage for a read that the fetch being made needs now: a free one, else
 * the one copied from longest ago once its copy is done, else (a fetch off
 * the plan) the one holding the last piece read ahead, that piece to be
 * read again later. */
static int stage_take(dlrt__pstream *ps, stage **out) {
  dlrt__pmaster *m = ps->master;
  stage *oldest = NULL, *last = NULL;
  for (int k = 0; k < DLRT__PDISK_STAGES; k++) {
    stage *x = &m->s[k];
    if (stage_free(x)) {
      *out = x;
      return DLRT_OK;
    }
    if (x->piece == -1 && !x->issued && (!oldest || x->copy_seq < oldest->copy_seq)) oldest = x;
    if (x->piece >= 0 && (!last || x->piece > last->piece)) last = x;
  }
  int rc = DLRT_OK;
  if (!oldest && !last) /* every stage is this fetch's: cannot happen, one chunk at a time */
    return dlrt__set_error(DLRT_ERR_STATE, "masters on disk: no staging buffer free");
  if (oldest) {
    rc = dlrt_event_synchronize(oldest->copied);
    oldest->copying = 0;
    *out = oldest;
  } else {
    rc = stage_wait(ps, last);
    m->next_piece = last->piece; /* read again when its turn comes */
    last->piece = -1, last->issued = 0;
    *out = last;
  }
  return rc;
}

/* ---------------------------------------------------------------- the plan */

static int plan_add(dlrt__pmaster *m, int i, int chunks) {
  if (m->n_fetch == m->cap_fetch) {
    int cap = m->cap_fetch ? 2 * m->cap_fetch : 64;
    int *param = realloc(m->param, sizeof(int) * (size_t)cap);
    if (param) m->param = param;
    int *first = realloc(m->first, sizeof(int) * ((size_t)cap + 1));
    if (first) m->first = first;
    if (!param || !first) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
    m->cap_fetch = cap;
  }
  m->param[m->n_fetch] = i;
  m->first[m->n_fetch + 1] = m->first[m->n_fetch] + chunks;
  m->n_fetch++;
  return DLRT_OK;
}

/* Reads started for the next pieces, in order, into the stages free. */
static int top_up(dlrt__pstream *ps) {
  dlrt__pmaster *m = ps->master;
  int rc = DLRT_OK;
  while (rc == DLRT_OK && m->next_piece < m->n_pieces) {
    int j = m->entry_of[m->next_piece];
    stage *x = NULL;
    for (int k = 0; k < DLRT__PDISK_STAGES && !x; k++)
      if (stage_free(&m->s[k])) x = &m->s[k];
    if (!x) break;
    rc = stage_read(ps, x, m->param[j], m->next_piece - m->first[j], m->next_piece);
    m->next_piece++;
  }
  return rc;
}

int dlrt__pmaster_plan(dlrt_exec_t *e) {
  dlrt__pstream *ps = e->pstream;
  dlrt__pmaster *m = ps->master;
  const tables *t = ps->now;
  if (!m || !t) return DLRT_OK;
  int rc = stages_drop(ps, INT32_MAX);
  m->n_fetch = m->n_pieces = m->consumed = m->next_piece = 0;
  if (rc < 0) return rc;
  if (!m->first && !(m->first = calloc(1, sizeof(int))))
    return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  m->first[0] = 0;
  /* param_stream.c's rule, replayed on this run's tables: at each position
   * the units of it and the next `ahead` not on the device are fetched
   * (none at a streamed update node), and after a use whose next one is
   * more than `ahead` away the copy goes. */
  char *on = calloc((size_t)ps->n_units + 1, 1);
  if (!on) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  for (int u = 0; u < ps->n_units; u++) on[u] = e->bufs[ps->u[u].id] != NULL;
  for (int k = 0; k < t->n && rc == DLRT_OK; k++) {
    const dlrt__node *n = e->g->nodes[t->order[k]];
    if (n->phase == DLRT__PHASE_UPDATE && ps->param_of[n->in[0]->owner->id] >= 0) continue;
    for (int a = k; a <= k + ps->ahead && a < t->n && rc == DLRT_OK; a++)
      for (int q = t->use_at[a]; q < t->use_at[a + 1] && rc == DLRT_OK; q++) {
        int u = t->use[q], i = ps->u[u].param;
        if (on[u]) continue;
        on[u] = 1;
        if (!ps->u[u].host && ps->p[i].master_on_disk)
          rc = plan_add(m, i, dlrt__pdisk_chunks(ps->disk, i));
      }
    for (int q = t->use_at[k]; q < t->use_at[k + 1]; q++)
      if (dlrt__pstream_next_use(t, t->use[q], k) > k + ps->ahead) on[t->use[q]] = 0;
  }
  free(on);
  if (rc < 0) return rc;
  m->n_pieces = m->first[m->n_fetch];
  int *entry_of = realloc(m->entry_of, sizeof(int) * (size_t)(m->n_pieces ? m->n_pieces : 1));
  if (!entry_of) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  m->entry_of = entry_of;
  for (int j = 0; j < m->n_fetch; j++)
    for (int q = m->first[j]; q < m->first[j + 1]; q++) entry_of[q] = j;
  /* The first reads, as many as the stages hold. */
  return top_up(ps);
}

int dlrt__pmaster_ahead(dlrt_exec_t *e) {
  /* Stages whose copies have ended since are read into again. */
  return e->pstream->master ? top_up(e->pstream) : DLRT_OK;
}

int dlrt__pmaster_drop(dlrt__pstream *ps) {
  dlrt__pmaster *m = ps->master;
  if (!m) return DLRT_OK;
  int rc = stages_drop(ps, INT32_MAX);
  /* What the plan reads from here on is read again. */
  m->next_piece = m->consumed < m->n_fetch ? m->first[m->consumed] : m->n_pieces;
  return rc;
}

/* ---------------------------------------------------------------- fetch */

int dlrt__pmaster_fetch(dlrt__pstream *ps, int i, dlrt_buffer_t *dst) {
  dlrt__pmaster *m = ps->master;
  int rc = dlrt__pstream_flush_init(ps);
  if (rc < 0) return rc;
  /* Its place in the plan: the next fetch, or a later one (those between
   * were not made: their reads go); off the plan, read now. */
  int j = m->consumed;
  while (j < m->n_fetch && m->param[j] != i) j++;
  int planned = j < m->n_fetch;
  if (planned && j > m->consumed) {
    if ((rc = stages_drop(ps, m->first[j])) < 0) return rc;
    if (m->next_piece < m->first[j]) m->next_piece = m->first[j];
  }
  int chunks = dlrt__pdisk_chunks(ps->disk, i);
  int64_t chunk = dlrt__pdisk_chunk(ps->disk);
  for (int c = 0; c < chunks && rc == DLRT_OK; c++) {
    int piece = planned ? m->first[j] + c : -2;
    stage *x = NULL;
    for (int k = 0; k < DLRT__PDISK_STAGES && planned && !x; k++)
      if (m->s[k].piece == piece) x = &m->s[k];
    if (!x) {
      /* Not read ahead (no stage was free in time): read now. */
      if ((rc = stage_take(ps, &x)) < 0) break;
      if (planned && m->next_piece == piece) m->next_piece++;
      if ((rc = stage_read(ps, x, i, c, piece)) < 0) break;
    }
    double t0 = dlrt__now_ms();
    rc = stage_wait(ps, x);
    ps->st.disk_fetch_wait_ms += dlrt__now_ms() - t0;
    x->piece = -1, x->issued = 0;
    if (rc == DLRT_OK)
      rc = dlrt_copy_h2d(dst, (size_t)c * (size_t)chunk * 4, x->buf, (size_t)x->req.count * 4,
                         ps->copy);
    /* The stage is read again only after this copy: by its event. */
    if (rc == DLRT_OK && (rc = dlrt_event_record(x->copied, ps->copy)) == DLRT_OK)
      x->copying = 1, x->copy_seq = ++m->copies;
    if (rc == DLRT_OK && planned && c + 1 == chunks) m->consumed = j + 1;
    if (rc == DLRT_OK) rc = top_up(ps);
  }
  return rc;
}

/* ---------------------------------------------------------------- setup */

int dlrt__pmaster_create(dlrt_exec_t *e) {
  dlrt__pstream *ps = e->pstream;
  dlrt__pmaster *m = calloc(1, sizeof *m);
  if (!m) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  ps->master = m;
  size_t bytes = (size_t)dlrt__pdisk_chunk(ps->disk) * sizeof(float);
  int rc = DLRT_OK;
  for (int k = 0; k < DLRT__PDISK_STAGES && rc == DLRT_OK; k++) {
    m->s[k].piece = -1;
    rc = dlrt__host_alloc_staging(e->dev, bytes ? bytes : 4, (void **)&m->s[k].buf);
    if (rc == DLRT_OK) rc = dlrt_event_create(e->dev, &m->s[k].copied);
  }
  return rc;
}

void dlrt__pmaster_destroy(dlrt__pstream *ps) {
  dlrt__pmaster *m = ps->master;
  if (!m) return;
  stages_drop(ps, INT32_MAX);
  for (int k = 0; k < DLRT__PDISK_STAGES; k++) {
    if (m->s[k].copying) dlrt_event_synchronize(m->s[k].copied);
    dlrt_host_free(m->s[k].buf);
    dlrt_event_destroy(m->s[k].copied);
  }
  free(m->param), free(m->first), free(m->entry_of);
  free(m);
  ps->master = NULL;
}
