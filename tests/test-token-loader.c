/*
 * test-token-loader.c — token streams as data sets of windows
 * (dlrt_dataset_from_tokens) through the loader (dlrt_loader_*): each
 * row's inputs are the stream at its window's offset and its labels the
 * same shifted by one; training offsets lie in [0, n - T - 1], spread
 * evenly, and depend on (seed, epoch, index) alone (the same batches with
 * 0, 1 or 3 workers, prefetch 0 or 2, host-only; other seeds or epochs give
 * others); evaluation windows are the consecutive ones, the same on every
 * pass, the last batch padded; rank / world shards are disjoint and cover
 * the pass; the device buffers hold the pinned batch; a stream shorter
 * than T + 1 tokens, a token past the vocabulary, 16-bit inputs and image
 * augmentation are refused with messages; a text file and an llm.c token
 * file go through end to end. Runs on every device (tap_for_each_device).
 * Points: computed at run time (done_testing).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "tap.h"

enum {
  N = 5000,      /* tokens of the mixed stream */
  T = 16,        /* context */
  WINDOWS = (N - 1) / T, /* 312: those of one pass */
  BATCH = 8,
  VOCAB = 65536,
  PRIME = 65521, /* token i = (i x 40503 + 12345) mod PRIME: a different token at each
                    position, well mixed, so a window tells its offset */
};

static char root[4096];
static uint16_t stream[N];
static int32_t position_of[VOCAB]; /* of each token in `stream`, or -1 */

static void make_stream(dlrt_tokens *t) {
  memset(t, 0, sizeof *t);
  for (int i = 0; i < VOCAB; i++) position_of[i] = -1;
  for (int i = 0; i < N; i++) {
    stream[i] = (uint16_t)(((uint32_t)i * 40503u + 12345u) % PRIME);
    position_of[stream[i]] = i;
  }
  t->tokens = stream;
  t->count = N;
  t->vocab = VOCAB;
  t->files = 1;
  snprintf(t->source, sizeof t->source, "mixed");
}

/* The offset row `inputs` (T tokens) and `labels` were cut from: the one
 * its first token names, when the row is the stream there and the labels
 * the stream one further; else -1. */
static int64_t row_offset(const int32_t *inputs, const int32_t *labels) {
  if (inputs[0] < 0 || inputs[0] >= VOCAB) return -1;
  int64_t o = position_of[inputs[0]];
  if (o < 0 || o + T >= N) return -1;
  for (int t = 0; t < T; t++)
    if (inputs[t] != stream[o + t] || labels[t] != stream[o + t + 1]) return -1;
  return o;
}

/* One epoch of a loader made from `c`: every row's offset into off (rows of
 * all batches in order, padding included; -1 for a row that is not a
 * window), *rows of them; with `check_device`, that the device buffers hold
 * each pinned batch, into *device_ok. Returns the number of batches, or -1
 * (with a failed point) when the loader fails. */
static int run_epoch(dlrt_device_t *dev, const dlrt_dataset *d, const dlrt_loader_config *c,
                     int epoch, int64_t *off, int64_t cap, int64_t *rows, int *device_ok,
                     const char *what) {
  dlrt_loader_t *l;
  if (dlrt_loader_create(dev, d, c, &l) < 0) {
    ok(0, "%s: a loader: %s", what, dlrt_last_error());
    return -1;
  }
  dlrt_stream_t *s = dlrt_device_default_stream(dev);
  size_t bytes = (size_t)c->batch * T * sizeof(int32_t);
  int32_t *back_in = malloc(bytes), *back_labels = malloc(bytes);
  if (!back_in || !back_labels) bail_out("out of memory");
  int rc = dlrt_loader_start(l, epoch), batches = 0, bad = 0;
  *rows = 0;
  if (device_ok) *device_ok = 1;
  dlrt_batch b;
  while (rc >= 0 && !bad && (rc = dlrt_loader_next(l, &b)) == 1) {
    bad = b.image_type != DLRT_I32 || !b.host_tokens || b.host_images;
    for (int64_t r = 0; !bad && r < c->batch && *rows < cap; r++)
      off[(*rows)++] = row_offset(b.host_tokens + r * T, b.host_labels + r * T);
    if (device_ok && !bad &&
        (dlrt_stream_wait_event(s, b.ready) < 0 ||
         dlrt_copy_d2h(back_in, b.images, 0, bytes, s) < 0 ||
         dlrt_copy_d2h(back_labels, b.labels, 0, bytes, s) < 0 ||
         dlrt_stream_synchronize(s) < 0 || memcmp(back_in, b.host_tokens, bytes) != 0 ||
         memcmp(back_labels, b.host_labels, bytes) != 0))
      *device_ok = 0;
    batches++;
    int released = dlrt_loader_release(l, &b, device_ok ? s : NULL);
    if (released < 0) rc = released;
  }
  free(back_in);
  free(back_labels);
  dlrt_loader_destroy(l);
  if (rc < 0 || bad)
    ok(0, "%s: the epoch ran: %s", what,
       bad ? "a batch not of i32 tokens (image_type, host_tokens)" : dlrt_last_error());
  return rc < 0 || bad ? -1 : batches;
}

/* A hash of every batch of an epoch: the inputs, the labels and counts. */
static uint64_t epoch_hash(dlrt_device_t *dev, const dlrt_dataset *d,
                           const dlrt_loader_config *c, int epoch) {
  dlrt_loader_t *l;
  if (dlrt_loader_create(dev, d, c, &l) < 0) return 0;
  uint64_t h = 1469598103934665603ull;
  size_t bytes = (size_t)c->batch * T * sizeof(int32_t);
  int rc = dlrt_loader_start(l, epoch);
  dlrt_batch b;
  while (rc >= 0 && (rc = dlrt_loader_next(l, &b)) == 1) {
    const unsigned char *p = (const unsigned char *)b.host_tokens;
    for (size_t i = 0; i < bytes; i++) h = (h ^ p[i]) * 1099511628211ull;
    p = (const unsigned char *)b.host_labels;
    for (size_t i = 0; i < bytes; i++) h = (h ^ p[i]) * 1099511628211ull;
    h = (h ^ (uint64_t)b.count) * 1099511628211ull;
    rc = dlrt_loader_release(l, &b, NULL);
  }
  dlrt_loader_destroy(l);
  return rc < 0 ? 0 : h;
}

static void test_dataset(void) {
  dlrt_tokens t;
  make_stream(&t);
  dlrt_dataset d;
  tap_check(dlrt_dataset_from_tokens(&t, T, &d), "a stream of %d tokens as windows of %d", N, T);
  ok(d.count == WINDOWS && d.channels == 1 && d.height == 1 && d.width == T &&
         d.classes == VOCAB && d.image_dtype == DLRT_I32 && d.tokens == stream &&
         d.token_count == N && !d.images && !d.labels && !strcmp(d.source, "mixed"),
     "%lld windows (floor((n - 1) / T)) of 1 x 1 x %lld i32, %d classes, the stream "
     "borrowed, no images", (long long)d.count, (long long)d.width, d.classes);
  dlrt_dataset_free(&d);
  ok(!d.tokens && !d.count && stream[0] == 12345, "free clears the struct, the stream stays");

  /* Exactly T + 1 tokens: one window; T: none, refused. */
  t.count = T + 1;
  if (tap_check(dlrt_dataset_from_tokens(&t, T, &d), "%d tokens, context %d", T + 1, T))
    is_int(d.count, 1, "one window");
  t.count = T;
  is_status(dlrt_dataset_from_tokens(&t, T, &d), DLRT_ERR_INVALID_ARG,
            "%d tokens at context %d are refused", T, T);
  ok(strstr(dlrt_last_error(), "mixed: 16 tokens") && strstr(dlrt_last_error(), "needs 17"),
     "the message says how many tokens there are and what the context needs: %s",
     dlrt_last_error());
  ok(d.count == 0 && !d.tokens, "nothing is handed out");
  t.count = N;
  is_status(dlrt_dataset_from_tokens(&t, 0, &d), DLRT_ERR_INVALID_ARG, "context 0 is refused");

  /* A token at or past the vocabulary, found with its position. */
  t.vocab = 60000;
  int64_t first_past = -1;
  for (int i = 0; i < N && first_past < 0; i++)
    if (stream[i] >= 60000) first_past = i;
  char want[64];
  snprintf(want, sizeof want, "at position %lld", (long long)first_past);
  is_status(dlrt_dataset_from_tokens(&t, T, &d), DLRT_ERR_INVALID_ARG,
            "a token past the vocabulary is refused");
  ok(strstr(dlrt_last_error(), want) && strstr(dlrt_last_error(), "vocabulary of 60000"),
     "the message names the first one's position (%s): %s", want, dlrt_last_error());

  /* Record files hold images: token windows are refused. */
  t.vocab = VOCAB;
  tap_check(dlrt_dataset_from_tokens(&t, T, &d), "windows again");
  is_status(dlrt_dataset_save_records(tap_join(root, "w.dlrec"), &d), DLRT_ERR_INVALID_ARG,
            "saving windows as a record file is refused");
  ok(strstr(dlrt_last_error(), "dlrt_tokens_save") != NULL, "pointing at dlrt_tokens_save: %s",
     dlrt_last_error());
  dlrt_dataset_free(&d);
}

/* Training: random windows, each the stream at its offset, spread over
 * [0, n - T - 1]; the same for any workers and prefetch; another seed or
 * epoch draws others, the same (seed, epoch) the same again. */
static void test_training(dlrt_device_t *dev, const char *name) {
  dlrt_tokens t;
  make_stream(&t);
  dlrt_dataset d;
  if (!tap_check(dlrt_dataset_from_tokens(&t, T, &d), "%s: windows", name)) return;
  dlrt_loader_config c = {.batch = BATCH, .world = 1, .seed = 7, .shuffle = 1, .workers = 2,
                          .prefetch = 2};
  enum { EPOCHS = 10, PASS = WINDOWS / BATCH * BATCH };
  static int64_t off[EPOCHS][WINDOWS];
  int64_t rows = 0;
  int device_ok = 0, all_windows = 1, in_range = 1, batches_ok = 1;
  for (int e = 0; e < EPOCHS; e++) {
    int k = run_epoch(dev, &d, &c, e, off[e], WINDOWS, &rows, e == 0 ? &device_ok : NULL, name);
    batches_ok &= k == WINDOWS / BATCH && rows == PASS;
    for (int64_t i = 0; i < rows; i++) {
      all_windows &= off[e][i] >= 0;
      in_range &= off[e][i] >= 0 && off[e][i] <= N - T - 1;
    }
  }
  ok(batches_ok, "%s: %d batches of %d windows per epoch (the last partial one dropped)", name,
     WINDOWS / BATCH, BATCH);
  ok(all_windows, "%s: every row's inputs are the stream at an offset and its labels the same "
     "shifted by one", name);
  ok(in_range, "%s: every offset lies in [0, n - T - 1] = [0, %d]", name, N - T - 1);
  ok(device_ok, "%s: the device's inputs and labels equal the pinned batch", name);
  /* Spread: 10 bins of [0, n - T - 1], 3120 draws, 312 expected in each. */
  int bins[10] = {0}, lo = PASS, hi = 0;
  for (int e = 0; e < EPOCHS; e++)
    for (int i = 0; i < PASS; i++)
      if (off[e][i] >= 0) bins[off[e][i] * 10 / (N - T)]++;
  for (int i = 0; i < 10; i++) lo = bins[i] < lo ? bins[i] : lo, hi = bins[i] > hi ? bins[i] : hi;
  ok(lo > 312 - 90 && hi < 312 + 90, "%s: offsets spread evenly: 10 bins of %d draws hold %d "
     "to %d (312 +- 90, 5 sigma)", name, EPOCHS * PASS, lo, hi);
  int differ = 0;
  for (int i = 0; i < PASS; i++) differ += off[0][i] != off[1][i];
  ok(differ > PASS * 9 / 10, "%s: epochs 0 and 1 draw other offsets (%d of %d differ)", name,
     differ, PASS);

  /* The same (seed, epoch) again, from any workers and prefetch: the same batches. */
  uint64_t first = 0;
  const int configs[][2] = {{0, 0}, {0, 2}, {1, 0}, {1, 2}, {3, 0}, {3, 2}};
  for (size_t i = 0; i < sizeof configs / sizeof *configs; i++) {
    dlrt_loader_config w = c;
    w.workers = configs[i][0];
    w.prefetch = configs[i][1];
    uint64_t h = epoch_hash(dev, &d, &w, 3);
    if (i == 0) {
      first = h;
      ok(h != 0, "%s: an epoch with no workers, prefetch 0", name);
    } else {
      ok(h == first, "%s: %d workers, prefetch %d: the same batches as 0 workers, prefetch 0",
         name, w.workers, w.prefetch);
    }
  }
  dlrt_loader_config host = c;
  host.host_only = 1;
  ok(epoch_hash(dev, &d, &host, 3) == first, "%s: host only: the same batches", name);
  int64_t again[WINDOWS];
  run_epoch(dev, &d, &c, 0, again, WINDOWS, &rows, NULL, name);
  ok(rows == PASS && !memcmp(again, off[0], sizeof again[0] * PASS),
     "%s: epoch 0 again: the same offsets", name);
  dlrt_loader_config other = c;
  other.seed = 8;
  run_epoch(dev, &d, &other, 0, again, WINDOWS, &rows, NULL, name);
  differ = 0;
  for (int i = 0; i < PASS; i++) differ += again[i] != off[0][i];
  ok(differ > PASS * 9 / 10, "%s: seed 8 draws other offsets than seed 7 (%d of %d differ)",
     name, differ, PASS);

  /* A 16-bit input type would make token ids floats; crop, flip, erasing
   * and normalisation are for images: refused. I32 (or 0) is the type. */
  dlrt_loader_t *l = NULL;
  dlrt_loader_config bad = c;
  bad.image_type = DLRT_BF16;
  int rc = dlrt_loader_create(dev, &d, &bad, &l);
  is_status(rc, DLRT_ERR_INVALID_ARG, "%s: bf16 inputs of token windows are refused: %s", name,
            dlrt_last_error());
  bad = c;
  bad.aug.flip = 1;
  rc = dlrt_loader_create(dev, &d, &bad, &l);
  is_status(rc, DLRT_ERR_INVALID_ARG, "%s: flipping token windows is refused: %s", name,
            dlrt_last_error());

  /* The device holds, per prefetch slot, a batch of inputs and one of
   * labels, batch x T i32 each (what a planner counts for the loader). */
  bad = c;
  bad.image_type = DLRT_I32;
  dlrt_mem_stats before, after;
  dlrt_mem_stats_get(dev, &before);
  if (tap_check(dlrt_loader_create(dev, &d, &bad, &l), "%s: image_type DLRT_I32 is taken",
                name)) {
    dlrt_mem_stats_get(dev, &after);
    is_u64(after.requested.current - before.requested.current,
           2 * 2 * BATCH * T * sizeof(int32_t),
           "%s: prefetch 2: the device holds 2 x (inputs + labels) of %d x %d i32", name, BATCH,
           T);
    dlrt_loader_destroy(l);
  }

  /* Training draws offsets at random: an epoch may hold more windows than
   * one pass (dltrain's rounds of --eval-every steps do); an evaluation,
   * which reads the consecutive windows, may not. */
  dlrt_dataset many = d;
  many.count = 3 * d.count + 5;
  if (tap_check(dlrt_loader_create(dev, &many, &c, &l),
                "%s: a training loader of %lld windows, more than the pass's %lld", name,
                (long long)many.count, (long long)d.count)) {
    int64_t batches = dlrt_loader_batches(l);
    is_int((int)batches, (int)(many.count / BATCH), "%s: its epoch has %lld batches", name,
           (long long)(many.count / BATCH));
    dlrt_loader_destroy(l);
  }
  dlrt_loader_config in_order = c;
  in_order.shuffle = 0;
  rc = dlrt_loader_create(dev, &many, &in_order, &l);
  is_status(rc, DLRT_ERR_INVALID_ARG, "%s: an evaluation of more windows than there are is "
            "refused: %s", name, dlrt_last_error());
  dlrt_dataset_free(&d);
}

/* Evaluation: window i at i x T, in order, the same on every pass; the last
 * batch padded from the start; shards of ranks disjoint, covering the pass;
 * training shards take the indices r, r + world, ... of the world-1 draw. */
static void test_evaluation_and_shards(dlrt_device_t *dev, const char *name) {
  dlrt_tokens t;
  make_stream(&t);
  dlrt_dataset d;
  if (!tap_check(dlrt_dataset_from_tokens(&t, T, &d), "%s: windows", name)) return;
  dlrt_loader_config c = {.batch = 10, .world = 1, .seed = 7, .pad_last = 1, .workers = 3,
                          .prefetch = 2};
  int64_t off[2][320], rows = 0;
  int device_ok = 0, k = run_epoch(dev, &d, &c, 0, off[0], 320, &rows, &device_ok, name);
  is_int(k, 32, "%s: evaluation: %d windows in 32 batches of 10, the last padded", name,
         WINDOWS);
  int consecutive = rows == 320;
  for (int i = 0; consecutive && i < 320; i++)
    consecutive = off[0][i] == (int64_t)(i < WINDOWS ? i : i - WINDOWS) * T;
  ok(consecutive, "%s: row i holds window i at offset i x T; the padding repeats windows 0 "
     "to 7", name);
  ok(device_ok, "%s: evaluation: the device holds the pinned batches", name);
  run_epoch(dev, &d, &c, 5, off[1], 320, &rows, NULL, name);
  ok(rows == 320 && !memcmp(off[0], off[1], sizeof off[0]),
     "%s: a second pass (another epoch) gives the same windows", name);

  /* Three ranks, in order (evaluation-like), no padding: 104 windows each. */
  int owner[WINDOWS], disjoint = 1, covered = 0;
  for (int i = 0; i < WINDOWS; i++) owner[i] = -1;
  for (int r = 0; r < 3; r++) {
    dlrt_loader_config s = {.batch = BATCH, .world = 3, .rank = r, .workers = 2, .prefetch = 2};
    int64_t got[WINDOWS];
    run_epoch(dev, &d, &s, 0, got, WINDOWS, &rows, NULL, name);
    for (int64_t i = 0; i < rows; i++) {
      int64_t w = got[i] >= 0 && got[i] % T == 0 ? got[i] / T : -1;
      if (w < 0 || w >= WINDOWS || (owner[w] != -1 && owner[w] != r)) disjoint = 0;
      else if (owner[w] == -1) owner[w] = r, covered++;
    }
  }
  ok(disjoint, "%s: the windows of ranks 0, 1 and 2 of 3 are disjoint", name);
  is_int(covered, WINDOWS, "%s: together they cover the pass's %d windows", name, WINDOWS);

  /* Training shards: rank r's j-th row is index j x 3 + r of one loader. */
  dlrt_loader_config one = {.batch = BATCH, .world = 1, .seed = 9, .shuffle = 1, .workers = 1};
  int64_t all[WINDOWS], all_rows = 0;
  run_epoch(dev, &d, &one, 2, all, WINDOWS, &all_rows, NULL, name);
  int same = all_rows == WINDOWS;
  for (int r = 0; r < 3 && same; r++) {
    dlrt_loader_config s = one;
    s.world = 3;
    s.rank = r;
    int64_t got[WINDOWS];
    run_epoch(dev, &d, &s, 2, got, WINDOWS, &rows, NULL, name);
    same = rows == WINDOWS / 3;
    for (int64_t j = 0; same && j < rows; j++) same = got[j] == all[j * 3 + r];
  }
  ok(same, "%s: shuffled shards: rank r of 3 draws the world-1 offsets of indices r, r + 3, "
     "... (disjoint, covering)", name);
  dlrt_dataset_free(&d);
}

/* A token past the vocabulary of a data set changed by hand stops the run,
 * naming its position; nothing hangs. */
static void test_bad_token(dlrt_device_t *dev, const char *name) {
  dlrt_tokens t;
  make_stream(&t);
  dlrt_dataset d;
  if (!tap_check(dlrt_dataset_from_tokens(&t, T, &d), "%s: windows", name)) return;
  /* By hand, behind dlrt_dataset_from_tokens's back: one token past the
   * vocabulary, in window 2 (offsets 32 to 48). */
  d.classes = PRIME;
  stream[37] = PRIME + 3;
  for (int workers = 0; workers <= 3; workers += 3) {
    dlrt_loader_config c = {.batch = BATCH, .world = 1, .workers = workers, .prefetch = 2};
    dlrt_loader_t *l;
    if (!tap_check(dlrt_loader_create(dev, &d, &c, &l), "%s: %d workers", name, workers))
      continue;
    dlrt_loader_start(l, 0);
    dlrt_batch b;
    int rc;
    while ((rc = dlrt_loader_next(l, &b)) == 1) dlrt_loader_release(l, &b, NULL);
    is_status(rc, DLRT_ERR_INVALID_ARG, "%s, %d workers: a token past the vocabulary stops "
              "the epoch", name, workers);
    ok(strstr(dlrt_last_error(), "token 65524 at position 37 of mixed") != NULL,
       "%s, %d workers: the message names its position: %s", name, workers, dlrt_last_error());
    dlrt_loader_destroy(l);
  }
  dlrt_dataset_free(&d);
}

/* First offset at which `row` (T tokens) and then `next` (the T after
 * one) occur in text, or -1. */
static int64_t find_in_text(const unsigned char *text, int64_t n, const int32_t *row,
                            const int32_t *next) {
  for (int64_t o = 0; o + T < n; o++) {
    int t = 0;
    while (t < T && row[t] == text[o + t] && next[t] == text[o + t + 1]) t++;
    if (t == T) return o;
  }
  return -1;
}

/* A text file, end to end: dlrt_tokens_load -> the validation split ->
 * windows -> the loader: evaluation windows are the split's bytes in order;
 * training rows are bytes of the training split with the next ones as
 * labels. */
static void test_text_file(dlrt_device_t *dev, const char *name) {
  enum { BYTES = 6000 };
  unsigned char text[BYTES];
  for (int i = 0; i < BYTES; i++) text[i] = (unsigned char)(32 + pattern_byte((size_t)i, 3) % 95);
  const char *path = tap_join(root, "text.txt");
  tap_write_file(path, text, BYTES);
  dlrt_tokens all, split[2];
  if (!tap_check(dlrt_tokens_load(path, &all), "%s: the text file loads", name)) return;
  tap_check(dlrt_tokens_split(&all, 0, &split[0]), "%s: its training split", name);
  tap_check(dlrt_tokens_split(&all, 1, &split[1]), "%s: its validation split", name);
  dlrt_dataset d[2];
  tap_check(dlrt_dataset_from_tokens(&split[0], T, &d[0]), "%s: training windows", name);
  tap_check(dlrt_dataset_from_tokens(&split[1], T, &d[1]), "%s: validation windows", name);
  ok(d[1].count == (BYTES / 10 - 1) / T && d[1].classes == 256,
     "%s: the last tenth (%d bytes) holds %lld windows of %d, vocabulary 256", name,
     BYTES / 10, (long long)d[1].count, T);
  tap_check(dlrt_dataset_check_splits(&d[0], &d[1]), "%s: the splits fit one model", name);
  dlrt_dataset other;
  if (tap_check(dlrt_dataset_from_tokens(&split[1], T / 2, &other), "%s: windows of %d", name,
                T / 2)) {
    is_status(dlrt_dataset_check_splits(&d[0], &other), DLRT_ERR_INVALID_ARG,
              "%s: windows of another context are refused", name);
    ok(strstr(dlrt_last_error(), "context") && strstr(dlrt_last_error(), "windows") &&
           !strstr(dlrt_last_error(), "width"),
       "%s: ... in the words of windows: %s", name, dlrt_last_error());
    dlrt_dataset_free(&other);
  }

  const unsigned char *val = text + BYTES - BYTES / 10;
  dlrt_loader_config eval = {.batch = 4, .world = 1, .pad_last = 1, .workers = 2};
  dlrt_loader_t *l;
  int in_order = 1, trained = 1;
  int64_t windows = 0;
  if (tap_check(dlrt_loader_create(dev, &d[1], &eval, &l), "%s: an evaluation loader", name)) {
    dlrt_loader_start(l, 0);
    dlrt_batch b;
    while (dlrt_loader_next(l, &b) == 1) {
      for (int64_t r = 0; r < b.count; r++, windows++)
        for (int t = 0; t < T; t++)
          in_order &= b.host_tokens[r * T + t] == val[windows * T + t] &&
                      b.host_labels[r * T + t] == val[windows * T + t + 1];
      dlrt_loader_release(l, &b, NULL);
    }
    dlrt_loader_destroy(l);
  }
  ok(in_order && windows == d[1].count, "%s: validation window i is the split's bytes i x T .. "
     "and its labels the byte after each (%lld windows)", name, (long long)windows);

  dlrt_loader_config train = {.batch = 4, .world = 1, .seed = 3, .shuffle = 1, .workers = 2,
                              .prefetch = 1};
  if (tap_check(dlrt_loader_create(dev, &d[0], &train, &l), "%s: a training loader", name)) {
    dlrt_loader_start(l, 0);
    dlrt_batch b;
    for (int k = 0; k < 5 && dlrt_loader_next(l, &b) == 1; k++) {
      for (int r = 0; r < 4; r++) {
        int64_t o = find_in_text(text, BYTES - BYTES / 10, b.host_tokens + r * T,
                                 b.host_labels + r * T);
        trained &= o >= 0 && o <= BYTES - BYTES / 10 - T - 1;
      }
      dlrt_loader_release(l, &b, NULL);
    }
    dlrt_loader_destroy(l);
  }
  ok(trained, "%s: 20 training rows are bytes of the training split, labels the next ones",
     name);
  for (int s = 0; s < 2; s++) dlrt_dataset_free(&d[s]), dlrt_tokens_free(&split[s]);
  dlrt_tokens_free(&all);
}

/* An llm.c token file, end to end: saved, loaded back, windows, loader. */
static void test_token_file(dlrt_device_t *dev, const char *name) {
  dlrt_tokens t, back;
  make_stream(&t);
  const char *path = tap_join(root, "stream.bin");
  if (!tap_check(dlrt_tokens_save(path, &t), "%s: the stream saved as an llm.c file", name))
    return;
  if (!tap_check(dlrt_tokens_load(path, &back), "%s: and loaded back", name)) return;
  int top = 0;
  for (int i = 0; i < N; i++) top = stream[i] > top ? stream[i] : top;
  ok(back.count == N && back.vocab == top + 1 && !memcmp(back.tokens, stream, sizeof stream),
     "%s: %lld tokens, the same, vocabulary %d (the largest + 1)", name,
     (long long)back.count, back.vocab);
  dlrt_dataset d;
  if (tap_check(dlrt_dataset_from_tokens(&back, T, &d), "%s: its windows", name)) {
    int64_t off[WINDOWS], rows = 0;
    dlrt_loader_config eval = {.batch = BATCH, .world = 1, .workers = 1, .prefetch = 2};
    int device_ok = 0, consecutive = 1;
    run_epoch(dev, &d, &eval, 0, off, WINDOWS, &rows, &device_ok, name);
    for (int64_t i = 0; i < rows; i++) consecutive &= off[i] == i * T;
    ok(rows == WINDOWS / BATCH * BATCH && consecutive && device_ok,
       "%s: the file's windows in order, on the device too (%lld rows)", name, (long long)rows);
    dlrt_loader_config train = {.batch = BATCH, .world = 1, .seed = 1, .shuffle = 1,
                                .workers = 3, .prefetch = 2};
    run_epoch(dev, &d, &train, 1, off, WINDOWS, &rows, NULL, name);
    int found = rows == WINDOWS / BATCH * BATCH;
    for (int64_t i = 0; i < rows; i++) found &= off[i] >= 0 && off[i] <= N - T - 1;
    ok(found, "%s: the file's training rows are its stream at offsets in range", name);
    dlrt_dataset_free(&d);
  }
  dlrt_tokens_free(&back);
}

static void run_device(dlrt_device_t *dev, const char *spec, void *ctx) {
  (void)ctx;
  test_training(dev, spec);
  test_evaluation_and_shards(dev, spec);
  test_bad_token(dev, spec);
  test_text_file(dev, spec);
  test_token_file(dev, spec);
}

int main(void) {
  tap_tempdir("dlrt-token-loader", root, sizeof root);
  if (dlrt_init() < 0) bail_out("dlrt_init: %s", dlrt_last_error());
  test_dataset();
  tap_for_each_device(run_device, NULL);
  dlrt_shutdown();
  tap_remove_tree(root);
  return done_testing();
}
