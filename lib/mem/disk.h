/* disk.h — the spill file behind host memory (internal; managed_io.c): one
 * unnamed file in $DLRT_SPILL_DIR (else $TMPDIR, /tmp), gone when the
 * process ends, with slots reserved before their first write so that a
 * folder that fills up is an error naming it, never a half-written copy.
 * The spill pool's disk tier and parameter streaming's optimizer state use
 * it. */
#ifndef DLRT_MEM_DISK_H
#define DLRT_MEM_DISK_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  int fd;         /* 0: not open yet */
  int64_t end;    /* bytes reserved so far */
  int broken;     /* a write or a reservation failed: no further use */
  char dir[256];  /* its folder, for messages */
} dlrt__disk;

int dlrt__disk_open(dlrt__disk *d);
void dlrt__disk_close(dlrt__disk *d);
/* A slot of `bytes` at *offset, its blocks reserved (fallocate). */
int dlrt__disk_reserve(dlrt__disk *d, size_t bytes, int64_t *offset);
/* Whole writes and reads at `offset`; a failed write breaks the file. */
int dlrt__disk_write(dlrt__disk *d, int64_t offset, const void *src, size_t bytes);
int dlrt__disk_read(dlrt__disk *d, int64_t offset, void *dst, size_t bytes);
/* The error of a disk that cannot take `bytes` more (errno err) while
 * `what`-ing: "the spill directory DIR is full ..." for ENOSPC, EDQUOT and
 * EFBIG; it breaks the file. */
int dlrt__disk_failed(dlrt__disk *d, int err, size_t bytes, const char *what);

#endif
