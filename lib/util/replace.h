/* replace.h — writing a file so that a crash or a kill never leaves half of
 * it, and never turns something else into a regular file (internal).
 *
 * A replacement writes the new content into an unnamed file in the target's
 * folder (O_TMPFILE; where the filesystem has none, a temporary file named
 * "<name>.tmp-<pid>-<6 letters or digits>"), flushes it to disk and only then
 * puts it in place of the target with one rename, so the target holds the
 * old content or the new, never a mix. What may be at the path:
 *   - nothing: the file is created (the folder must exist);
 *   - a regular file: it is replaced, keeping its permission bits;
 *   - a symbolic link to a regular file (through any chain of links): the
 *     file it names is replaced, in that file's own folder, so the link
 *     stays a link and still names the new content;
 *   - anything else (a folder, a FIFO, a device, a socket, a dangling link or
 *     a link to one of those): refused with DLRT_ERR_INVALID_ARG and left
 *     untouched, nothing written.
 * A kill can leave a named temporary file only in the moment between giving
 * the unnamed file a name and the rename (or, without O_TMPFILE, during the
 * write). Each replacement therefore first removes the temporary files of
 * the same target that belong to this user and to a process that is no
 * longer alive, so they never accumulate.
 *
 * The check of the target and the rename are separate steps: a process that
 * swaps the target for something else in between can still have it
 * replaced (it is checked a second time just before the rename, which makes
 * the window small, not empty). */
#ifndef DLRT_UTIL_REPLACE_H
#define DLRT_UTIL_REPLACE_H

#include <stddef.h>
#include <sys/types.h>

typedef struct {
  int fd;           /* write the new content here */
  int dir_fd;       /* the folder of the file replaced */
  int unnamed;      /* fd is an O_TMPFILE file, named only at commit */
  char *path;       /* as the caller gave it, for messages */
  char *target;     /* the file replaced: path, or the file its link names */
  const char *base; /* target's last component (inside target) */
  char tmp[320];    /* the temporary file's name in dir_fd, when it has one */
} dlrt__replace;

/* Starts a replacement of `path` (rules above); *r is ready to write to on
 * success and needs no cleanup on failure. */
int dlrt__replace_open(dlrt__replace *r, const char *path);
/* Flushes the content to disk, renames it over the target and flushes the
 * folder; always closes. On failure the target is untouched and no
 * temporary file remains. */
int dlrt__replace_commit(dlrt__replace *r);
/* Drops a replacement that will not be committed: the target is untouched. */
void dlrt__replace_abort(dlrt__replace *r);

/* Writes all `n` bytes to fd (retrying short writes and EINTR); on failure
 * a message naming `path`. */
int dlrt__write_all(int fd, const char *path, const void *data, size_t n);

/* A new file in folder `dir` for reading and writing that has no name, so
 * it goes with the process however it ends: O_TMPFILE where the filesystem
 * has it, else a file named "<prefix>-XXXXXX" unlinked at once. -1 with errno
 * set on failure. */
int dlrt__open_unnamed(const char *dir, const char *prefix);

#endif
