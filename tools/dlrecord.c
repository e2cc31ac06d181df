/* dlrecord — writes and inspects dlrt record files (.dlrec), the fixed-size
 * format dltrain's loader reads (and maps, for sets larger than memory).
 * Public API only. Exit status: 0 success, 1 a dlrt call failed (unreadable
 * or corrupt input, a write that failed), 2 usage error. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlrt.h"
#include "dlrecord.h"

const char tool_name[] = "dlrecord";

static int save(const dlrt_dataset *d, const char *path) {
  int rc = dlrt_dataset_save_records(path, d);
  if (rc < 0) return tool_fail("cannot write", rc);
  printf("wrote %s: %" PRId64 " samples of %" PRId64 " x %" PRId64 " x %" PRId64 " %s, %d "
         "classes (from %s)\n", path, d->count, d->channels, d->height, d->width,
         dlrt_dtype_name(d->image_dtype), d->classes, d->source);
  return 0;
}

static int convert(const char *source, const char *folder) {
  if (mkdir(folder, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "dlrecord: cannot create %s: %s\n", folder, strerror(errno));
    return STATUS_FAIL;
  }
  static const char *const names[2] = {"train.dlrec", "test.dlrec"};
  char paths[2][4096];
  for (int test = 0; test < 2; test++) {
    snprintf(paths[test], sizeof paths[test], "%s/%s", folder, names[test]);
    /* Both checked first: no training split written beside a test split
     * that cannot be. */
    int rc = dlrt_save_path_check(paths[test]);
    if (rc < 0) return tool_fail("cannot write", rc);
  }
  dlrt_dataset d[2] = {{0}, {0}};
  int rc, status = 0;
  if (strcmp(source, "generated") == 0) {
    if ((rc = dlrt_dataset_generate(60000, 10, 1ull, &d[0])) == DLRT_OK)
      rc = dlrt_dataset_generate(10000, 10, ~1ull, &d[1]);
  } else {
    /* Both splits, checked against each other: a pair that disagrees is
     * refused before anything is written. */
    rc = dlrt_dataset_load_splits(source, 0, d);
  }
  if (rc < 0) status = tool_fail("cannot read the data", rc);
  for (int test = 0; test < 2 && !status; test++) status = save(&d[test], paths[test]);
  dlrt_dataset_free(&d[0]);
  dlrt_dataset_free(&d[1]);
  return status;
}

/* Text (a file, or a folder's text files) into an llm.c token file of byte
 * tokens; a token file given as input is copied as it is. */
static int tokens(const char *input, const char *path) {
  int rc = dlrt_save_path_check(path);
  if (rc < 0) return tool_fail("cannot write", rc);
  dlrt_tokens t;
  if ((rc = dlrt_tokens_load(input, &t)) < 0) return tool_fail("cannot read", rc);
  rc = dlrt_tokens_save(path, &t);
  if (rc == DLRT_OK)
    printf("wrote %s: %" PRId64 " tokens, vocabulary %d (from %d file%s of %s)\n", path,
           t.count, t.vocab, t.files, t.files == 1 ? "" : "s", input);
  dlrt_tokens_free(&t);
  return rc < 0 ? tool_fail("cannot write", rc) : 0;
}

/* An llm.c token file: its count and vocabulary. */
static int token_info(const char *path) {
  dlrt_tokens t;
  int rc = dlrt_tokens_load(path, &t);
  if (rc < 0) return tool_fail("cannot read", rc);
  printf("%s: %" PRId64 " tokens (llm.c token file), vocabulary %d\n", path, t.count, t.vocab);
  dlrt_tokens_free(&t);
  return 0;
}

/* Whether path is a regular file that starts as a token file does (its
 * magic, little-endian); a record file or anything else goes to the record
 * reader, which says what is wrong. O_NONBLOCK: a FIFO must not hang here. */
static int is_token_file(const char *path) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st;
  unsigned char magic[4];
  int yes = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && read(fd, magic, 4) == 4 &&
            ((uint32_t)magic[0] | (uint32_t)magic[1] << 8 | (uint32_t)magic[2] << 16 |
             (uint32_t)magic[3] << 24) == DLRT_TOKENS_MAGIC;
  close(fd);
  return yes;
}

static int info(const char *path) {
  if (is_token_file(path)) return token_info(path);
  dlrt_dataset d;
  int rc = dlrt_dataset_open_records(path, DLRT_DATASET_MMAP, &d);
  if (rc < 0) return tool_fail("cannot read", rc);
  printf("%s: %" PRId64 " samples, %" PRId64 " x %" PRId64 " x %" PRId64 " %s, %d classes\n",
         path, d.count, d.channels, d.height, d.width, dlrt_dtype_name(d.image_dtype),
         d.classes);
  int64_t *hist = calloc((size_t)d.classes, sizeof *hist);
  if (hist) {
    for (int64_t i = 0; i < d.count; i++) hist[d.labels[i]]++;
    fputs("  labels:", stdout);
    int shown = d.classes < 20 ? d.classes : 20;
    for (int c = 0; c < shown; c++) printf(" %d:%" PRId64, c, hist[c]);
    if (shown < d.classes) printf(" ... (%d more classes)", d.classes - shown);
    putchar('\n');
    free(hist);
  }
  dlrt_dataset_free(&d);
  return 0;
}

int main(int argc, char **argv) {
  dlrecord_options o;
  int rc, status = dlrecord_parse_options(argc, argv, &o);
  if (status != 0) {
    if (status == TOOL_HELP) dlrecord_usage(stdout);
    if (status == TOOL_VERSION) dlrecord_version(stdout);
    return status < 0 ? 0 : tool_usage_fail(o.error);
  }
  /* Data sets need no device: no dlrt_init. */
  char *const *arg = o.operands;
  if (strcmp(o.command, "convert") == 0) {
    status = convert(arg[0], arg[1]);
  } else if (strcmp(o.command, "idx") == 0) {
    dlrt_dataset d;
    if ((rc = dlrt_save_path_check(arg[2])) < 0) {
      status = tool_fail("cannot write", rc);
    } else if ((rc = dlrt_dataset_load_idx(arg[0], arg[1], &d)) < 0) {
      status = tool_fail("cannot read", rc);
    } else {
      status = save(&d, arg[2]);
      dlrt_dataset_free(&d);
    }
  } else if (strcmp(o.command, "tokens") == 0) {
    status = tokens(arg[0], arg[1]);
  } else {
    for (int i = 0; i < o.n_operands; i++) status |= info(arg[i]);
  }
  dlrecord_options_free(&o);
  return status;
}
