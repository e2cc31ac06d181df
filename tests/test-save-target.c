/*
 * test-save-target.c — what a save does to the thing at its path, for each
 * of dlrt's atomic writers (dlrt_safetensors_save, dlrt_dataset_save_records):
 * a FIFO, a folder, a character device (when root can make one), a symbolic
 * link to any of them and a dangling link are refused and left as they were;
 * a link to a regular file is followed, so the file it names gets the new
 * content and the link stays a link; a temporary file left by a process that
 * died mid-save is removed by the next save of the same file (one of a live
 * process, or another name's, is not); and a writer SIGKILLed in the middle
 * of saving a large file leaves, after the next save, no temporary file and
 * an intact file.
 * Points: computed at run time (done_testing).
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dlrt.h"
#include "tap.h"

#define PATH_CAP 4096

static char root[PATH_CAP / 2];

static const char *tmp_path(const char *rel) { return tap_join(root, rel); }

/* Entries of `dir` whose name holds ".tmp-": temporary files of a save. */
static int temp_files_in(const char *dir) {
  DIR *d = opendir(dir);
  int count = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    if (strstr(e->d_name, ".tmp-")) {
      diag("left behind in %s: %s", dir, e->d_name);
      count++;
    }
  if (d) closedir(d);
  return count;
}

/* ----------------------------------------------------------- the writers */

/* A writer saves `bytes` (about) of content numbered `seed` to a path, and
 * checks that a path holds exactly that content. */
typedef struct {
  const char *name;
  const char *suffix;
  int (*save)(const char *path, size_t bytes, uint32_t seed);
  int (*holds)(const char *path, size_t bytes, uint32_t seed);
} writer;

static int st_save(const char *path, size_t bytes, uint32_t seed) {
  dlrt_host_tensor t = {.name = "w", .dtype = DLRT_U8, .ndim = 1};
  t.shape[0] = (int64_t)bytes;
  t.bytes = bytes;
  t.data = malloc(bytes ? bytes : 1);
  if (!t.data) return DLRT_ERR_OOM;
  fill_pattern(t.data, bytes, seed);
  int rc = dlrt_safetensors_save(path, &t, 1, NULL);
  free(t.data);
  return rc;
}

static int st_holds(const char *path, size_t bytes, uint32_t seed) {
  dlrt_host_tensor *t = NULL;
  int n = 0, same = 0;
  if (dlrt_safetensors_load(path, &t, &n, NULL) == DLRT_OK && n == 1 && t[0].bytes == bytes) {
    unsigned char *want = malloc(bytes ? bytes : 1);
    if (want) {
      fill_pattern(want, bytes, seed);
      same = memcmp(t[0].data, want, bytes) == 0;
    }
    free(want);
  }
  dlrt_safetensors_free(t, n, NULL);
  return same;
}

enum { SIDE = 28, PIXELS = SIDE * SIDE, CLASSES = 3 };

/* A generated set of about `bytes` of images, from `seed`. */
static int rec_make(size_t bytes, uint32_t seed, dlrt_dataset *d) {
  int64_t count = (int64_t)(bytes / PIXELS) > 4 ? (int64_t)(bytes / PIXELS) : 4;
  return dlrt_dataset_generate(count, CLASSES, seed, d);
}

static int rec_save(const char *path, size_t bytes, uint32_t seed) {
  dlrt_dataset d;
  int rc = rec_make(bytes, seed, &d);
  if (rc == DLRT_OK) rc = dlrt_dataset_save_records(path, &d);
  dlrt_dataset_free(&d);
  return rc;
}

static int rec_holds(const char *path, size_t bytes, uint32_t seed) {
  dlrt_dataset want, got;
  int same = 0;
  if (rec_make(bytes, seed, &want) != DLRT_OK) return 0;
  if (dlrt_dataset_open_records(path, 0, &got) == DLRT_OK) {
    size_t image_bytes = (size_t)(want.count * PIXELS) * dlrt_dtype_size(want.image_dtype);
    same = got.count == want.count && got.image_dtype == want.image_dtype &&
           memcmp(got.images, want.images, image_bytes) == 0 &&
           memcmp(got.labels, want.labels, (size_t)want.count * sizeof *want.labels) == 0;
    dlrt_dataset_free(&got);
  }
  dlrt_dataset_free(&want);
  return same;
}

static const writer writers[] = {
    {"dlrt_safetensors_save", ".safetensors", st_save, st_holds},
    {"dlrt_dataset_save_records", ".dlrec", rec_save, rec_holds},
};

/* "<root>/<stem><suffix>" */
static const char *target(const writer *w, const char *stem) {
  char rel[256];
  snprintf(rel, sizeof rel, "%s%s", stem, w->suffix);
  return tmp_path(rel);
}

/* ---------------------------------------------------- refused targets */

static int is_kind(const char *path, mode_t kind) {
  struct stat st;
  return lstat(path, &st) == 0 && (st.st_mode & S_IFMT) == kind;
}

/* A save to `path` fails with a message naming the path and `word`, and
 * `path` is still of `kind`. */
static void expect_refused(const writer *w, const char *path, mode_t kind, const char *what,
                           const char *word) {
  int rc = w->save(path, 100, 1);
  ok(rc < 0, "%s refuses %s", w->name, what);
  if (rc < 0)
    ok(strstr(dlrt_last_error(), path) && strstr(dlrt_last_error(), word),
       "%s: the message names the path and says \"%s\": %s", w->name, word, dlrt_last_error());
  else
    ok(0, "%s: a message naming the path (the save succeeded)", w->name);
  ok(is_kind(path, kind), "%s: %s is left as it was", w->name, what);
}

static void test_refused(const writer *w) {
  const char *fifo = target(w, "fifo");
  if (mkfifo(fifo, 0644) != 0) bail_out("mkfifo %s: %s", fifo, strerror(errno));
  expect_refused(w, fifo, S_IFIFO, "a FIFO", "FIFO");

  const char *dir = target(w, "folder");
  mkdir(dir, 0755);
  expect_refused(w, dir, S_IFDIR, "a folder", "folder");

  const char *dev = target(w, "null-device");
  if (geteuid() == 0 && mknod(dev, S_IFCHR | 0666, makedev(1, 3)) == 0) {
    expect_refused(w, dev, S_IFCHR, "a character device", "character device");
  } else {
    skip(3, "a character device needs root to make (mknod)");
  }

  const char *to_fifo = target(w, "link-to-fifo");
  if (symlink(fifo, to_fifo) != 0) bail_out("symlink %s: %s", to_fifo, strerror(errno));
  expect_refused(w, to_fifo, S_IFLNK, "a symbolic link to a FIFO", "FIFO");
  ok(is_kind(fifo, S_IFIFO), "%s: the FIFO it names is left as it was", w->name);

  const char *dangling = target(w, "dangling");
  const char *missing = target(w, "no-such-file");
  if (symlink(missing, dangling) != 0) bail_out("symlink %s: %s", dangling, strerror(errno));
  expect_refused(w, dangling, S_IFLNK, "a dangling symbolic link", "does not exist");
  struct stat st;
  ok(lstat(missing, &st) != 0 && errno == ENOENT, "%s: nothing is created through it",
     w->name);
  ok(temp_files_in(root) == 0, "%s: no temporary file left by the refused saves", w->name);
}

/* ---------------------------------------------------------------- links */

static void test_link_to_file(const writer *w) {
  char sub[PATH_CAP], real[PATH_CAP], link_target[PATH_CAP];
  snprintf(sub, sizeof sub, "%s/%s", root, w->suffix + 1); /* "<root>/safetensors" */
  mkdir(sub, 0755);
  snprintf(real, sizeof real, "%s/real%s", sub, w->suffix);
  if (!tap_check(w->save(real, 1000, 2), "%s: save a file to link to", w->name)) return;
  /* A relative link from root into the sub-folder. */
  const char *link_path = target(w, "link");
  snprintf(link_target, sizeof link_target, "%s/real%s", w->suffix + 1, w->suffix);
  if (symlink(link_target, link_path) != 0)
    bail_out("symlink %s: %s", link_path, strerror(errno));
  if (!tap_check(w->save(link_path, 2000, 3), "%s: save through a link to a regular file",
                 w->name))
    return;
  char got[PATH_CAP];
  ssize_t len = readlink(link_path, got, sizeof got - 1);
  if (len >= 0) got[len] = '\0';
  ok(len >= 0 && strcmp(got, link_target) == 0, "%s: the link is still a link to %s",
     w->name, link_target);
  ok(w->holds(real, 2000, 3), "%s: the file it names holds the new content", w->name);
  ok(temp_files_in(root) == 0 && temp_files_in(sub) == 0,
     "%s: no temporary file left in either folder", w->name);
}

/* -------------------------------------------------- temporary files */

/* The pid of a process that has ended. */
static pid_t dead_pid(void) {
  pid_t pid = fork();
  if (pid < 0) bail_out("fork: %s", strerror(errno));
  if (pid == 0) _exit(0);
  waitpid(pid, NULL, 0);
  return pid;
}

/* Temporary files are "<name>.tmp-<pid>-<6 letters or digits>" beside the
 * file they replace (README, "Saving files"). */
static void test_stale_temp(const writer *w) {
  const char *path = target(w, "stale");
  char dead[PATH_CAP], live[PATH_CAP], other[PATH_CAP], notes[PATH_CAP];
  snprintf(dead, sizeof dead, "%s.tmp-%ld-Ab3xYz", path, (long)dead_pid());
  snprintf(live, sizeof live, "%s.tmp-%ld-Ab3xYz", path, (long)getppid());
  snprintf(other, sizeof other, "%s.tmp-%ld-Ab3xYz", target(w, "another"), (long)dead_pid());
  snprintf(notes, sizeof notes, "%s.tmp-notes", path);
  tap_write_text(dead, "half a file from a killed save");
  tap_write_text(live, "a save in progress in a live process");
  tap_write_text(other, "another file's");
  tap_write_text(notes, "not a temporary file of ours");
  if (!tap_check(w->save(path, 500, 4), "%s: save beside temporary files", w->name)) return;
  ok(access(dead, F_OK) != 0, "%s: the temporary file of a dead process is removed", w->name);
  ok(access(live, F_OK) == 0, "%s: a live process's is kept", w->name);
  ok(access(other, F_OK) == 0 && access(notes, F_OK) == 0,
     "%s: another file's, and a name not of the pattern, are kept", w->name);
  ok(w->holds(path, 500, 4), "%s: the file was saved", w->name);
  unlink(live);
  unlink(other);
  unlink(notes);
}

/* A child saves a large file over and over until it is SIGKILLed in the
 * middle of a save; the file is then intact (one of the saves), and the
 * next save leaves no temporary file beside it. */
static void test_killed(const writer *w) {
  enum { BIG = 24 << 20 };
  char dir[PATH_CAP];
  snprintf(dir, sizeof dir, "%s/killed-%s", root, w->suffix + 1);
  mkdir(dir, 0755);
  char file[PATH_CAP];
  snprintf(file, sizeof file, "%s/killed%s", dir, w->suffix);
  if (!tap_check(w->save(file, BIG, 5), "%s: save a large file", w->name)) return;
  int killed_in_save = 0;
  for (int attempt = 0; attempt < 5 && !killed_in_save; attempt++) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) bail_out("fork: %s", strerror(errno));
    if (pid == 0) {
      for (;;)
        if (w->save(file, BIG, 5) < 0) _exit(1);
    }
    struct timespec pause = {0, 150 * 1000 * 1000};
    nanosleep(&pause, NULL);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    killed_in_save = WIFSIGNALED(status);
  }
  ok(killed_in_save, "%s: a saving process was killed", w->name);
  ok(w->holds(file, BIG, 5), "%s: after the kill the file is intact", w->name);
  if (!tap_check(w->save(file, 1000, 6), "%s: the next save succeeds", w->name)) return;
  ok(temp_files_in(dir) == 0, "%s: after it no temporary file is left", w->name);
  ok(w->holds(file, 1000, 6), "%s: and the file holds the new content", w->name);
}

int main(void) {
  tap_tempdir("dlrt-save-target", root, sizeof root);
  diag("files in %s", root);
  for (size_t i = 0; i < sizeof writers / sizeof writers[0]; i++) {
    test_refused(&writers[i]);
    test_link_to_file(&writers[i]);
    test_stale_temp(&writers[i]);
    test_killed(&writers[i]);
  }
  ok(temp_files_in(root) == 0, "no temporary file left at the end");
  tap_remove_tree(root);
  return done_testing();
}
