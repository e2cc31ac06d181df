/* file.h — opening the files dlrt reads (data sets, record files, model
 * files, checkpoints, cached programs) without ever blocking on one that is
 * not a regular file. */
#ifndef DLRT_UTIL_FILE_H
#define DLRT_UTIL_FILE_H

#include <sys/stat.h>

/* What a file of this mode is, for messages: "a FIFO (named pipe)",
 * "a character device", "a folder", ... */
const char *dlrt__file_kind(mode_t mode);

/* Opens `path` read-only if it is a regular file, into *fd (close-on-exec,
 * blocking reads) and *st (may be NULL). A FIFO with no writer would block
 * open() forever and a device may never end, so the path is checked first
 * and opened with O_NONBLOCK, checked again on the descriptor (it may have
 * been swapped in between), and only then made blocking. `what` names the
 * file in messages ("the record file"). DLRT_ERR_NOT_FOUND when it does not
 * exist; DLRT_ERR_IO, naming the path and what it is, for anything else. */
int dlrt__open_regular(const char *path, const char *what, int *fd, struct stat *st);
/* The same without a message, for callers to whom a missing or odd file is
 * no error (a cache): the descriptor, or -1 with errno set (EINVAL: not a
 * regular file, whose mode is in *st). */
int dlrt__open_regular_fd(const char *path, struct stat *st);

/* The path of `name` in dlrt's measurement cache (the planner's per-node
 * profiles, a link preset's measured GEMM rate): $DLRT_PROFILE_CACHE, else
 * $XDG_CACHE_HOME/dlrt (made if missing). 0 when neither is set or the
 * path does not fit `size`; 1 with it in `path`. */
int dlrt__cache_file(const char *name, char *path, size_t size);

#endif
