/*
 * test-loader.c — record files (dlrt_dataset_save_records / _open_records,
 * read and mapped) and the data pipeline (dlrt_loader_*): order, shuffling,
 * sharding, padding, augmentation, the same batches for any number of
 * workers and any prefetch depth, the device copy, 16-bit images for
 * mixed precision (the f32 ones rounded), and errors that stop a
 * run cleanly (corrupt files, bad labels found by a worker, misuse).
 * Runs on every device present (tap_for_each_device).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlrt.h"
#include "tap.h"

static char root[256];

static const char *tmp_path(const char *name) {
  static char path[4][512];
  static int turn;
  char *p = path[turn++ % 4];
  snprintf(p, sizeof path[0], "%s/%s", root, name);
  return p;
}

/* count samples of C x H x W u8 whose first two pixels spell the sample's
 * index (low byte, high byte) and whose other pixels are a pattern of it;
 * labels index % classes. */
static void make_indexed(dlrt_dataset *d, int64_t count, int64_t c, int64_t h, int64_t w,
                         int classes) {
  memset(d, 0, sizeof *d);
  int64_t px = c * h * w;
  d->count = count, d->channels = c, d->height = h, d->width = w, d->classes = classes;
  d->image_dtype = DLRT_U8;
  d->images = malloc((size_t)(count * px));
  d->labels = malloc((size_t)count * sizeof *d->labels);
  if (!d->images || !d->labels) bail_out("out of memory");
  for (int64_t i = 0; i < count; i++) {
    uint8_t *img = d->images + i * px;
    for (int64_t p = 0; p < px; p++) img[p] = (uint8_t)((i * 7 + p * 13) % 251);
    img[0] = (uint8_t)(i & 0xff);
    img[1] = (uint8_t)(i >> 8);
    d->labels[i] = (int32_t)(i % classes);
  }
  snprintf(d->source, sizeof d->source, "indexed");
}

/* The sample index a decoded (not augmented, not normalised) row holds. */
static int64_t row_index(const float *row) {
  return (int64_t)lroundf(row[0] * 255.0f) + 256 * (int64_t)lroundf(row[1] * 255.0f);
}

static size_t file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (size_t)st.st_size : 0;
}

static void *read_whole(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) bail_out("cannot read %s", path);
  *n = file_size(path);
  void *buf = malloc(*n ? *n : 1);
  if (!buf || fread(buf, 1, *n, f) != *n) bail_out("cannot read %s", path);
  fclose(f);
  return buf;
}

static void write_whole(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) bail_out("cannot write %s", path);
}

/* ---------------------------------------------------------------- records */

static void check_same_set(const dlrt_dataset *a, const dlrt_dataset *b, const char *what) {
  size_t px = (size_t)(a->channels * a->height * a->width) * dlrt_dtype_size(a->image_dtype);
  ok(a->count == b->count && a->channels == b->channels && a->height == b->height &&
         a->width == b->width && a->classes == b->classes && a->image_dtype == b->image_dtype,
     "%s: count %lld, shape %lld x %lld x %lld, %d classes, %s", what, (long long)b->count,
     (long long)b->channels, (long long)b->height, (long long)b->width, b->classes,
     dlrt_dtype_name(b->image_dtype));
  if (a->count == b->count) {
    is_mem(b->images, a->images, px * (size_t)a->count, "%s: the images", what);
    is_mem(b->labels, a->labels, (size_t)a->count * sizeof *a->labels, "%s: the labels", what);
  }
}

static void test_records_round_trip(void) {
  dlrt_dataset gen, back;
  tap_check(dlrt_dataset_generate(200, 10, 3, &gen), "generate 200 images");
  tap_check(dlrt_dataset_save_records(tmp_path("gen.dlrec"), &gen), "save them as records");
  is_size(file_size(tmp_path("gen.dlrec")), 64 + 200 * 784 + 200,
          "u8 images and u8 labels: 64 + 200 x 785 bytes");
  tap_check(dlrt_dataset_open_records(tmp_path("gen.dlrec"), 0, &back), "read them back");
  check_same_set(&gen, &back, "read");
  ok(back.mapping == NULL, "read: not mapped");
  dlrt_dataset_free(&back);
  tap_check(dlrt_dataset_open_records(tmp_path("gen.dlrec"), DLRT_DATASET_MMAP, &back),
            "map them");
  check_same_set(&gen, &back, "mapped");
  ok(back.mapping != NULL, "mapped: the images are a mapping");
  dlrt_dataset_free(&back);
  ok(back.images == NULL && back.labels == NULL, "free clears the struct");

  /* f32 images, 3 channels, 300 classes: labels need i32. */
  dlrt_dataset f = {.count = 7, .channels = 3, .height = 2, .width = 5, .classes = 300,
                    .image_dtype = DLRT_F32};
  float pixels[7 * 30];
  int32_t labels[7] = {0, 299, 17, 256, 1, 2, 298};
  for (int i = 0; i < 7 * 30; i++) pixels[i] = (float)i * 0.25f - 3.0f;
  f.images = (uint8_t *)pixels;
  f.labels = labels;
  tap_check(dlrt_dataset_save_records(tmp_path("f32.dlrec"), &f), "save f32 images, 300 classes");
  is_size(file_size(tmp_path("f32.dlrec")), 64 + 7 * 30 * 4 + 7 * 4,
          "f32 images and i32 labels: 64 + 7 x (120 + 4) bytes");
  tap_check(dlrt_dataset_open_records(tmp_path("f32.dlrec"), 0, &back), "read them back");
  check_same_set(&f, &back, "f32 / i32");
  dlrt_dataset_free(&back);

  /* A folder with train.dlrec and test.dlrec loads as a data set. */
  mkdir(tmp_path("set"), 0755);
  tap_check(dlrt_dataset_save_records(tmp_path("set/train.dlrec"), &gen), "save train.dlrec");
  tap_check(dlrt_dataset_save_records(tmp_path("set/test.dlrec"), &gen), "save test.dlrec");
  tap_check(dlrt_dataset_load(tmp_path("set"), 1, &back), "dlrt_dataset_load(folder, test)");
  ok(strstr(back.source, "test.dlrec") != NULL, "the test split comes from test.dlrec (%s)",
     back.source);
  dlrt_dataset_free(&back);
  /* A record file alone holds both splits: its last tenth is the test
   * split (test-dataset checks which records). */
  int64_t held = gen.count / 10 > 0 ? gen.count / 10 : 1;
  if (tap_check(dlrt_dataset_load(tmp_path("gen.dlrec"), 0, &back), "a record file as the set"))
    is_int(back.count, gen.count - held, "its training split: all but the last tenth");
  dlrt_dataset_free(&back);
  if (tap_check(dlrt_dataset_load(tmp_path("gen.dlrec"), 1, &back), "and its test split"))
    is_int(back.count, held, "the last tenth of its records");
  dlrt_dataset_free(&back);
  dlrt_dataset_free(&gen);
}

/* Writes the good file with `edit` applied and expects opening to fail with
 * DLRT_ERR_IO and a message containing `words`. */
static void expect_corrupt(const unsigned char *good, size_t n, size_t keep,
                           void (*edit)(unsigned char *), const char *words, const char *what) {
  unsigned char *copy = malloc(n + 1);
  memcpy(copy, good, n);
  copy[n] = 0;
  if (edit) edit(copy);
  write_whole(tmp_path("bad.dlrec"), copy, keep);
  free(copy);
  dlrt_dataset d;
  for (int flags = 0; flags <= DLRT_DATASET_MMAP; flags += DLRT_DATASET_MMAP) {
    is_status(dlrt_dataset_open_records(tmp_path("bad.dlrec"), flags, &d), DLRT_ERR_IO,
              "%s%s: refused", what, flags ? " (mapped)" : "");
    ok(strstr(dlrt_last_error(), words) && strstr(dlrt_last_error(), "bad.dlrec"),
       "%s: the message names the file and says '%s': %s", what, words, dlrt_last_error());
    ok(d.images == NULL && d.labels == NULL, "%s: nothing is handed out", what);
  }
}

static void bad_magic(unsigned char *p) { p[0] = 'X'; }
static void bad_dtype(unsigned char *p) { p[12] = 9; }
static void bad_label(unsigned char *p) { p[64 + 20 * 784 + 3] = 200; }
static void huge_count(unsigned char *p) { p[23] = 0x7f; }

static void test_records_corrupt(void) {
  dlrt_dataset gen;
  tap_check(dlrt_dataset_generate(20, 10, 5, &gen), "generate 20 images");
  tap_check(dlrt_dataset_save_records(tmp_path("good.dlrec"), &gen), "save them");
  size_t n;
  unsigned char *good = read_whole(tmp_path("good.dlrec"), &n);
  expect_corrupt(good, n, n, bad_magic, "not a dlrt record file", "wrong magic");
  expect_corrupt(good, n, n - 1, NULL, "truncated", "one byte short");
  expect_corrupt(good, n, n + 1, NULL, "extra bytes", "one byte extra");
  expect_corrupt(good, n, 40, NULL, "truncated", "cut inside the header");
  expect_corrupt(good, n, n, bad_dtype, "image dtype", "unknown image dtype");
  expect_corrupt(good, n, n, bad_label, "outside [0, 10)", "a label past the classes");
  expect_corrupt(good, n, n, huge_count, "truncated", "a count far beyond the file");
  free(good);

  dlrt_dataset d;
  is_status(dlrt_dataset_open_records(tmp_path("absent.dlrec"), 0, &d), DLRT_ERR_NOT_FOUND,
            "a missing file is DLRT_ERR_NOT_FOUND");

  /* A failed save leaves the old file as it was and no temporary behind. */
  int32_t label4 = gen.labels[4];
  gen.labels[4] = 10;
  is_status(dlrt_dataset_save_records(tmp_path("good.dlrec"), &gen), DLRT_ERR_INVALID_ARG,
            "saving a label outside the classes is refused");
  gen.labels[4] = label4;
  tap_check(dlrt_dataset_open_records(tmp_path("good.dlrec"), 0, &d),
            "the earlier file still opens");
  check_same_set(&gen, &d, "after the failed save");
  dlrt_dataset_free(&d);
  is_status(dlrt_dataset_save_records(tmp_path("no/such/folder/x.dlrec"), &gen), DLRT_ERR_IO,
            "saving into a missing folder fails");
  ok(strstr(dlrt_last_error(), "no/such/folder") != NULL, "the message names the path: %s",
     dlrt_last_error());
  dlrt_dataset_free(&gen);
}

/* ---------------------------------------------------------------- loader */

/* Runs one epoch and folds every batch (images, labels, counts) into an
 * FNV-1a hash; also checks each batch's device copy against its host copy
 * when `check_device`. Returns the hash, 0 on failure. */
static uint64_t epoch_hash(dlrt_device_t *dev, const dlrt_dataset *d,
                           const dlrt_loader_config *c, int epoch, int check_device) {
  dlrt_loader_t *l;
  if (dlrt_loader_create(dev, d, c, &l) < 0) return 0;
  uint64_t h = 1469598103934665603ull;
  size_t image_bytes = (size_t)(c->batch * d->channels * d->height * d->width) * sizeof(float);
  float *back = check_device ? malloc(image_bytes) : NULL;
  dlrt_stream_t *s = dlrt_device_default_stream(dev);
  int rc = dlrt_loader_start(l, epoch), device_ok = 1;
  dlrt_batch b;
  while (rc >= 0 && (rc = dlrt_loader_next(l, &b)) == 1) {
    const unsigned char *p = (const unsigned char *)b.host_images;
    for (size_t i = 0; i < image_bytes; i++) h = (h ^ p[i]) * 1099511628211ull;
    p = (const unsigned char *)b.host_labels;
    for (size_t i = 0; i < (size_t)c->batch * 4; i++) h = (h ^ p[i]) * 1099511628211ull;
    h = (h ^ (uint64_t)b.count) * 1099511628211ull;
    if (back) {
      if (dlrt_stream_wait_event(s, b.ready) < 0 ||
          dlrt_copy_d2h(back, b.images, 0, image_bytes, s) < 0 ||
          dlrt_stream_synchronize(s) < 0 || memcmp(back, b.host_images, image_bytes) != 0)
        device_ok = 0;
    }
    rc = dlrt_loader_release(l, &b, back ? s : NULL);
  }
  if (back) ok(device_ok, "every batch on the device equals its pinned copy");
  free(back);
  dlrt_loader_destroy(l);
  return rc < 0 ? 0 : h;
}

static void test_order(dlrt_device_t *dev, const char *name) {
  dlrt_dataset d;
  make_indexed(&d, 100, 1, 6, 5, 10);
  dlrt_loader_config c = {.batch = 8, .world = 1, .seed = 11};
  dlrt_loader_t *l;
  if (!tap_check(dlrt_loader_create(dev, &d, &c, &l), "%s: in order, no workers", name)) {
    dlrt_dataset_free(&d);
    return;
  }
  is_int(dlrt_loader_batches(l), 12, "%s: 100 samples in batches of 8: 12 (last dropped)", name);
  dlrt_batch b;
  is_status(dlrt_loader_next(l, &b), DLRT_ERR_STATE, "%s: next before start is refused", name);
  tap_check(dlrt_loader_start(l, 0), "%s: start epoch 0", name);
  int in_order = 1, labels_ok = 1, n = 0, rc;
  while ((rc = dlrt_loader_next(l, &b)) == 1) {
    for (int r = 0; r < 8; r++) {
      int64_t want = b.index * 8 + r;
      in_order &= row_index(b.host_images + r * 30) == want;
      labels_ok &= b.host_labels[r] == want % 10;
    }
    n++;
    dlrt_loader_release(l, &b, NULL);
  }
  is_int(rc, 0, "%s: the epoch ends with 0", name);
  is_int(n, 12, "%s: 12 batches", name);
  ok(in_order, "%s: batch k row r is sample 8k + r", name);
  ok(labels_ok, "%s: every label goes with its image", name);
  is_int(dlrt_loader_next(l, &b), 0, "%s: still 0 after the end", name);
  dlrt_loader_stats st;
  tap_check(dlrt_loader_stats_get(l, &st), "%s: stats", name);
  ok(st.batches == 12 && st.images == 96 && st.stall_s >= 0 && st.work_s > 0,
     "%s: stats count 12 batches, 96 images, stall %.6f s, work %.6f s", name, st.stall_s,
     st.work_s);
  dlrt_loader_destroy(l);

  /* Shuffled: every sample once per epoch, epochs differ, an epoch repeats. */
  c.shuffle = 1;
  c.batch = 10;
  c.workers = 2;
  c.prefetch = 2;
  tap_check(dlrt_loader_create(dev, &d, &c, &l), "%s: shuffled, 2 workers, prefetch 2", name);
  int64_t first[2][100];
  for (int e = 0; e < 3; e++) {
    int seen[100] = {0}, each_once = 1;
    dlrt_loader_start(l, e < 2 ? e : 0);
    while (dlrt_loader_next(l, &b) == 1) {
      for (int r = 0; r < 10; r++) {
        int64_t i = row_index(b.host_images + r * 30);
        if (i < 0 || i >= 100 || seen[i]++) each_once = 0;
        if (e < 2) first[e][b.index * 10 + r] = i;
        else if (first[0][b.index * 10 + r] != i) each_once = 0;
      }
      dlrt_loader_release(l, &b, NULL);
    }
    ok(each_once, "%s: epoch %d holds every sample once%s", name, e < 2 ? e : 0,
       e == 2 ? ", in epoch 0's order again" : "");
  }
  ok(memcmp(first[0], first[1], sizeof first[0]) != 0, "%s: epochs 0 and 1 differ in order",
     name);
  int moved = 0;
  for (int i = 0; i < 100; i++) moved += first[0][i] != i;
  ok(moved > 50, "%s: the shuffle moved %d of 100 samples", name, moved);

  /* Abandoning an epoch halfway, then starting another. */
  dlrt_loader_start(l, 1);
  ok(dlrt_loader_next(l, &b) == 1, "%s: a batch of epoch 1", name);
  is_status(dlrt_loader_start(l, 2), DLRT_ERR_STATE, "%s: start while a batch is held is refused",
            name);
  dlrt_loader_release(l, &b, NULL);
  tap_check(dlrt_loader_start(l, 0), "%s: start epoch 0 after half of epoch 1", name);
  ok(dlrt_loader_next(l, &b) == 1 && row_index(b.host_images) == first[0][0],
     "%s: the first batch is epoch 0's", name);
  dlrt_loader_release(l, &b, NULL);
  dlrt_loader_destroy(l);

  /* A ring of one: the batch must go back before the next. */
  c.prefetch = 1;
  tap_check(dlrt_loader_create(dev, &d, &c, &l), "%s: prefetch 1", name);
  dlrt_loader_start(l, 0);
  dlrt_batch b2;
  ok(dlrt_loader_next(l, &b) == 1, "%s: first batch", name);
  is_status(dlrt_loader_next(l, &b2), DLRT_ERR_STATE, "%s: a second without release is refused",
            name);
  tap_check(dlrt_loader_release(l, &b, NULL), "%s: release", name);
  is_status(dlrt_loader_release(l, &b, NULL), DLRT_ERR_INVALID_ARG,
            "%s: releasing twice is refused", name);
  dlrt_loader_destroy(l);
  dlrt_dataset_free(&d);
}

static void test_shards_and_padding(dlrt_device_t *dev, const char *name) {
  dlrt_dataset d;
  make_indexed(&d, 100, 1, 4, 4, 10);
  int owner[100];
  memset(owner, -1, sizeof owner);
  int disjoint = 1, total = 0;
  for (int r = 0; r < 3; r++) {
    dlrt_loader_config c = {.batch = 11, .world = 3, .rank = r, .shuffle = 1, .seed = 5,
                            .workers = 1, .prefetch = 2};
    dlrt_loader_t *l;
    if (!tap_check(dlrt_loader_create(dev, &d, &c, &l), "%s: rank %d of 3", name, r)) continue;
    is_int(dlrt_loader_batches(l), 3, "%s: rank %d: 33 samples, 3 batches of 11", name, r);
    dlrt_loader_start(l, 4);
    dlrt_batch b;
    while (dlrt_loader_next(l, &b) == 1) {
      for (int i = 0; i < 11; i++) {
        int64_t s = row_index(b.host_images + i * 16);
        if (owner[s] != -1 && owner[s] != r) disjoint = 0;
        if (owner[s] == -1) total++;
        owner[s] = r;
      }
      dlrt_loader_release(l, &b, NULL);
    }
    dlrt_loader_destroy(l);
  }
  ok(disjoint, "%s: the three shards are disjoint", name);
  is_int(total, 99, "%s: together they cover 99 samples (one dropped for equal shards)", name);

  /* Padding: 10 samples in batches of 4 -> 4, 4, 2 + 2 from the start. */
  dlrt_dataset small;
  make_indexed(&small, 10, 1, 4, 4, 10);
  dlrt_loader_config c = {.batch = 4, .world = 1, .pad_last = 1, .workers = 2};
  dlrt_loader_t *l;
  tap_check(dlrt_loader_create(dev, &small, &c, &l), "%s: pad the last batch", name);
  is_int(dlrt_loader_batches(l), 3, "%s: 10 samples, batches of 4, padded: 3", name);
  dlrt_loader_start(l, 0);
  dlrt_batch b;
  int64_t last_count = -1, pad0 = -1, pad1 = -1;
  while (dlrt_loader_next(l, &b) == 1) {
    last_count = b.count;
    pad0 = row_index(b.host_images + 2 * 16);
    pad1 = row_index(b.host_images + 3 * 16);
    dlrt_loader_release(l, &b, NULL);
  }
  is_int(last_count, 2, "%s: the last batch has 2 real samples", name);
  ok(pad0 == 0 && pad1 == 1, "%s: its padding rows repeat samples 0 and 1 (%lld, %lld)", name,
     (long long)pad0, (long long)pad1);
  dlrt_loader_destroy(l);
  dlrt_dataset_free(&small);

  c = (dlrt_loader_config){.batch = 200, .world = 1};
  is_status(dlrt_loader_create(dev, &d, &c, &l), DLRT_ERR_INVALID_ARG,
            "%s: a batch larger than the set is refused", name);
  ok(strstr(dlrt_last_error(), "fewer than one batch") != NULL, "%s: and says so: %s", name,
     dlrt_last_error());
  c = (dlrt_loader_config){.batch = 4, .world = 2, .rank = 2};
  is_status(dlrt_loader_create(dev, &d, &c, &l), DLRT_ERR_INVALID_ARG,
            "%s: rank 2 of 2 is refused", name);
  c = (dlrt_loader_config){.batch = 4, .world = 1, .aug = {.crop_padding = 4}};
  is_status(dlrt_loader_create(dev, &d, &c, &l), DLRT_ERR_INVALID_ARG,
            "%s: crop padding as large as the image is refused", name);
  dlrt_dataset_free(&d);
}

static void test_augmentation(dlrt_device_t *dev, const char *name) {
  /* 8 x 8 images, pixel (y, x) = 10 y + x + 1 (never 0), 40 samples. */
  enum { N = 40, S = 8 };
  dlrt_dataset d = {.count = N, .channels = 1, .height = S, .width = S, .classes = 2,
                    .image_dtype = DLRT_U8};
  d.images = malloc(N * S * S);
  d.labels = calloc(N, sizeof *d.labels);
  for (int i = 0; i < N; i++)
    for (int p = 0; p < S * S; p++) d.images[i * S * S + p] = (uint8_t)(10 * (p / S) + p % S + 1);
  snprintf(d.source, sizeof d.source, "pattern");
  dlrt_loader_config c = {.batch = N, .world = 1, .seed = 9, .augment = 1, .workers = 2};
  dlrt_loader_t *l;
  dlrt_batch b;

  c.aug = (dlrt_augment){.flip = 1};
  int flipped = 0, kept = 0, other = 0;
  if (tap_check(dlrt_loader_create(dev, &d, &c, &l), "%s: flip", name)) {
    dlrt_loader_start(l, 0);
    dlrt_loader_next(l, &b);
    for (int i = 0; i < N; i++) {
      const float *img = b.host_images + i * S * S;
      int same = 1, mirror = 1;
      for (int y = 0; y < S; y++)
        for (int x = 0; x < S; x++) {
          float v = img[y * S + x] * 255.0f;
          same &= fabsf(v - (float)(10 * y + x + 1)) < 1e-3f;
          mirror &= fabsf(v - (float)(10 * y + (S - 1 - x) + 1)) < 1e-3f;
        }
      flipped += mirror, kept += same, other += !same && !mirror;
    }
    dlrt_loader_release(l, &b, NULL);
    dlrt_loader_destroy(l);
  }
  ok(flipped > 5 && kept > 5 && other == 0, "%s: flip: %d mirrored, %d as they were, %d other",
     name, flipped, kept, other);

  c.aug = (dlrt_augment){.crop_padding = 2};
  int shifted = 0, bad = 0;
  if (tap_check(dlrt_loader_create(dev, &d, &c, &l), "%s: crop with padding 2", name)) {
    dlrt_loader_start(l, 0);
    dlrt_loader_next(l, &b);
    for (int i = 0; i < N; i++) {
      const float *img = b.host_images + i * S * S;
      /* Find the shift from a pixel that is surely inside: the centre. */
      int v = (int)lroundf(img[4 * S + 4] * 255.0f) - 1;
      int dy = v / 10 - 4, dx = v % 10 - 4;
      if (dy < -2 || dy > 2 || dx < -2 || dx > 2) {
        bad++;
        continue;
      }
      shifted += dy != 0 || dx != 0;
      for (int y = 0; y < S; y++)
        for (int x = 0; x < S; x++) {
          int sy = y + dy, sx = x + dx;
          float want = sy < 0 || sy >= S || sx < 0 || sx >= S ? 0.0f
                                                              : (float)(10 * sy + sx + 1);
          if (fabsf(img[y * S + x] * 255.0f - want) > 1e-3f) bad++;
        }
    }
    dlrt_loader_release(l, &b, NULL);
    dlrt_loader_destroy(l);
  }
  ok(bad == 0 && shifted > N / 2, "%s: crop: every image a shift of at most 2 with zeros "
     "shifted in (%d shifted, %d wrong pixels)", name, shifted, bad);

  c.aug = (dlrt_augment){.mean = 0.5f, .std = 0.25f};
  c.augment = 0; /* normalisation applies without augmentation too */
  int normal_ok = 0;
  if (tap_check(dlrt_loader_create(dev, &d, &c, &l), "%s: normalise only", name)) {
    dlrt_loader_start(l, 0);
    dlrt_loader_next(l, &b);
    normal_ok = 1;
    for (int p = 0; p < S * S; p++) {
      float want = ((float)(10 * (p / S) + p % S + 1) / 255.0f - 0.5f) / 0.25f;
      normal_ok &= fabsf(b.host_images[p] - want) < 1e-5f;
    }
    dlrt_loader_release(l, &b, NULL);
    dlrt_loader_destroy(l);
  }
  ok(normal_ok, "%s: normalise: (x / 255 - 0.5) / 0.25 exactly", name);

  c.augment = 1;
  c.aug = (dlrt_augment){.erase_p = 1.0f};
  int erased = 0, rect = 1;
  if (tap_check(dlrt_loader_create(dev, &d, &c, &l), "%s: erase always", name)) {
    dlrt_loader_start(l, 0);
    dlrt_loader_next(l, &b);
    for (int i = 0; i < N; i++) {
      const float *img = b.host_images + i * S * S;
      int zeros = 0, y0 = S, y1 = -1, x0 = S, x1 = -1;
      for (int p = 0; p < S * S; p++)
        if (img[p] == 0.0f) {
          zeros++;
          int y = p / S, x = p % S;
          y0 = y < y0 ? y : y0, y1 = y > y1 ? y : y1, x0 = x < x0 ? x : x0, x1 = x > x1 ? x : x1;
        }
      if (zeros) {
        erased++;
        rect &= zeros == (y1 - y0 + 1) * (x1 - x0 + 1); /* one filled rectangle */
      }
    }
    dlrt_loader_release(l, &b, NULL);
    dlrt_loader_destroy(l);
  }
  ok(erased > N / 2 && rect, "%s: erase: %d of %d images hold one zero rectangle", name,
     erased, N);
  free(d.images);
  free(d.labels);
}

static void test_same_batches(dlrt_device_t *dev, const char *name) {
  dlrt_dataset d;
  make_indexed(&d, 300, 1, 10, 10, 10);
  const int configs[][2] = {{0, 0}, {1, 1}, {4, 3}, {2, 0}, {3, 8}};
  uint64_t first = 0;
  for (size_t i = 0; i < sizeof configs / sizeof *configs; i++) {
    dlrt_loader_config c = {.batch = 16, .world = 1, .seed = 21, .shuffle = 1, .augment = 1,
                            .workers = configs[i][0], .prefetch = configs[i][1],
                            .aug = {.crop_padding = 2, .flip = 1, .erase_p = 0.5f,
                                    .mean = 0.3f, .std = 0.2f}};
    uint64_t h = epoch_hash(dev, &d, &c, 3, i == 2);
    ok(h != 0, "%s: an epoch with %d workers, prefetch %d", name, configs[i][0],
       configs[i][1]);
    if (i == 0) first = h;
    else
      ok(h == first, "%s: %d workers, prefetch %d: the same batches as 0 workers, prefetch 0",
         name, configs[i][0], configs[i][1]);
  }
  /* Host only: the same batches, no device side. */
  dlrt_loader_config h = {.batch = 16, .world = 1, .seed = 21, .shuffle = 1, .augment = 1,
                          .workers = 2, .prefetch = 2, .host_only = 1,
                          .aug = {.crop_padding = 2, .flip = 1, .erase_p = 0.5f,
                                  .mean = 0.3f, .std = 0.2f}};
  ok(epoch_hash(dev, &d, &h, 3, 0) == first, "%s: host only: the same batches", name);
  dlrt_loader_t *l;
  dlrt_batch b;
  if (tap_check(dlrt_loader_create(dev, &d, &h, &l), "%s: a host-only loader", name)) {
    dlrt_loader_start(l, 0);
    ok(dlrt_loader_next(l, &b) == 1 && !b.images && !b.labels && !b.ready && b.host_images,
       "%s: host only: pinned rows, no device buffers or event", name);
    tap_check(dlrt_loader_release(l, &b, NULL), "%s: host only: release", name);
    dlrt_loader_destroy(l);
  }
  dlrt_loader_config c = {.batch = 16, .world = 1, .seed = 22, .shuffle = 1, .augment = 1,
                          .aug = {.crop_padding = 2, .flip = 1}};
  ok(epoch_hash(dev, &d, &c, 3, 0) != first, "%s: another seed gives other batches", name);
  dlrt_dataset_free(&d);
}

/* fp32 -> fp16 / bf16, rounded to nearest even: the compiler's _Float16
 * conversion, and bf16 by its definition (NaN kept quiet). */
static uint16_t ref_f16(float x) {
  _Float16 h = (_Float16)x;
  uint16_t u;
  memcpy(&u, &h, 2);
  return u;
}
static uint16_t ref_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* A loader of 16-bit images (for a mixed-precision graph) hands the device
 * the f32 loader's batches rounded to nearest even: same order, same
 * augmentation, half the bytes; its batches have no fp32 host rows. */
static void test_half_images(dlrt_device_t *dev, const char *name) {
  dlrt_dataset d;
  make_indexed(&d, 64, 1, 10, 10, 10);
  dlrt_stream_t *s = dlrt_device_default_stream(dev);
  const dlrt_dtype types[2] = {DLRT_F16, DLRT_BF16};
  for (int t = 0; t < 2; t++) {
    const char *tn = dlrt_dtype_name(types[t]);
    dlrt_loader_config c = {.batch = 16, .world = 1, .seed = 5, .shuffle = 1, .augment = 1,
                            .workers = 2, .prefetch = 2,
                            .aug = {.crop_padding = 2, .flip = 1, .erase_p = 0.5f,
                                    .mean = 0.3f, .std = 0.2f}};
    dlrt_loader_t *wide = NULL, *narrow = NULL;
    int rc = dlrt_loader_create(dev, &d, &c, &wide);
    c.image_type = types[t];
    if (rc == DLRT_OK) rc = dlrt_loader_create(dev, &d, &c, &narrow);
    if (!tap_check(rc, "%s: f32 and %s loaders", name, tn)) {
      dlrt_loader_destroy(wide);
      continue;
    }
    dlrt_loader_start(wide, 1);
    dlrt_loader_start(narrow, 1);
    int batches = 0, same = 1, typed = 1;
    uint16_t got[16 * 100];
    dlrt_batch a, b;
    while (dlrt_loader_next(wide, &a) == 1) {
      if (dlrt_loader_next(narrow, &b) != 1) {
        same = 0;
        break;
      }
      typed &= b.image_type == types[t] && b.host_images == NULL && a.image_type == DLRT_F32;
      if (dlrt_stream_wait_event(s, b.ready) < 0 ||
          dlrt_copy_d2h(got, b.images, 0, sizeof got, s) < 0 || dlrt_stream_synchronize(s) < 0)
        same = 0;
      for (int i = 0; i < 16 * 100 && same; i++)
        same = got[i] == (types[t] == DLRT_F16 ? ref_f16(a.host_images[i]) : ref_bf16(a.host_images[i]));
      for (int i = 0; i < 16 && same; i++) same = a.host_labels[i] == b.host_labels[i];
      dlrt_loader_release(wide, &a, NULL);
      dlrt_loader_release(narrow, &b, s);
      batches++;
    }
    ok(batches == 4 && same, "%s: %s images are the f32 ones rounded to nearest even (%d "
       "batches, labels equal)", name, tn, batches);
    ok(typed, "%s: %s batches say their type and have no f32 host rows", name, tn);
    dlrt_loader_destroy(wide);
    dlrt_loader_destroy(narrow);
  }
  dlrt_loader_config bad = {.batch = 16, .world = 1, .host_only = 1, .image_type = DLRT_F16};
  dlrt_loader_t *l = NULL;
  is_status(dlrt_loader_create(dev, &d, &bad, &l), DLRT_ERR_INVALID_ARG,
            "%s: a host-only loader of f16 images is refused: %s", name, dlrt_last_error());
  dlrt_loader_destroy(l);
  dlrt_dataset_free(&d);
}

/* A label past the classes, found by a worker, stops the run with a message;
 * nothing hangs. */
static void test_worker_failure(dlrt_device_t *dev, const char *name) {
  dlrt_dataset d;
  make_indexed(&d, 64, 1, 4, 4, 10);
  d.labels[37] = 12;
  for (int workers = 0; workers <= 3; workers += 3) {
    dlrt_loader_config c = {.batch = 8, .world = 1, .workers = workers, .prefetch = 2};
    dlrt_loader_t *l;
    if (!tap_check(dlrt_loader_create(dev, &d, &c, &l), "%s: %d workers", name, workers))
      continue;
    dlrt_loader_start(l, 0);
    dlrt_batch b;
    int rc, batches = 0;
    while ((rc = dlrt_loader_next(l, &b)) == 1) {
      batches++;
      dlrt_loader_release(l, &b, NULL);
    }
    is_status(rc, DLRT_ERR_INVALID_ARG, "%s, %d workers: the bad label stops the epoch", name,
              workers);
    ok(strstr(dlrt_last_error(), "sample 37") && strstr(dlrt_last_error(), "label 12"),
       "%s, %d workers: the message names the sample and label: %s", name, workers,
       dlrt_last_error());
    ok(batches <= 4, "%s, %d workers: %d good batches came before it", name, workers, batches);
    is_status(dlrt_loader_next(l, &b), DLRT_ERR_INVALID_ARG, "%s, %d workers: and stays failed",
              name, workers);
    dlrt_loader_destroy(l);
  }
  dlrt_dataset_free(&d);
}

/* dlrt_loader_start_at: an epoch begun at batch k gives the whole epoch's
 * batches from k on, augmentation included, whatever the slot ring's state. */
static void test_start_at(dlrt_device_t *dev, const char *name) {
  enum { N = 40, S = 8, B = 8, BATCHES = N / B };
  dlrt_dataset d = {.count = N, .channels = 1, .height = S, .width = S, .classes = 4,
                    .image_dtype = DLRT_U8};
  d.images = malloc(N * S * S);
  d.labels = malloc(N * sizeof *d.labels);
  for (int i = 0; i < N * S * S; i++) d.images[i] = (uint8_t)(i * 37 % 251 + 1);
  for (int i = 0; i < N; i++) d.labels[i] = i % 4;
  snprintf(d.source, sizeof d.source, "pattern");
  dlrt_loader_config c = {.batch = B, .world = 1, .seed = 5, .shuffle = 1, .augment = 1,
                          .workers = 2, .prefetch = 2};
  c.aug = (dlrt_augment){.flip = 1, .crop_padding = 2};
  dlrt_loader_t *l;
  if (!tap_check(dlrt_loader_create(dev, &d, &c, &l), "%s: start_at: a loader", name)) {
    dlrt_dataset_free(&d);
    return;
  }
  static float whole[BATCHES][B * S * S];
  static int32_t labels[BATCHES][B];
  dlrt_batch b;
  int got = 0;
  dlrt_loader_start(l, 3);
  while (got < BATCHES && dlrt_loader_next(l, &b) > 0) {
    memcpy(whole[got], b.host_images, sizeof whole[got]);
    memcpy(labels[got], b.host_labels, sizeof labels[got]);
    dlrt_loader_release(l, &b, NULL);
    got++;
  }
  ok(got == BATCHES, "%s: start_at: the whole epoch has %d batches", name, got);
  /* Begun part way into another epoch, as fit() in parts does. */
  dlrt_loader_start(l, 2);
  if (dlrt_loader_next(l, &b) > 0) dlrt_loader_release(l, &b, NULL);
  for (int first = 1; first < BATCHES; first += 2) {
    int same = 1, n = 0;
    tap_check(dlrt_loader_start_at(l, 3, first), "%s: start epoch 3 at batch %d", name, first);
    while (dlrt_loader_next(l, &b) > 0) {
      int k = first + n++;
      same &= k < BATCHES && !memcmp(whole[k], b.host_images, sizeof whole[k]) &&
              !memcmp(labels[k], b.host_labels, sizeof labels[k]);
      dlrt_loader_release(l, &b, NULL);
    }
    ok(same && n == BATCHES - first, "%s: from batch %d: %d batches, the whole epoch's", name,
       first, n);
  }
  tap_check(dlrt_loader_start_at(l, 3, BATCHES), "%s: start at the epoch's end", name);
  ok(dlrt_loader_next(l, &b) == 0, "%s: which has no batch left", name);
  is_status(dlrt_loader_start_at(l, 3, BATCHES + 1), DLRT_ERR_INVALID_ARG,
            "%s: a batch past the epoch is refused", name);
  is_status(dlrt_loader_start_at(l, 3, -1), DLRT_ERR_INVALID_ARG,
            "%s: a negative batch is refused", name);
  dlrt_loader_destroy(l);
  dlrt_dataset_free(&d);
}

static void run_device(dlrt_device_t *dev, const char *spec, void *ctx) {
  (void)ctx;
  diag("device %s", spec);
  test_order(dev, spec);
  test_shards_and_padding(dev, spec);
  test_augmentation(dev, spec);
  test_same_batches(dev, spec);
  test_start_at(dev, spec);
  test_half_images(dev, spec);
  test_worker_failure(dev, spec);
}

int main(void) {
  tap_tempdir("dlrt-loader", root, sizeof root);
  if (dlrt_init() < 0) bail_out("dlrt_init: %s", dlrt_last_error());
  test_records_round_trip();
  test_records_corrupt();
  tap_for_each_device(run_device, NULL);
  dlrt_shutdown();
  tap_remove_tree(root);
  return done_testing();
}
