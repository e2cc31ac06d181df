/* replace.c — atomic replacement of a regular file, and unnamed temporary
 * files (the rules are in replace.h). */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/replace.h"
#include "util/status.h"

/* Temporary names are "<base>.tmp-<pid>-<6 letters or digits>", base cut to
 * this many bytes so that the name stays under NAME_MAX (255). */
#define TMP_BASE_MAX 200
#define TMP_RANDOM 6

static const char *kind_name(mode_t mode) {
  switch (mode & S_IFMT) {
  case S_IFDIR: return "a folder";
  case S_IFCHR: return "a character device";
  case S_IFBLK: return "a block device";
  case S_IFIFO: return "a FIFO";
  case S_IFSOCK: return "a socket";
  case S_IFLNK: return "a symbolic link";
  default: return "not a regular file";
  }
}

static int refuse(const char *path, const char *what) {
  return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s is %s, not a regular file: dlrt writes "
                         "only over a regular file (or creates one), so it was left "
                         "untouched; name a file", path, what);
}

/* r->target: path itself, or the regular file its symbolic link names;
 * *st its status (st_mode 0 when nothing is there). */
static int resolve(dlrt__replace *r, const char *path, struct stat *st) {
  memset(st, 0, sizeof *st);
  if (lstat(path, st) != 0) {
    if (errno != ENOENT)
      return dlrt__set_error(DLRT_ERR_IO, "%s: cannot write there: %s; check the path",
                             path, strerror(errno));
    st->st_mode = 0;
    r->target = strdup(path);
  } else if (S_ISREG(st->st_mode)) {
    r->target = strdup(path);
  } else if (S_ISLNK(st->st_mode)) {
    char named[PATH_MAX];
    ssize_t len = readlink(path, named, sizeof named - 1);
    named[len > 0 ? len : 0] = '\0';
    char *real = realpath(path, NULL);
    if (!real && errno == ENOENT)
      return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s is a symbolic link to %s, which does "
                             "not exist: dlrt replaces the regular file a link names but "
                             "does not create one through a dangling link, so the link was "
                             "left untouched; remove it or name a file", path, named);
    if (!real)
      return dlrt__set_error(DLRT_ERR_IO, "%s is a symbolic link to %s, which cannot be "
                             "followed: %s", path, named, strerror(errno));
    if (stat(real, st) != 0 || !S_ISREG(st->st_mode)) {
      int rc = dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s is a symbolic link to %s, which is "
                               "%s, not a regular file: dlrt writes only over a regular file, "
                               "so both were left untouched; name a file", path, real,
                               kind_name(st->st_mode));
      free(real);
      return rc;
    }
    r->target = real;
  } else {
    return refuse(path, kind_name(st->st_mode));
  }
  if (!r->target) return dlrt__set_error(DLRT_ERR_OOM, "%s: out of host memory", path);
  return DLRT_OK;
}

/* Opens the folder of r->target and points r->base at its last part. */
static int open_folder(dlrt__replace *r) {
  char *slash = strrchr(r->target, '/');
  r->base = slash ? slash + 1 : r->target;
  if (!*r->base) return refuse(r->path, "a folder");
  const char *dir = ".";
  if (slash == r->target) dir = "/";
  else if (slash) *slash = '\0', dir = r->target;
  r->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int err = errno;
  if (slash) *slash = '/';
  if (r->dir_fd < 0)
    return dlrt__set_error(DLRT_ERR_IO, "%s: cannot create a file in its folder: %s; check "
                           "that the folder exists and is writable", r->path, strerror(err));
  return DLRT_OK;
}

static size_t tmp_prefix_len(const char *base) {
  size_t len = strlen(base);
  return len > TMP_BASE_MAX ? TMP_BASE_MAX : len;
}

/* A fresh "<base>.tmp-<pid>-XXXXXX" in r->tmp. */
static void make_tmp_name(dlrt__replace *r) {
  static const char letters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  static unsigned counter;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  uint64_t x = ((uint64_t)now.tv_nsec << 20) ^ (uint64_t)now.tv_sec ^
               ((uint64_t)getpid() << 40) ^
               ((uint64_t)__atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED) * 0x9e3779b97f4a7c15u);
  char random[TMP_RANDOM + 1];
  for (int i = 0; i < TMP_RANDOM; i++) {
    x ^= x >> 33, x *= 0xff51afd7ed558ccdu, x ^= x >> 29;
    random[i] = letters[x % (sizeof letters - 1)];
  }
  random[TMP_RANDOM] = '\0';
  snprintf(r->tmp, sizeof r->tmp, "%.*s.tmp-%ld-%s", (int)tmp_prefix_len(r->base), r->base,
           (long)getpid(), random);
}

/* The pid of a temporary file of `base` named `name`, or 0 if it is not one. */
static long tmp_owner(const char *name, const char *base) {
  size_t len = tmp_prefix_len(base);
  if (strncmp(name, base, len) != 0 || strncmp(name + len, ".tmp-", 5) != 0) return 0;
  const char *p = name + len + 5;
  long pid = 0;
  int digits = 0;
  for (; *p >= '0' && *p <= '9' && digits < 10; p++, digits++) pid = pid * 10 + (*p - '0');
  if (!digits || *p++ != '-') return 0;
  for (int i = 0; i < TMP_RANDOM; i++, p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')))
      return 0;
  return *p == '\0' && pid <= INT_MAX ? pid : 0;
}

/* Removes the temporary files of r->base that a dead process of this user
 * left (a kill between naming and renaming, or during a named write). A
 * live process's may be a save in progress; another user's are not ours. */
static void remove_stale(dlrt__replace *r) {
  int fd = openat(r->dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d) {
    if (fd >= 0) close(fd);
    return; /* a folder we cannot list: nothing is removed, the save goes on */
  }
  for (struct dirent *e; (e = readdir(d));) {
    long pid = tmp_owner(e->d_name, r->base);
    struct stat st;
    if (pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
      continue;
    if (fstatat(r->dir_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
        st.st_uid == geteuid())
      (void)unlinkat(r->dir_fd, e->d_name, 0);
  }
  closedir(d);
}

static void release(dlrt__replace *r) {
  if (r->fd >= 0) close(r->fd);
  if (r->tmp[0]) (void)unlinkat(r->dir_fd, r->tmp, 0);
  if (r->dir_fd >= 0) close(r->dir_fd);
  free(r->path);
  free(r->target);
  memset(r, 0, sizeof *r);
  r->fd = r->dir_fd = -1;
}

/* The checks of a replacement, before anything is written: what is at
 * path (*st), the file to replace, and its folder, open. */
static int prepare(dlrt__replace *r, const char *path, struct stat *st) {
  memset(r, 0, sizeof *r);
  r->fd = r->dir_fd = -1;
  int rc = (r->path = strdup(path)) ? resolve(r, path, st)
                                     : dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  if (rc == DLRT_OK) rc = open_folder(r);
  if (rc < 0) release(r);
  return rc;
}

int dlrt_save_path_check(const char *path) {
  DLRT__CHECK_ARG(path && *path, "dlrt_save_path_check: path is NULL or empty");
  dlrt__replace r;
  struct stat st;
  int rc = prepare(&r, path, &st);
  if (rc < 0) return rc;
  if (faccessat(r.dir_fd, ".", W_OK | X_OK, AT_EACCESS) != 0)
    rc = dlrt__set_error(DLRT_ERR_IO, "%s: cannot create a file in its folder: %s; check "
                         "that the folder is writable", path, strerror(errno));
  release(&r);
  return rc;
}

int dlrt__replace_open(dlrt__replace *r, const char *path) {
  struct stat st;
  int rc = prepare(r, path, &st);
  if (rc < 0) return rc;
  remove_stale(r);
  /* Unnamed first: a kill during the write then leaves nothing behind.
   * Naming it at commit goes through /proc/self/fd (linkat's AT_EMPTY_PATH
   * needs a capability), so without /proc the file is named from the start. */
  if (access("/proc/self/fd", X_OK) == 0) {
    r->fd = openat(r->dir_fd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
    r->unnamed = r->fd >= 0;
  }
  for (int tries = 0; r->fd < 0 && tries < 100; tries++) {
    make_tmp_name(r);
    r->fd = openat(r->dir_fd, r->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (r->fd < 0 && errno != EEXIST) break;
  }
  if (r->fd < 0) {
    r->tmp[0] = '\0';
    rc = dlrt__set_error(DLRT_ERR_IO, "%s: cannot create a temporary file beside it: %s; "
                         "check that the folder exists and is writable", path, strerror(errno));
    release(r);
    return rc;
  }
  /* A file replaced keeps its permissions; a new one gets 0666 less the
   * umask, as fopen would give it. */
  if (st.st_mode) (void)fchmod(r->fd, st.st_mode & 07777);
  return DLRT_OK;
}

int dlrt__write_all(int fd, const char *path, const void *data, size_t n) {
  const char *p = data;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      return dlrt__set_error(DLRT_ERR_IO, "%s: cannot write it: %s; the previous file, if "
                             "any, is untouched (check free space and permissions)", path,
                             w < 0 ? strerror(errno) : "no progress");
    p += w;
    n -= (size_t)w;
  }
  return DLRT_OK;
}

static int commit_failed(dlrt__replace *r, const char *step, int err) {
  int rc = dlrt__set_error(DLRT_ERR_IO, "%s: cannot %s: %s; the previous file, if any, is "
                           "untouched (check free space and permissions)", r->path, step,
                           strerror(err));
  release(r);
  return rc;
}

int dlrt__replace_commit(dlrt__replace *r) {
  if (fsync(r->fd) != 0) return commit_failed(r, "flush it to disk", errno);
  if (r->unnamed) {
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", r->fd);
    int linked = -1;
    for (int tries = 0; linked != 0 && tries < 100; tries++) {
      make_tmp_name(r);
      linked = linkat(AT_FDCWD, proc, r->dir_fd, r->tmp, AT_SYMLINK_FOLLOW);
      if (linked != 0 && errno != EEXIST) break;
    }
    if (linked != 0) {
      int err = errno;
      r->tmp[0] = '\0';
      return commit_failed(r, "name the new file", err);
    }
  }
  int closed = close(r->fd);
  r->fd = -1;
  if (closed != 0) return commit_failed(r, "write it", errno);
  /* Checked again: something may have been put there since the open. */
  struct stat st;
  if (fstatat(r->dir_fd, r->base, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode)) {
    int rc = refuse(r->path, kind_name(st.st_mode));
    release(r);
    return rc;
  }
  if (renameat(r->dir_fd, r->tmp, r->dir_fd, r->base) != 0)
    return commit_failed(r, "put the new file in place", errno);
  r->tmp[0] = '\0';
  /* The rename itself survives a crash once the folder is flushed. Folders
   * some filesystems cannot sync (EINVAL) have nothing to flush. */
  int rc = DLRT_OK;
  if (fsync(r->dir_fd) != 0 && errno != EINVAL && errno != ENOTSUP)
    rc = dlrt__set_error(DLRT_ERR_IO, "%s was written but its folder could not be flushed to "
                         "disk (%s): a crash now could lose the new file", r->path,
                         strerror(errno));
  release(r);
  return rc;
}

void dlrt__replace_abort(dlrt__replace *r) { release(r); }

int dlrt_file_save(const char *path, const void *data, size_t bytes) {
  DLRT__CHECK_ARG(path && *path && (data || bytes == 0),
                  "dlrt_file_save: path is NULL or empty, or data is NULL");
  dlrt__replace r;
  int rc = dlrt__replace_open(&r, path);
  if (rc < 0) return rc;
  if ((rc = dlrt__write_all(r.fd, path, data, bytes)) < 0) {
    dlrt__replace_abort(&r);
    return rc;
  }
  return dlrt__replace_commit(&r);
}

int dlrt__open_unnamed(const char *dir, const char *prefix) {
  int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s/%s-XXXXXX", dir, prefix) >= (int)sizeof path) {
    errno = ENAMETOOLONG;
    return -1;
  }
  if ((fd = mkostemp(path, O_CLOEXEC)) >= 0) unlink(path);
  return fd;
}
