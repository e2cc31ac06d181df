/*
 * test-input.c — hostile input to the library gives a clear error at once:
 * a FIFO with no writer (or a character device) given to every reader (IDX,
 * record, safetensors and model files, a data folder) is refused within
 * seconds, naming the path and what it is; model files with lines longer
 * than any buffer are read whole, and huge numbers in them (sizes, padding,
 * products of sizes) fail with FILE:LINE and the value, never overflowing;
 * dlrt_reshape checks its shape before multiplying it out; training and test
 * splits that disagree are found before training, naming both files and the
 * field; dlrt_trainer_check_ranks names the rank and field of a process
 * that would train apart (two ranks played in one process). Each reader
 * runs in a child process with an alarm, so a reader that
 * blocks fails its point instead of hanging the test.
 * Points: computed at run time (done_testing).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlrt.h"
#include "tap.h"

#define PATH_CAP 4096
/* Seconds a reader may take before it counts as blocked. */
#define BLOCK_LIMIT_S 10

static char root[PATH_CAP / 2];

static const char *tmp_path(const char *rel) { return tap_join(root, rel); }

/* What a call returned: its status and dlrt_last_error(), or that it did
 * not return within BLOCK_LIMIT_S. */
typedef struct {
  int blocked;
  int status;
  char message[1024];
} outcome;

typedef int call_fn(const char *path);

/* Runs fn(path) in a child process that an alarm ends when it blocks. */
static outcome run_child(call_fn *fn, const char *path) {
  outcome o = {0};
  int fds[2];
  if (pipe(fds) != 0) bail_out("pipe: %s", strerror(errno));
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) bail_out("fork: %s", strerror(errno));
  if (pid == 0) {
    close(fds[0]);
    alarm(BLOCK_LIMIT_S);
    outcome mine = {0};
    mine.status = fn(path);
    snprintf(mine.message, sizeof mine.message, "%s", dlrt_last_error());
    ssize_t put = write(fds[1], &mine, sizeof mine);
    _exit(put == (ssize_t)sizeof mine ? 0 : 1);
  }
  close(fds[1]);
  ssize_t got = read(fds[0], &o, sizeof o);
  close(fds[0]);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  if (got != (ssize_t)sizeof o) {
    memset(&o, 0, sizeof o);
    o.blocked = WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGALRM;
    snprintf(o.message, sizeof o.message, "the child %s", o.blocked ? "blocked" : "died");
    o.status = 1;
  }
  return o;
}

/* ---------------------------------------------------------------- readers */

static int open_records(const char *path) {
  dlrt_dataset d;
  int rc = dlrt_dataset_open_records(path, 0, &d);
  dlrt_dataset_free(&d);
  return rc;
}

static int open_records_mapped(const char *path) {
  dlrt_dataset d;
  int rc = dlrt_dataset_open_records(path, DLRT_DATASET_MMAP, &d);
  dlrt_dataset_free(&d);
  return rc;
}

static int load_idx_images(const char *path) {
  dlrt_dataset d;
  int rc = dlrt_dataset_load_idx(path, tmp_path("labels-idx1-ubyte"), &d);
  dlrt_dataset_free(&d);
  return rc;
}

static int load_idx_labels(const char *path) {
  dlrt_dataset d;
  int rc = dlrt_dataset_load_idx(tmp_path("images-idx3-ubyte"), path, &d);
  dlrt_dataset_free(&d);
  return rc;
}

static int load_folder(const char *path) {
  dlrt_dataset d;
  int rc = dlrt_dataset_load(path, 0, &d);
  dlrt_dataset_free(&d);
  return rc;
}

static int load_safetensors(const char *path) {
  dlrt_host_tensor *t;
  int n;
  char **meta;
  int rc = dlrt_safetensors_load(path, &t, &n, &meta);
  if (rc == DLRT_OK) dlrt_safetensors_free(t, n, meta);
  return rc;
}

/* Builds `spec` on a 1 x 28 x 28 input with 10 classes. */
static int build_model(const char *spec) {
  dlrt_graph_t *g;
  int rc = dlrt_graph_create(&g);
  if (rc < 0) return rc;
  int64_t shape[4] = {4, 1, 28, 28};
  dlrt_tensor_t *x = dlrt_input(g, "images", DLRT_F32, 4, shape), *logits = NULL;
  rc = x ? dlrt_model_build(g, spec, x, 10, &logits) : dlrt_graph_status(g);
  dlrt_graph_destroy(g);
  return rc;
}

static void check_refused(const char *what, call_fn *fn, const char *path, const char *kind) {
  outcome o = run_child(fn, path);
  if (!ok(!o.blocked, "%s given %s returns at once (within %d s)", what, kind, BLOCK_LIMIT_S))
    return;
  is_status(o.status, DLRT_ERR_IO, "%s given %s fails with DLRT_ERR_IO", what, kind);
  const char *name = strcmp(kind, "a FIFO") == 0 ? "FIFO" : "character device";
  ok(strstr(o.message, path) && strstr(o.message, name),
     "%s: the message names the path and says it is %s: %s", what, kind, o.message);
}

/* Minimal valid IDX files of 2 images of 2 x 2, and their labels. */
static void write_idx_pair(void) {
  static const unsigned char images[] = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2,
                                         1, 2, 3, 4, 5, 6, 7, 8};
  static const unsigned char labels[] = {0, 0, 8, 1, 0, 0, 0, 2, 0, 1};
  FILE *f = fopen(tmp_path("images-idx3-ubyte"), "wb");
  if (!f || fwrite(images, 1, sizeof images, f) != sizeof images || fclose(f) != 0)
    bail_out("cannot write the IDX images");
  f = fopen(tmp_path("labels-idx1-ubyte"), "wb");
  if (!f || fwrite(labels, 1, sizeof labels, f) != sizeof labels || fclose(f) != 0)
    bail_out("cannot write the IDX labels");
}

static void test_fifos(void) {
  const char *fifo = tmp_path("fifo");
  if (mkfifo(fifo, 0600) != 0) bail_out("mkfifo %s: %s", fifo, strerror(errno));
  write_idx_pair();
  /* A data folder whose train.dlrec is a FIFO. */
  const char *folder = tmp_path("fifo-folder");
  if (mkdir(folder, 0700) != 0) bail_out("mkdir %s: %s", folder, strerror(errno));
  char records[PATH_CAP];
  snprintf(records, sizeof records, "%s/train.dlrec", folder);
  if (mkfifo(records, 0600) != 0) bail_out("mkfifo %s: %s", records, strerror(errno));

  check_refused("dlrt_dataset_open_records", open_records, fifo, "a FIFO");
  check_refused("dlrt_dataset_open_records (mapped)", open_records_mapped, fifo, "a FIFO");
  check_refused("dlrt_dataset_load_idx (images)", load_idx_images, fifo, "a FIFO");
  check_refused("dlrt_dataset_load_idx (labels)", load_idx_labels, fifo, "a FIFO");
  check_refused("dlrt_safetensors_load", load_safetensors, fifo, "a FIFO");
  check_refused("dlrt_model_build", build_model, fifo, "a FIFO");
  outcome o = run_child(load_folder, folder);
  if (ok(!o.blocked, "dlrt_dataset_load of a folder whose train.dlrec is a FIFO returns"))
    ok(o.status == DLRT_ERR_IO && strstr(o.message, records) && strstr(o.message, "FIFO"),
       "... and names the FIFO: %s", o.message);
  if (access("/dev/null", R_OK) == 0) {
    check_refused("dlrt_dataset_open_records", open_records, "/dev/null", "a character device");
    check_refused("dlrt_model_build", build_model, "/dev/null", "a character device");
  } else {
    skip(6, "no readable /dev/null");
  }
  /* The regular files beside them still load. */
  o = run_child(load_idx_images, tmp_path("images-idx3-ubyte"));
  is_status(o.status, DLRT_OK, "regular IDX files still load: %s", o.message);
}

/* ---------------------------------------------------------------- models */

/* The model file `text` builds (DLRT_OK), or fails with a message that
 * holds each of the NULL-terminated `want` strings. */
static void check_model(const char *text, int want_status, const char *const *want,
                        const char *what) {
  const char *path = tmp_path("m.model");
  tap_write_text(path, text);
  outcome o = run_child(build_model, path);
  int all = !o.blocked && o.status == want_status;
  for (int i = 0; all && want && want[i]; i++) all = strstr(o.message, want[i]) != NULL;
  ok(all, "%s: %s %s", what, dlrt_err_name(o.status), o.message);
}

static void test_model_files(void) {
  /* A comment longer than any line buffer: nothing of it becomes a layer. */
  size_t long_len = 100000;
  char *text = malloc(long_len + 64);
  if (!text) bail_out("out of memory");
  strcpy(text, "# ");
  memset(text + 2, 'x', long_len);
  strcpy(text + 2 + long_len, " linear 7\nrelu\n");
  check_model(text, DLRT_OK, NULL, "a 100000-character comment is skipped whole");
  /* A layer followed by 100000 blanks and a comment. */
  strcpy(text, "linear 16");
  memset(text + 9, ' ', long_len);
  strcpy(text + 9 + long_len, "# fc1\nrelu\n");
  check_model(text, DLRT_OK, NULL, "a layer padded to 100000 characters builds");
  free(text);

  const char *const conv_kernel[] = {"m.model:2:", "1073741824", "weight", NULL};
  check_model("relu\nconv2d 16 1073741824\n", DLRT_ERR_INVALID_ARG, conv_kernel,
              "conv2d 16 1073741824 (a weight of 2^64 elements) names FILE:LINE and the value");
  const char *const conv_pad[] = {"m.model:1:", "1073741824", "padding", NULL};
  check_model("conv2d 16 3 pad=1073741824\n", DLRT_ERR_INVALID_ARG, conv_pad,
              "pad=1073741824 (an output of 2^62 pixels) names FILE:LINE and the value");
  const char *const too_large[] = {"m.model:1:", "pad=99999999999", "too large", NULL};
  check_model("conv2d 16 3 pad=99999999999\n", DLRT_ERR_INVALID_ARG, too_large,
              "pad=99999999999 is refused as too large, with FILE:LINE");
  const char *const too_long[] = {"m.model:1:", "99999999999999999999999", NULL};
  check_model("linear 99999999999999999999999\n", DLRT_ERR_INVALID_ARG, too_long,
              "a size past long's range is refused naming it");
  const char *const linear_product[] = {"m.model:3:", "1073741824 x 1073741824", NULL};
  check_model("flatten\nlinear 1073741824\nlinear 1073741824\n", DLRT_ERR_INVALID_ARG,
              linear_product, "two linear 1073741824 (a weight of 2^60) name FILE:LINE");
  const char *const dilation[] = {"m.model:1:", NULL};
  check_model("conv2d 4 3 dilation=1073741824\n", DLRT_ERR_INVALID_ARG, dilation,
              "dilation=1073741824 fails with FILE:LINE");
  const char *const words[] = {"m.model:1:", "too many arguments", "pad=7", NULL};
  check_model("conv2d 8 3 pad=1 stride=1 dilation=1 stride=1 stride=1 pad=7\n",
              DLRT_ERR_INVALID_ARG, words, "a ninth word is refused, not dropped");
  const char *const negative[] = {"m.model:1:", "-3", NULL};
  check_model("linear -3\n", DLRT_ERR_INVALID_ARG, negative, "linear -3 names the value");
}

/* ---------------------------------------------------------------- shapes */

static void test_reshape(void) {
  dlrt_graph_t *g;
  if (dlrt_graph_create(&g) < 0) bail_out("%s", dlrt_last_error());
  int64_t four[1] = {4};
  dlrt_tensor_t *x = dlrt_input(g, "x", DLRT_F32, 1, four);
  /* (2^62 + 1) x 4 wraps to 4 in 64 bits. */
  int64_t wraps[2] = {((int64_t)1 << 62) + 1, 4};
  ok(dlrt_reshape(g, x, 2, wraps) == NULL && dlrt_graph_status(g) == DLRT_ERR_INVALID_ARG &&
         strstr(dlrt_last_error(), "another number of elements"),
     "reshape to (2^62 + 1) x 4 (4 elements modulo 2^64) is refused: %s", dlrt_last_error());
  dlrt_graph_destroy(g);
  if (dlrt_graph_create(&g) < 0) bail_out("%s", dlrt_last_error());
  x = dlrt_input(g, "x", DLRT_F32, 1, four);
  int64_t many[DLRT_MAX_DIMS] = {1, 1, 1, 1, 1, 1, 1, 4};
  ok(dlrt_reshape(g, x, 1000, many) == NULL && dlrt_graph_status(g) == DLRT_ERR_INVALID_ARG,
     "reshape with 1000 dimensions is refused before its shape is read: %s",
     dlrt_last_error());
  dlrt_graph_destroy(g);
}

/* ---------------------------------------------------------------- splits */

/* A record file of `count` images of 1 x side x side and labels 0..classes-1. */
static void write_records(const char *path, int64_t side, int classes) {
  enum { COUNT = 4 };
  dlrt_dataset d = {.count = COUNT, .channels = 1, .height = side, .width = side,
                    .classes = classes, .image_dtype = DLRT_U8};
  d.images = calloc((size_t)(COUNT * side * side), 1);
  d.labels = calloc(COUNT, sizeof *d.labels);
  if (!d.images || !d.labels) bail_out("out of memory");
  for (int i = 0; i < COUNT; i++) d.labels[i] = (int32_t)(i * (classes - 1) / (COUNT - 1));
  if (dlrt_dataset_save_records(path, &d) < 0) bail_out("%s", dlrt_last_error());
  free(d.images);
  free(d.labels);
}

/* An IDX pair in `folder` (prefix "train" or "t10k") of 2 images of side x side. */
static void write_idx_split(const char *folder, const char *prefix, unsigned char side) {
  unsigned char images[16 + 2 * 16] = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, side, 0, 0, 0, side};
  static const unsigned char labels[] = {0, 0, 8, 1, 0, 0, 0, 2, 0, 1};
  char path[PATH_CAP];
  snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte", folder, prefix);
  FILE *f = fopen(path, "wb");
  size_t n = 16 + 2 * (size_t)side * side;
  if (!f || fwrite(images, 1, n, f) != n || fclose(f) != 0) bail_out("cannot write %s", path);
  snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte", folder, prefix);
  f = fopen(path, "wb");
  if (!f || fwrite(labels, 1, sizeof labels, f) != sizeof labels || fclose(f) != 0)
    bail_out("cannot write %s", path);
}

static void check_splits(const char *folder, const char *const *want, const char *what) {
  dlrt_dataset d[2];
  int rc = dlrt_dataset_load_splits(folder, 0, d);
  int all = rc == DLRT_ERR_INVALID_ARG && !d[0].images && !d[1].images;
  for (int i = 0; all && want[i]; i++) all = strstr(dlrt_last_error(), want[i]) != NULL;
  ok(all, "%s: %s %s", what, dlrt_err_name(rc), dlrt_last_error());
  dlrt_dataset_free(&d[0]);
  dlrt_dataset_free(&d[1]);
}

static void test_splits(void) {
  char folder[PATH_CAP / 2], train[PATH_CAP], test[PATH_CAP];
  snprintf(folder, sizeof folder, "%s", tmp_path("splits"));
  if (mkdir(folder, 0700) != 0) bail_out("mkdir %s: %s", folder, strerror(errno));
  snprintf(train, sizeof train, "%s/train.dlrec", folder);
  snprintf(test, sizeof test, "%s/test.dlrec", folder);

  write_records(train, 4, 10);
  write_records(test, 4, 10);
  dlrt_dataset d[2];
  if (tap_check(dlrt_dataset_load_splits(folder, 0, d), "agreeing record splits load"))
    tap_check(dlrt_dataset_check_splits(&d[0], &d[1]), "... and agree");
  dlrt_dataset_free(&d[0]);
  dlrt_dataset_free(&d[1]);
  write_records(test, 4, 7);
  if (tap_check(dlrt_dataset_load_splits(folder, 0, d),
                "a test split with fewer classes (a subset) still loads"))
    dlrt_dataset_free(&d[0]), dlrt_dataset_free(&d[1]);

  write_records(test, 5, 10);
  const char *const size[] = {train, test, "height 4 vs 5", "width 4 vs 5", NULL};
  check_splits(folder, size, "record splits of 4 x 4 and 5 x 5 images are refused, naming both "
               "files and the fields");
  write_records(test, 4, 12);
  const char *const classes[] = {train, test, "classes 10 vs 12", NULL};
  check_splits(folder, classes, "a test split with more classes is refused");
  if (dlrt_dataset_open_records(train, 0, &d[0]) == DLRT_OK &&
      dlrt_dataset_open_records(test, 0, &d[1]) == DLRT_OK) {
    is_status(dlrt_dataset_check_splits(&d[0], &d[1]), DLRT_ERR_INVALID_ARG,
              "dlrt_dataset_check_splits refuses them too: %s", dlrt_last_error());
  } else {
    ok(0, "the record files open: %s", dlrt_last_error());
  }
  dlrt_dataset_free(&d[0]);
  dlrt_dataset_free(&d[1]);

  /* IDX files: the message names the image files of both splits. */
  snprintf(folder, sizeof folder, "%s", tmp_path("idx-splits"));
  if (mkdir(folder, 0700) != 0) bail_out("mkdir %s: %s", folder, strerror(errno));
  write_idx_split(folder, "train", 2);
  write_idx_split(folder, "t10k", 3);
  const char *const idx[] = {"train-images-idx3-ubyte", "t10k-images-idx3-ubyte",
                             "height 2 vs 3", NULL};
  check_splits(folder, idx, "IDX splits of 2 x 2 and 3 x 3 images are refused, naming both");
}

/* ---------------------------------------------------------------- ranks */

/* An all-gather of two ranks played in one process: `recorded` keeps what
 * the other rank contributed; this rank's own goes at `rank`. */
typedef struct {
  int rank;
  unsigned char recorded[4096];
  size_t bytes;
} fake_gather;

static int record_gather(void *user, const void *mine, void *all, size_t bytes) {
  fake_gather *g = user;
  if (bytes > sizeof g->recorded) return DLRT_ERR_INVALID_ARG;
  memcpy(g->recorded, mine, bytes);
  g->bytes = bytes;
  memcpy(all, mine, bytes); /* both "ranks" the same: no verdict here */
  memcpy((char *)all + bytes, mine, bytes);
  return 0;
}

static int replay_gather(void *user, const void *mine, void *all, size_t bytes) {
  fake_gather *g = user;
  if (bytes != g->bytes) return DLRT_ERR_INVALID_ARG;
  memcpy((char *)all + (size_t)g->rank * bytes, mine, bytes);
  memcpy((char *)all + (size_t)(1 - g->rank) * bytes, g->recorded, bytes);
  return 0;
}

/* Rank 0 with `base`, rank 1 with `other`: check_ranks on rank 0 with rank
 * 1's fingerprint; DLRT_OK or the verdict. */
static int two_ranks(dlrt_device_t *dev, const dlrt_dataset *d, dlrt_trainer_config base,
                     dlrt_trainer_config other) {
  dlrt_trainer_t *t0 = NULL, *t1 = NULL;
  base.rank = 0, base.world = 2, other.rank = 1, other.world = 2;
  fake_gather g = {.rank = 0};
  int rc = dlrt_trainer_create(dev, &base, d->height, d->width, d->classes, &t0);
  if (rc == DLRT_OK) rc = dlrt_trainer_create(dev, &other, d->height, d->width, d->classes, &t1);
  if (rc == DLRT_OK) rc = dlrt_trainer_check_ranks(t1, d, record_gather, &g);
  if (rc == DLRT_OK) rc = dlrt_trainer_check_ranks(t0, d, replay_gather, &g);
  dlrt_trainer_destroy(t0);
  dlrt_trainer_destroy(t1);
  return rc;
}

static void test_ranks(void) {
  dlrt_device_t *dev;
  dlrt_dataset d;
  if (dlrt_device_open("cpu", &dev) < 0 || dlrt_dataset_generate(256, 10, 1, &d) < 0)
    bail_out("%s", dlrt_last_error());
  dlrt_trainer_config c = {.model = "mlp", .batch = 32,
                           .opt = dlrt_optimizer_defaults(DLRT_OPT_SGD), .seed = 1};
  tap_check(two_ranks(dev, &d, c, c), "two ranks of the same configuration agree");
  dlrt_trainer_config other = c;
  other.seed = 2;
  ok(two_ranks(dev, &d, c, other) == DLRT_ERR_INVALID_ARG &&
         strstr(dlrt_last_error(), "rank 1") && strstr(dlrt_last_error(), "seed") &&
         strstr(dlrt_last_error(), "is 2, rank 0's 1"),
     "a rank with seed 2 is named, with the field and both values: %s", dlrt_last_error());
  other = c;
  other.opt.lr = 0.5f;
  ok(two_ranks(dev, &d, c, other) == DLRT_ERR_INVALID_ARG &&
         strstr(dlrt_last_error(), "learning rate"),
     "a rank with another learning rate is named: %s", dlrt_last_error());
  other = c;
  other.model = "cnn";
  ok(two_ranks(dev, &d, c, other) == DLRT_ERR_INVALID_ARG && strstr(dlrt_last_error(), "model"),
     "a rank with another model is named: %s", dlrt_last_error());
  other = c;
  other.total_steps = 100; /* --epochs: compared only by a cosine schedule */
  tap_check(two_ranks(dev, &d, c, other), "another number of epochs (constant schedule) passes");
  dlrt_dataset_free(&d);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  tap_tempdir("dlrt-input-test", root, sizeof root);
  test_fifos();
  test_model_files();
  test_reshape();
  test_splits();
  test_ranks();
  dlrt_shutdown();
  tap_remove_tree(root);
  return done_testing();
}
