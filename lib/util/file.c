/* file.c — opening input files: regular files only, never blocking. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/file.h"
#include "util/status.h"

const char *dlrt__file_kind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

int dlrt__open_regular_fd(const char *path, struct stat *st) {
  /* stat first: a FIFO or device is refused without being opened at all. */
  if (stat(path, st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return -1;
    st->st_mode = S_IFREG; /* unknown yet (EACCES, ...): open says */
  } else if (!S_ISREG(st->st_mode)) {
    errno = EINVAL;
    return -1;
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return -1;
  int flags;
  /* Checked again on the descriptor: the path may have been swapped. */
  if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
    int e = S_ISREG(st->st_mode) ? errno : EINVAL;
    close(fd);
    errno = e;
    return -1;
  }
  /* Regular files ignore O_NONBLOCK, but the descriptor may go to code
   * that expects a plain blocking one. */
  if ((flags = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

int dlrt__open_regular(const char *path, const char *what, int *fd, struct stat *st) {
  struct stat own;
  if (!st) st = &own;
  memset(st, 0, sizeof *st);
  if ((*fd = dlrt__open_regular_fd(path, st)) >= 0) return DLRT_OK;
  int e = errno;
  if (e == ENOENT || e == ENOTDIR)
    return dlrt__set_error(DLRT_ERR_NOT_FOUND, "%s: no such file (%s was expected there); "
                           "check the path", path, what);
  if (e == EINVAL && S_ISDIR(st->st_mode))
    return dlrt__set_error(DLRT_ERR_IO, "%s is a folder, not a regular file (%s was "
                           "expected): pass the file itself", path, what);
  if (e == EINVAL && !S_ISREG(st->st_mode))
    return dlrt__set_error(DLRT_ERR_IO, "%s is %s, not %s: dlrt reads only regular files (a "
                           "pipe or a device can block or never end); copy it to a file first",
                           path, dlrt__file_kind(st->st_mode), what);
  return dlrt__set_error(DLRT_ERR_IO, "%s: cannot open %s: %s; check its permissions", path,
                         what, strerror(e));
}

int dlrt__cache_file(const char *name, char *path, size_t size) {
  const char *dir = getenv("DLRT_PROFILE_CACHE");
  char buf[512];
  if (!dir || !*dir) {
    const char *xdg = getenv("XDG_CACHE_HOME");
    if (!xdg || !*xdg) return 0;
    snprintf(buf, sizeof buf, "%s/dlrt", xdg);
    mkdir(buf, 0700); /* may exist */
    dir = buf;
  }
  int n = snprintf(path, size, "%s/%s", dir, name);
  return n > 0 && (size_t)n < size;
}
