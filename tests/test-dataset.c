/*
 * test-dataset.c — MNIST-family data sets (dlrt_dataset_load, _load_idx,
 * _generate, _free): Debian's Fashion-MNIST when it is installed, checked
 * against the files as this test reads them itself; small IDX files written
 * here, plain and gzip, loaded exactly; every kind of bad file refused with
 * the right status and a message naming the file; the generated stand-in
 * reproducible, balanced and learnable.
 * Points: computed at run time (done_testing).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "dlrt.h"
#include "tap.h"

#define PATH_CAP 4096

static char root[PATH_CAP]; /* the temporary folder every file goes in */

/* "<root>/<rel>" in one of a few rotating buffers, so that a call can take
 * several paths at once. */
static const char *tmp_path(const char *rel) {
  static char bufs[8][PATH_CAP];
  static int next;
  char *p = bufs[next++ % 8];
  if (snprintf(p, PATH_CAP, "%s/%s", root, rel) >= PATH_CAP) bail_out("path too long");
  return p;
}

static void make_dir(const char *rel) {
  if (mkdir(tmp_path(rel), 0700) != 0) bail_out("mkdir %s: %s", rel, strerror(errno));
}

/* ---------------------------------------------------------------- IDX files */

typedef struct {
  unsigned char *bytes;
  size_t len;
} blob;

/* Labels read (int32) against the bytes of an IDX labels file. */
static int labels_match(const int32_t *got, const uint8_t *want, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (got[i] != want[i]) {
      diag("label %zu: got %d, want %d", i, (int)got[i], (int)want[i]);
      return 0;
    }
  return 1;
}

static void put_be32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}

/* An IDX file: magic, `ndims` dimensions, `data_len` bytes of `data` (which
 * need not match the dimensions), then `extra` bytes of 0xee. */
static blob idx_blob(uint32_t magic, int ndims, const uint32_t *dims, const uint8_t *data,
                     size_t data_len, size_t extra) {
  blob b;
  b.len = 4 + 4 * (size_t)ndims + data_len + extra;
  b.bytes = malloc(b.len);
  if (!b.bytes) bail_out("out of memory");
  put_be32(b.bytes, magic);
  for (int i = 0; i < ndims; i++) put_be32(b.bytes + 4 + 4 * i, dims[i]);
  if (data_len) memcpy(b.bytes + 4 + 4 * ndims, data, data_len);
  memset(b.bytes + 4 + 4 * ndims + data_len, 0xee, extra);
  return b;
}

static blob images_blob(uint32_t count, uint32_t rows, uint32_t cols, const uint8_t *data) {
  uint32_t dims[3] = {count, rows, cols};
  return idx_blob(0x00000803, 3, dims, data, (size_t)count * rows * cols, 0);
}

static blob labels_blob(uint32_t count, const uint8_t *data) {
  return idx_blob(0x00000801, 1, &count, data, count, 0);
}

/* Writes `len` bytes to <root>/<rel>, gzip-compressed when `gz`. */
static void write_file(const char *rel, const void *bytes, size_t len, int gz) {
  const char *path = tmp_path(rel);
  if (gz) {
    gzFile f = gzopen(path, "wb");
    if (!f || (len > 0 && gzwrite(f, bytes, (unsigned)len) != (int)len) || gzclose(f) != Z_OK)
      bail_out("cannot write %s", path);
  } else {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(bytes, 1, len, f) != len || fclose(f) != 0)
      bail_out("cannot write %s", path);
  }
}

static void write_blob(const char *rel, blob b, int gz) {
  write_file(rel, b.bytes, b.len, gz);
  free(b.bytes);
}

/* The raw bytes of <root>/<rel>. */
static blob read_raw(const char *rel) {
  const char *path = tmp_path(rel);
  FILE *f = fopen(path, "rb");
  if (!f) bail_out("cannot read %s", path);
  blob b = {NULL, 0};
  size_t cap = 0;
  for (;;) {
    if (b.len == cap) {
      cap = cap ? 2 * cap : 4096;
      b.bytes = realloc(b.bytes, cap);
      if (!b.bytes) bail_out("out of memory");
    }
    size_t got = fread(b.bytes + b.len, 1, cap - b.len, f);
    if (got == 0) break;
    b.len += got;
  }
  fclose(f);
  return b;
}

/* The first `n` decompressed bytes of a file, or NULL if it is shorter. */
static uint8_t *gz_prefix(const char *path, size_t n) {
  gzFile f = gzopen(path, "rb");
  if (!f) return NULL;
  uint8_t *buf = malloc(n ? n : 1);
  size_t have = 0;
  while (buf && have < n) {
    size_t want = n - have < (1u << 30) ? n - have : (1u << 30);
    int r = gzread(f, buf + have, (unsigned)want);
    if (r <= 0) break;
    have += (size_t)r;
  }
  gzclose(f);
  if (have < n) {
    free(buf);
    return NULL;
  }
  return buf;
}

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* ---------------------------------------------------------------- checks */

static void scribble(dlrt_dataset *d) { memset(d, 0x5a, sizeof *d); }

static int is_zeroed(const dlrt_dataset *d) {
  static const dlrt_dataset zero;
  return memcmp(d, &zero, sizeof zero) == 0;
}

/* A refused call: the status, a message holding `name` and `hint` (either
 * may be NULL), and *out left zeroed. */
static void refused(int rc, const dlrt_dataset *d, int want, const char *name, const char *hint,
                    const char *what) {
  is_status(rc, want, "%s: %s", what, dlrt_err_name(want));
  const char *msg = dlrt_last_error();
  int names = !name || strstr(msg, name);
  int hints = !hint || strstr(msg, hint);
  if (!ok(names && hints, "%s: the message names %s and says \"%s\"", what,
          name ? name : "-", hint ? hint : "-"))
    diag("  message: %s", msg);
  ok(is_zeroed(d), "%s: the data set is left zeroed", what);
}

/* ---------------------------------------------------------------- Fashion-MNIST */

/* Loads one split through dlrt_dataset_load(`where`) and checks it against
 * what this test reads from the files itself. */
static void check_fashion_split(const char *where, int test, int expect_count) {
  const char *split = test ? "t10k" : "train";
  char images_path[PATH_CAP], labels_path[PATH_CAP];
  snprintf(images_path, sizeof images_path, "%s/%s-images-idx3-ubyte.gz",
           DLRT_FASHION_MNIST_DIR, split);
  snprintf(labels_path, sizeof labels_path, "%s/%s-labels-idx1-ubyte.gz",
           DLRT_FASHION_MNIST_DIR, split);

  /* What the files say, read here without the library. */
  uint8_t *lhead = gz_prefix(labels_path, 8), *ihead = gz_prefix(images_path, 16);
  if (!lhead || !ihead) bail_out("cannot read the headers of %s", images_path);
  uint32_t count = be32(lhead + 4), rows = be32(ihead + 8), cols = be32(ihead + 12);
  free(lhead);
  free(ihead);
  uint8_t *labels = gz_prefix(labels_path, 8 + (size_t)count);
  /* All of the test split's images, the first 100 of the training split's. */
  size_t check_images = test ? count : 100;
  uint8_t *images = gz_prefix(images_path, 16 + check_images * rows * cols);
  if (!labels || !images) bail_out("cannot read %s", images_path);
  int top = 0;
  for (uint32_t i = 0; i < count; i++)
    if (labels[8 + i] > top) top = labels[8 + i];

  dlrt_dataset d;
  scribble(&d);
  if (tap_check(dlrt_dataset_load(where, test, &d), "fashion-mnist %s: load via \"%s\"", split,
                where)) {
    is_int(d.count, expect_count, "fashion-mnist %s: %d samples", split, expect_count);
    is_int(d.count, count, "fashion-mnist %s: as many as the labels file says", split);
    ok(d.height == 28 && d.width == 28, "fashion-mnist %s: 28 x 28 (got %lld x %lld)", split,
       (long long)d.height, (long long)d.width);
    ok(d.height == rows && d.width == cols, "fashion-mnist %s: the images file's shape",
       split);
    is_int(d.classes, 10, "fashion-mnist %s: 10 classes", split);
    is_int(d.classes, top + 1, "fashion-mnist %s: 1 + the largest label in the file", split);
    is_int(d.labels[0], labels[8], "fashion-mnist %s: first label %d", split, labels[8]);
    ok(labels_match(d.labels, labels + 8, count), "fashion-mnist %s: every label", split);
    is_mem(d.images, images + 16, check_images * rows * cols,
           "fashion-mnist %s: the first %zu images, byte for byte", split, check_images);
    is_str(d.source, DLRT_FASHION_MNIST_DIR, "fashion-mnist %s: source is the folder",
           split);
  }
  dlrt_dataset_free(&d);
  free(labels);
  free(images);
}

static void test_fashion_mnist(void) {
  struct stat st;
  if (stat(DLRT_FASHION_MNIST_DIR, &st) != 0) {
    skip(1, "%s absent: install Debian's dataset-fashion-mnist to test the real set",
         DLRT_FASHION_MNIST_DIR);
    /* Its absence is itself a case: the message says how to get it. */
    dlrt_dataset d;
    scribble(&d);
    refused(dlrt_dataset_load("fashion-mnist", 0, &d), &d, DLRT_ERR_NOT_FOUND,
            DLRT_FASHION_MNIST_DIR, "dataset-fashion-mnist", "fashion-mnist absent");
    return;
  }
  check_fashion_split("fashion-mnist", 0, 60000);
  check_fashion_split(DLRT_FASHION_MNIST_DIR, 1, 10000);
}

/* ---------------------------------------------------------------- small files */

enum { N = 5, ROWS = 3, COLS = 4 };
static uint8_t small_images[N * ROWS * COLS];
static const uint8_t small_labels[N] = {0, 2, 1, 2, 0};

static void expect_small(const dlrt_dataset *d, const char *what) {
  ok(d->count == N && d->height == ROWS && d->width == COLS,
     "%s: %d x %d x %d (got %lld x %lld x %lld)", what, N, ROWS, COLS, (long long)d->count,
     (long long)d->height, (long long)d->width);
  is_int(d->classes, 3, "%s: 3 classes", what);
  is_mem(d->images, small_images, sizeof small_images, "%s: the images", what);
  ok(labels_match(d->labels, small_labels, sizeof small_labels), "%s: the labels", what);
}

static void test_small_files(void) {
  fill_pattern(small_images, sizeof small_images, 11);
  write_blob("im", images_blob(N, ROWS, COLS, small_images), 0);
  write_blob("lb", labels_blob(N, small_labels), 0);
  write_blob("im.gz", images_blob(N, ROWS, COLS, small_images), 1);
  write_blob("lb.gz", labels_blob(N, small_labels), 1);

  dlrt_dataset d;
  scribble(&d);
  if (tap_check(dlrt_dataset_load_idx(tmp_path("im"), tmp_path("lb"), &d), "plain files"))
    expect_small(&d, "plain files");
  ok(strstr(d.source, "im") && strstr(d.source, "lb"), "source names both files: %s",
     d.source);
  dlrt_dataset_free(&d);
  if (tap_check(dlrt_dataset_load_idx(tmp_path("im.gz"), tmp_path("lb.gz"), &d), "gzip files"))
    expect_small(&d, "gzip files");
  dlrt_dataset_free(&d);

  /* A folder: gzip images, plain labels; a plain images file beside the gzip
   * one is garbage, so loading proves ".gz" is tried first. */
  make_dir("set");
  write_blob("set/train-images-idx3-ubyte.gz", images_blob(N, ROWS, COLS, small_images), 1);
  write_file("set/train-images-idx3-ubyte", "garbage", 7, 0);
  write_blob("set/train-labels-idx1-ubyte", labels_blob(N, small_labels), 0);
  static const uint8_t t10k_images[2 * 2 * 2] = {1, 2, 3, 4, 5, 6, 7, 8};
  static const uint8_t t10k_labels[2] = {9, 4};
  write_blob("set/t10k-images-idx3-ubyte", images_blob(2, 2, 2, t10k_images), 0);
  write_blob("set/t10k-labels-idx1-ubyte.gz", labels_blob(2, t10k_labels), 1);

  const char *folder = tmp_path("set");
  if (tap_check(dlrt_dataset_load(folder, 0, &d), "folder, training split"))
    expect_small(&d, "folder, training split");
  is_str(d.source, folder, "folder: source is the folder");
  dlrt_dataset_free(&d);
  if (tap_check(dlrt_dataset_load(tmp_path("set/"), 1, &d), "folder with a trailing /, "
                "test split")) {
    ok(d.count == 2 && d.height == 2 && d.width == 2, "test split: 2 x 2 x 2");
    is_int(d.classes, 10, "test split: labels 9 and 4 make 10 classes");
    is_mem(d.images, t10k_images, sizeof t10k_images, "test split: the images");
    ok(labels_match(d.labels, t10k_labels, sizeof t10k_labels), "test split: the labels");
  }
  dlrt_dataset_free(&d);
}

/* ---------------------------------------------------------------- bad files */

static void test_bad_files(void) {
  dlrt_dataset d;
  char im[PATH_CAP], lb[PATH_CAP]; /* copied: tmp_path's buffers are reused */
  snprintf(im, sizeof im, "%s", tmp_path("im"));
  snprintf(lb, sizeof lb, "%s", tmp_path("lb"));

#define BAD_IMAGES(rel, want, hint, what)                                                   \
  do {                                                                                     \
    scribble(&d);                                                                          \
    refused(dlrt_dataset_load_idx(tmp_path(rel), lb, &d), &d, want, tmp_path(rel), hint,    \
            what);                                                                         \
  } while (0)

  BAD_IMAGES("nonexistent", DLRT_ERR_NOT_FOUND, "no such file", "missing images file");
  scribble(&d);
  refused(dlrt_dataset_load_idx(im, tmp_path("nonexistent"), &d), &d, DLRT_ERR_NOT_FOUND,
          tmp_path("nonexistent"), "no such file", "missing labels file");
  make_dir("a-folder");
  BAD_IMAGES("a-folder", DLRT_ERR_IO, "is a folder", "a folder as the images file");

  write_blob("unreadable", images_blob(N, ROWS, COLS, small_images), 0);
  chmod(tmp_path("unreadable"), 0);
  if (geteuid() == 0)
    skip(3, "running as root: every file is readable");
  else
    BAD_IMAGES("unreadable", DLRT_ERR_IO, "cannot open", "an unreadable file");

  write_blob("magic", idx_blob(0x12345678, 3, (uint32_t[]){N, ROWS, COLS}, small_images,
                               sizeof small_images, 0), 0);
  BAD_IMAGES("magic", DLRT_ERR_IO, "0x12345678", "wrong magic");
  ok(strstr(dlrt_last_error(), "0x00000803") && strstr(dlrt_last_error(), "IDX images file?"),
     "wrong magic: the message gives the expected magic and asks: %s", dlrt_last_error());
  write_blob("magic.gz", idx_blob(0xcafebabe, 3, (uint32_t[]){N, ROWS, COLS}, small_images,
                                  sizeof small_images, 0), 1);
  BAD_IMAGES("magic.gz", DLRT_ERR_IO, "0xcafebabe", "wrong magic, gzip");
  blob once = read_raw("im.gz");
  write_file("twice.gz", once.bytes, once.len, 1);
  free(once.bytes);
  BAD_IMAGES("twice.gz", DLRT_ERR_IO, "compressed twice", "a file gzipped twice");
  BAD_IMAGES("lb", DLRT_ERR_IO, "swapped", "a labels file given as images");
  scribble(&d);
  refused(dlrt_dataset_load_idx(im, im, &d), &d, DLRT_ERR_IO, im, "swapped",
          "an images file given as labels");

  write_file("empty", "", 0, 0);
  BAD_IMAGES("empty", DLRT_ERR_IO, "truncated", "an empty file");
  write_file("empty.gz", "", 0, 1);
  BAD_IMAGES("empty.gz", DLRT_ERR_IO, "truncated", "an empty gzip file");
  write_blob("short-header", idx_blob(0x00000803, 2, (uint32_t[]){N, ROWS}, NULL, 0, 0), 0);
  BAD_IMAGES("short-header", DLRT_ERR_IO, "expected 16 bytes of IDX header, got 12",
             "a header cut short");

  write_blob("zero-dim", idx_blob(0x00000803, 3, (uint32_t[]){N, 0, COLS}, NULL, 0, 0), 0);
  BAD_IMAGES("zero-dim", DLRT_ERR_IO, "implausible", "a zero dimension");
  write_blob("huge", idx_blob(0x00000803, 3, (uint32_t[]){60000, 28000, 28000}, small_images,
                              sizeof small_images, 0), 0);
  BAD_IMAGES("huge", DLRT_ERR_IO, "implausible", "dimensions past 2^31 bytes");
  write_blob("overflow", idx_blob(0x00000803, 3, (uint32_t[]){~0u, ~0u, ~0u}, NULL, 0, 0), 0);
  BAD_IMAGES("overflow", DLRT_ERR_IO, "implausible", "dimensions whose product overflows");
  /* Exactly 2^31 bytes is allowed; these are just not there. */
  write_blob("at-limit",
             idx_blob(0x00000803, 3, (uint32_t[]){2, 1u << 15, 1u << 15}, small_images, 10, 0), 0);
  BAD_IMAGES("at-limit", DLRT_ERR_IO, "expected 2147483648 bytes",
             "2^31 bytes announced, 10 present");

  const uint32_t dims[3] = {N, ROWS, COLS};
  write_blob("short-data", idx_blob(0x00000803, 3, dims, small_images, 50, 0), 0);
  BAD_IMAGES("short-data", DLRT_ERR_IO, "expected 60 bytes of data after the header, got 50",
             "data cut short");
  write_blob("short-data.gz", idx_blob(0x00000803, 3, dims, small_images, 50, 0), 1);
  BAD_IMAGES("short-data.gz", DLRT_ERR_IO, "got 50", "data cut short, gzip");
  write_blob("extra", idx_blob(0x00000803, 3, dims, small_images, sizeof small_images, 3), 0);
  BAD_IMAGES("extra", DLRT_ERR_IO, "3 extra bytes", "bytes after the data");
  write_blob("extra.gz", idx_blob(0x00000803, 3, dims, small_images, sizeof small_images,
                                  70000), 1);
  BAD_IMAGES("extra.gz", DLRT_ERR_IO, "70000 extra bytes", "bytes after the data, gzip");

  write_blob("lb4", labels_blob(N - 1, small_labels), 0);
  scribble(&d);
  refused(dlrt_dataset_load_idx(im, tmp_path("lb4"), &d), &d, DLRT_ERR_IO, im,
          "5 images", "image count != label count");
  ok(strstr(dlrt_last_error(), tmp_path("lb4")) && strstr(dlrt_last_error(), "4 labels"),
     "image count != label count: the message names the labels file too");

  /* gzip damage, on a file large enough that deflate leaves most of it. */
  enum { BIG = 100 * 28 * 28 };
  static uint8_t big[BIG];
  fill_pattern(big, sizeof big, 5);
  write_blob("big.gz", images_blob(100, 28, 28, big), 1);
  blob z = read_raw("big.gz");
  write_file("cut.gz", z.bytes, z.len / 2, 0);
  BAD_IMAGES("cut.gz", DLRT_ERR_IO, "truncated", "a gzip file cut in half");
  ok(strstr(dlrt_last_error(), "unexpected end of file") != NULL,
     "cut gzip: zlib's reason is passed on: %s", dlrt_last_error());
  write_file("cut-trailer.gz", z.bytes, z.len - 4, 0);
  BAD_IMAGES("cut-trailer.gz", DLRT_ERR_IO, "gzip", "a gzip file cut inside its trailer");
  z.bytes[z.len / 2] ^= 0x55;
  write_file("flipped.gz", z.bytes, z.len, 0);
  BAD_IMAGES("flipped.gz", DLRT_ERR_IO, NULL, "a gzip file with a flipped byte");
  free(z.bytes);
#undef BAD_IMAGES

  /* Folders. */
  make_dir("empty-set");
  scribble(&d);
  refused(dlrt_dataset_load(tmp_path("empty-set"), 0, &d), &d, DLRT_ERR_NOT_FOUND,
          tmp_path("empty-set/train-images-idx3-ubyte.gz"), "pass a folder",
          "a folder without the files");
  scribble(&d);
  refused(dlrt_dataset_load(tmp_path("no-such-set"), 1, &d), &d, DLRT_ERR_NOT_FOUND,
          "t10k-images-idx3-ubyte", "which does not exist", "a folder that does not exist");
  make_dir("half-set");
  write_blob("half-set/train-images-idx3-ubyte", images_blob(N, ROWS, COLS, small_images), 0);
  scribble(&d);
  refused(dlrt_dataset_load(tmp_path("half-set"), 0, &d), &d, DLRT_ERR_NOT_FOUND,
          tmp_path("half-set/train-labels-idx1-ubyte"), "tried", "a folder without labels");
  write_blob("half-set/train-labels-idx1-ubyte.gz", labels_blob(N - 2, small_labels), 1);
  scribble(&d);
  refused(dlrt_dataset_load(tmp_path("half-set"), 0, &d), &d, DLRT_ERR_IO,
          tmp_path("half-set/train-labels-idx1-ubyte.gz"), "3 labels",
          "a folder whose files disagree");

  /* Arguments. */
  scribble(&d);
  is_status(dlrt_dataset_load(NULL, 0, &d), DLRT_ERR_INVALID_ARG, "load: NULL where");
  ok(is_zeroed(&d), "load: NULL where leaves the data set zeroed");
  is_status(dlrt_dataset_load(tmp_path("set"), 0, NULL), DLRT_ERR_INVALID_ARG, "load: NULL out");
  is_status(dlrt_dataset_load_idx(NULL, lb, &d), DLRT_ERR_INVALID_ARG, "load_idx: NULL images");
  is_status(dlrt_dataset_load_idx(im, NULL, &d), DLRT_ERR_INVALID_ARG, "load_idx: NULL labels");
  is_status(dlrt_dataset_load_idx(im, lb, NULL), DLRT_ERR_INVALID_ARG, "load_idx: NULL out");
}

/* ---------------------------------------------------------------- generated */

/* Nearest class mean, fitted on `train`, scored on `test`: a weak learner,
 * so what it learns an MLP learns too. */
static double centroid_accuracy(const dlrt_dataset *train, const dlrt_dataset *test) {
  const size_t px = (size_t)(train->height * train->width);
  double *mean = calloc((size_t)train->classes * px, sizeof *mean);
  int64_t *seen = calloc((size_t)train->classes, sizeof *seen);
  if (!mean || !seen) bail_out("out of memory");
  for (int64_t i = 0; i < train->count; i++) {
    int c = train->labels[i];
    seen[c]++;
    for (size_t k = 0; k < px; k++) mean[c * px + k] += train->images[i * px + k];
  }
  for (int c = 0; c < train->classes; c++)
    for (size_t k = 0; k < px; k++) mean[c * px + k] /= (double)(seen[c] ? seen[c] : 1);
  int64_t right = 0;
  for (int64_t i = 0; i < test->count; i++) {
    int best = -1;
    double best_d = 0;
    for (int c = 0; c < train->classes; c++) {
      double dist = 0;
      for (size_t k = 0; k < px; k++) {
        double e = test->images[i * px + k] - mean[c * px + k];
        dist += e * e;
      }
      if (best < 0 || dist < best_d) {
        best = c;
        best_d = dist;
      }
    }
    right += best == test->labels[i];
  }
  free(mean);
  free(seen);
  return (double)right / (double)test->count;
}

static void expect_balanced(const dlrt_dataset *d, const char *what) {
  int64_t seen[256] = {0};
  int out_of_range = 0;
  for (int64_t i = 0; i < d->count; i++) {
    if (d->labels[i] >= d->classes) out_of_range++;
    seen[d->labels[i]]++;
  }
  int64_t lo = d->count / d->classes, hi = lo + (d->count % d->classes != 0);
  int balanced = 1;
  for (int c = 0; c < d->classes; c++)
    if (seen[c] < lo || seen[c] > hi) balanced = 0;
  is_int(out_of_range, 0, "%s: every label below %d", what, d->classes);
  ok(balanced, "%s: each class %lld or %lld times", what, (long long)lo, (long long)hi);
}

static void test_generate(void) {
  dlrt_dataset a, b, c;
  scribble(&a);
  if (!tap_check(dlrt_dataset_generate(1000, 10, 42, &a), "generate 1000 in 10 classes"))
    return;
  ok(a.count == 1000 && a.height == 28 && a.width == 28, "generated: 1000 x 28 x 28");
  is_int(a.classes, 10, "generated: 10 classes");
  is_str(a.source, "generated", "generated: source");
  expect_balanced(&a, "generated");
  uint8_t lo = 255, hi = 0;
  for (size_t i = 0; i < 1000 * 28 * 28; i++) {
    if (a.images[i] < lo) lo = a.images[i];
    if (a.images[i] > hi) hi = a.images[i];
  }
  ok(lo == 0 && hi >= 150, "generated: pixels span %u..%u", lo, hi);

  scribble(&b);
  if (tap_check(dlrt_dataset_generate(1000, 10, 42, &b), "the same seed again")) {
    is_mem(b.images, a.images, 1000 * 28 * 28, "the same seed: the same images");
    is_mem(b.labels, a.labels, 1000 * sizeof *a.labels, "the same seed: the same labels");
  }
  scribble(&c);
  if (tap_check(dlrt_dataset_generate(1000, 10, 43, &c), "another seed")) {
    ok(memcmp(c.images, a.images, 1000 * 28 * 28) != 0, "another seed: other images");
    ok(memcmp(c.labels, a.labels, 1000 * sizeof *a.labels) != 0, "another seed: another order");
    /* Classes must mean the same thing under every seed. */
    double acc = centroid_accuracy(&a, &c);
    ok(acc > 0.9, "learnable: nearest class mean fitted on seed 42 scores %.3f on seed 43",
       acc);
  }
  dlrt_dataset_free(&a);
  dlrt_dataset_free(&b);
  dlrt_dataset_free(&c);

  if (tap_check(dlrt_dataset_generate(1003, 7, 1, &a), "generate 1003 in 7 classes"))
    expect_balanced(&a, "1003 in 7");
  dlrt_dataset_free(&a);
  if (tap_check(dlrt_dataset_generate(2 * 255, 255, 1, &a), "generate 510 in 255 classes"))
    expect_balanced(&a, "510 in 255");
  dlrt_dataset_free(&a);
  if (tap_check(dlrt_dataset_generate(2, 2, 0, &a), "generate the smallest set")) {
    ok(a.labels[0] != a.labels[1], "the smallest set: one of each class");
  }
  dlrt_dataset_free(&a);

  static const struct {
    int64_t count;
    int classes;
    const char *what;
  } bad[] = {
      {0, 10, "count 0"},        {-5, 10, "count -5"},     {5, 10, "fewer samples than classes"},
      {100, 1, "one class"},     {100, 0, "no classes"},   {1000, 256, "256 classes"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    scribble(&a);
    refused(dlrt_dataset_generate(bad[i].count, bad[i].classes, 1, &a), &a,
            DLRT_ERR_INVALID_ARG, "dlrt_dataset_generate", NULL, bad[i].what);
  }
  is_status(dlrt_dataset_generate(100, 10, 1, NULL), DLRT_ERR_INVALID_ARG, "generate: NULL out");
}

static void test_free(void) {
  dlrt_dataset_free(NULL);
  ok(1, "dlrt_dataset_free(NULL) is a no-op");
  dlrt_dataset d;
  if (tap_check(dlrt_dataset_generate(10, 2, 3, &d), "generate, to free")) {
    dlrt_dataset_free(&d);
    ok(is_zeroed(&d), "free zeroes the struct");
    dlrt_dataset_free(&d);
    ok(is_zeroed(&d), "freeing a freed struct is harmless");
  }
}

/* A record file given alone holds both splits: its last tenth is the test
 * split (it used to have none, and dltrain --data FILE always failed). */
static void test_single_record_file(void) {
  dlrt_dataset all;
  if (!tap_check(dlrt_dataset_generate(25, 3, 9, &all), "generate 25 samples to save"))
    return;
  const char *path = tmp_path("alone.dlrec");
  if (!tap_check(dlrt_dataset_save_records(path, &all), "save them as one record file")) {
    dlrt_dataset_free(&all);
    return;
  }
  size_t sample =
      (size_t)(all.channels * all.height * all.width) * dlrt_dtype_size(all.image_dtype);
  for (int mapped = 0; mapped < 2; mapped++) {
    const char *how = mapped ? "mapped" : "read";
    int flags = mapped ? DLRT_DATASET_MMAP : 0;
    dlrt_dataset train, test;
    int rc = dlrt_dataset_load_flags(path, 0, flags, &train);
    if (tap_check(rc, "%s: a record file alone loads its training split", how)) {
      ok(train.count == 23 && memcmp(train.images, all.images, 23 * sample) == 0 &&
             memcmp(train.labels, all.labels, 23 * sizeof *all.labels) == 0,
         "%s: the training split is the first 23 of 25 records (%lld)", how,
         (long long)train.count);
      dlrt_dataset_free(&train);
    }
    rc = dlrt_dataset_load_flags(path, 1, flags, &test);
    if (tap_check(rc, "%s: and its test split", how)) {
      ok(test.count == 2 && memcmp(test.images, all.images + 23 * sample, 2 * sample) == 0 &&
             memcmp(test.labels, all.labels + 23, 2 * sizeof *all.labels) == 0 &&
             test.classes == all.classes,
         "%s: the test split is the last tenth, 2 records (%lld)", how, (long long)test.count);
      dlrt_dataset_free(&test);
    }
  }
  dlrt_dataset one = all;
  one.count = 1;
  const char *path1 = tmp_path("one.dlrec");
  dlrt_dataset d;
  if (tap_check(dlrt_dataset_save_records(path1, &one), "save a one-record file"))
    refused(dlrt_dataset_load(path1, 1, &d), &d, DLRT_ERR_IO, "one.dlrec", "two or more",
            "a one-record file has no test split to hold out");
  dlrt_dataset_free(&all);
}

int main(void) {
  tap_tempdir("dlrt-dataset", root, sizeof root);
  diag("files in %s", root);

  test_fashion_mnist();
  test_small_files();
  test_bad_files();
  test_generate();
  test_single_record_file();
  test_free();

  tap_remove_tree(root);
  dlrt_shutdown();
  return done_testing();
}
