/* replay.c — main() for a harness built without libFuzzer (make check): runs
 * LLVMFuzzerTestOneInput once on each file named, or on each file of each
 * folder named (in name order), and prints "# ok FILE" for each. A finding
 * aborts (fuzz_fail, or a sanitizer of an --enable-sanitizers build); an
 * unreadable file or an empty folder is an error (exit 1), so a corpus that
 * went missing is not a pass. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
    return -1;
  }
  size_t cap = 4096, len = 0;
  uint8_t *data = malloc(cap);
  for (size_t got; data && (got = fread(data + len, 1, cap - len, f)) > 0;) {
    len += got;
    if (len == cap) {
      uint8_t *grown = realloc(data, cap *= 2);
      if (!grown) free(data);
      data = grown;
    }
  }
  int failed = ferror(f) || !data;
  fclose(f);
  if (failed) {
    fprintf(stderr, "replay: %s: cannot read it\n", path);
    free(data);
    return -1;
  }
  /* libFuzzer's copy is exactly `len` bytes long: so is this one, for ASan. */
  uint8_t *exact = malloc(len ? len : 1);
  if (!exact) {
    free(data);
    return -1;
  }
  memcpy(exact, data, len);
  free(data);
  LLVMFuzzerTestOneInput(exact, len);
  free(exact);
  printf("# ok %s (%zu bytes)\n", path, len);
  fflush(stdout);
  return 0;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The files of a folder, in name order; the number replayed, or -1. */
static int replay_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
    return -1;
  }
  char **names = NULL;
  size_t n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char **grown = realloc(names, (n + 1) * sizeof *names);
    if (!grown) break;
    names = grown;
    if (!(names[n] = malloc(strlen(dir) + strlen(e->d_name) + 2))) break;
    sprintf(names[n++], "%s/%s", dir, e->d_name);
  }
  closedir(d);
  qsort(names, n, sizeof *names, by_name);
  int count = 0;
  for (size_t i = 0; i < n; i++) {
    struct stat st;
    if (count >= 0 && stat(names[i], &st) == 0 && S_ISREG(st.st_mode))
      count = replay_file(names[i]) < 0 ? -1 : count + 1;
    free(names[i]);
  }
  free(names);
  return count;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "Usage: %s FILE|FOLDER...\n", argv[0]);
    return 2;
  }
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode)) {
      int count = replay_dir(argv[i]);
      if (count <= 0) {
        fprintf(stderr, "replay: %s: %s\n", argv[i], count ? "failed" : "no inputs in it");
        return 1;
      }
    } else if (replay_file(argv[i]) < 0) {
      return 1;
    }
  }
  return 0;
}
