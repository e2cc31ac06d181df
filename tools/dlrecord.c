/* dlrecord — writes and inspects dlrt record files (.dlrec), the fixed-size
 * format dltrain's loader reads (and maps, for sets larger than memory).
 * Public API only. Exit status: 0 success, 1 a dlrt call failed (unreadable
 * or corrupt input, a write that failed), 2 usage error. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dlrt.h"
#include "tool-common.h"

const char tool_name[] = "dlrecord";

static void usage(FILE *out) {
  fputs("Usage: dlrecord convert SOURCE FOLDER\n"
        "  or:  dlrecord idx IMAGES LABELS FILE.dlrec\n"
        "  or:  dlrecord info FILE.dlrec...\n"
        "Writes and inspects dlrt record files, which dltrain --data reads.\n\n"
        "  convert SOURCE FOLDER   both splits of SOURCE (fashion-mnist, a folder of\n"
        "                          MNIST-family IDX files, or generated) into\n"
        "                          FOLDER/train.dlrec and FOLDER/test.dlrec (FOLDER is\n"
        "                          created); then: dltrain --data FOLDER\n"
        "  idx IMAGES LABELS FILE  one pair of IDX files (plain or .gz) into FILE\n"
        "  info FILE...            count, shape, dtype, classes and label histogram\n"
        "  -h, --help              show this help and exit\n\n"
        "Files are replaced atomically, and only a regular file (or a link to one);\n"
        "both targets are checked before anything is written.\n"
        "The format (a 64-byte little-endian header, the images, the labels) is\n"
        "described in dlrt.h and README, so other tools can write it too.\n",
        out);
}

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

static int info(const char *path) {
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
  if (argc >= 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
    usage(stdout);
    return 0;
  }
  const char *cmd = argc >= 2 ? argv[1] : "";
  int args = argc - 2;
  if (!((strcmp(cmd, "convert") == 0 && args == 2) || (strcmp(cmd, "idx") == 0 && args == 3) ||
        (strcmp(cmd, "info") == 0 && args >= 1))) {
    if (!*cmd)
      fputs("dlrecord: give a command: convert, idx or info\n", stderr);
    else if (strcmp(cmd, "convert") && strcmp(cmd, "idx") && strcmp(cmd, "info"))
      fprintf(stderr, "dlrecord: unknown command '%s' (convert, idx or info)\n", cmd);
    else
      fprintf(stderr, "dlrecord: %s needs %s\n", cmd,
              strcmp(cmd, "convert") == 0 ? "SOURCE FOLDER"
              : strcmp(cmd, "idx") == 0   ? "IMAGES LABELS FILE.dlrec"
                                          : "one or more files");
    usage(stderr);
    return STATUS_USAGE;
  }
  /* Data sets need no device: no dlrt_init. */
  int rc, status = 0;
  if (strcmp(cmd, "convert") == 0) {
    status = convert(argv[2], argv[3]);
  } else if (strcmp(cmd, "idx") == 0) {
    dlrt_dataset d;
    if ((rc = dlrt_save_path_check(argv[4])) < 0) {
      status = tool_fail("cannot write", rc);
    } else if ((rc = dlrt_dataset_load_idx(argv[2], argv[3], &d)) < 0) {
      status = tool_fail("cannot read", rc);
    } else {
      status = save(&d, argv[4]);
      dlrt_dataset_free(&d);
    }
  } else {
    for (int i = 2; i < argc; i++) status |= info(argv[i]);
  }
  return status;
}
