/* records.c — dlrt record files (".dlrec"): a fixed little-endian header,
 * the images, the labels (layout in dlrt.h). Reading checks the header
 * against the file's size before touching the data; the images may be
 * mapped rather than read, for sets larger than RAM. Writing replaces the
 * file atomically (util/replace.h: flushed, then renamed over it, and only
 * over a regular file or a link to one), so a crash leaves the old file or
 * the new one, never half of one. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/dataset.h"
#include "util/file.h"
#include "util/replace.h"
#include "util/status.h"

#define REC_MAGIC "DLRTREC1"
#define REC_HEADER_BYTES 64
#define REC_DTYPE_U8 1
#define REC_DTYPE_F32 2
#define REC_DTYPE_I32 2 /* labels */

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const unsigned char *p) {
  return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static size_t image_bytes(const dlrt_dataset *d) {
  return (size_t)(d->channels * d->height * d->width) * dlrt_dtype_size(d->image_dtype);
}

/* ---------------------------------------------------------------- writing */

int dlrt_dataset_save_records(const char *path, const dlrt_dataset *d) {
  DLRT__CHECK_ARG(!d || !d->tokens,
                  "dlrt_dataset_save_records: %s is token windows, not images: save the "
                  "stream as a token file (dlrt_tokens_save, dlrecord tokens)", d->source);
  DLRT__CHECK_ARG(path && d && d->images && d->labels && d->count > 0,
                  "dlrt_dataset_save_records: path or data set is NULL or empty");
  DLRT__CHECK_ARG(d->image_dtype == DLRT_U8 || d->image_dtype == DLRT_F32,
                  "dlrt_dataset_save_records: images of %s; record files hold u8 or f32",
                  dlrt_dtype_name(d->image_dtype));
  DLRT__CHECK_ARG(d->channels >= 1 && d->height >= 1 && d->width >= 1 &&
                      d->channels <= UINT32_MAX && d->height <= UINT32_MAX &&
                      d->width <= UINT32_MAX && d->classes >= 1,
                  "dlrt_dataset_save_records: shape %lld x %lld x %lld, %d classes",
                  (long long)d->channels, (long long)d->height, (long long)d->width,
                  d->classes);
  int wide = d->classes > 256;
  for (int64_t i = 0; i < d->count; i++)
    if (d->labels[i] < 0 || d->labels[i] >= d->classes)
      return dlrt__set_error(DLRT_ERR_INVALID_ARG, "dlrt_dataset_save_records: label %d of "
                             "sample %lld is outside [0, %d)", d->labels[i],
                             (long long)i, d->classes);
  unsigned char header[REC_HEADER_BYTES] = {0};
  memcpy(header, REC_MAGIC, 8);
  put32(header + 8, REC_HEADER_BYTES);
  put32(header + 12, d->image_dtype == DLRT_U8 ? REC_DTYPE_U8 : REC_DTYPE_F32);
  put64(header + 16, (uint64_t)d->count);
  put32(header + 24, (uint32_t)d->channels);
  put32(header + 28, (uint32_t)d->height);
  put32(header + 32, (uint32_t)d->width);
  put32(header + 36, wide ? REC_DTYPE_I32 : REC_DTYPE_U8);
  put32(header + 40, (uint32_t)d->classes);

  dlrt__replace r;
  int rc = dlrt__replace_open(&r, path);
  if (rc < 0) return rc;
  rc = dlrt__write_all(r.fd, path, header, sizeof header);
  if (rc == DLRT_OK)
    rc = dlrt__write_all(r.fd, path, d->images, image_bytes(d) * (size_t)d->count);
  /* Labels in pieces, converted to the file's width. */
  unsigned char chunk[4096];
  size_t per = wide ? 4 : 1, fill = 0;
  for (int64_t i = 0; i < d->count && rc == DLRT_OK; i++) {
    if (wide)
      put32(chunk + fill, (uint32_t)d->labels[i]);
    else
      chunk[fill] = (unsigned char)d->labels[i];
    fill += per;
    if (fill == sizeof chunk || i + 1 == d->count) {
      rc = dlrt__write_all(r.fd, path, chunk, fill);
      fill = 0;
    }
  }
  if (rc < 0) {
    dlrt__replace_abort(&r);
    return rc;
  }
  return dlrt__replace_commit(&r);
}

/* ---------------------------------------------------------------- reading */

void dlrt__dataset_unmap(dlrt_dataset *d) {
  if (d->mapping) munmap(d->mapping, d->mapping_bytes);
  d->mapping = NULL;
  d->images = NULL;
}

static int read_at(int fd, const char *path, void *dst, size_t n, uint64_t offset) {
  char *p = dst;
  while (n > 0) {
    ssize_t r = pread(fd, p, n, (off_t)offset);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      return dlrt__set_error(DLRT_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    if (r == 0)
      return dlrt__set_error(DLRT_ERR_IO, "%s: truncated while reading (the file shrank?)",
                             path);
    p += r, n -= (size_t)r, offset += (uint64_t)r;
  }
  return DLRT_OK;
}

/* The header, checked field by field and against the file's size. */
static int parse_header(const char *path, const unsigned char *h, uint64_t file_bytes,
                        dlrt_dataset *d, uint32_t *label_dtype) {
  if (memcmp(h, REC_MAGIC, 8) != 0)
    return dlrt__set_error(DLRT_ERR_IO, "%s: not a dlrt record file (magic \"%.8s\", expected "
                           "\"" REC_MAGIC "\"); write one with dlrecord convert", path,
                           (const char *)h);
  uint32_t header = get32(h + 8), image_dtype = get32(h + 12);
  uint64_t count = get64(h + 16);
  uint32_t c = get32(h + 24), hh = get32(h + 28), w = get32(h + 32);
  uint32_t classes = get32(h + 40);
  *label_dtype = get32(h + 36);
  if (header != REC_HEADER_BYTES)
    return dlrt__set_error(DLRT_ERR_IO, "%s: header of %u bytes; this reader knows %d", path,
                           header, REC_HEADER_BYTES);
  if (image_dtype != REC_DTYPE_U8 && image_dtype != REC_DTYPE_F32)
    return dlrt__set_error(DLRT_ERR_IO, "%s: image dtype %u; 1 (u8) or 2 (f32) expected", path,
                           image_dtype);
  if (*label_dtype != REC_DTYPE_U8 && *label_dtype != REC_DTYPE_I32)
    return dlrt__set_error(DLRT_ERR_IO, "%s: label dtype %u; 1 (u8) or 2 (i32) expected", path,
                           *label_dtype);
  if (count == 0 || c == 0 || hh == 0 || w == 0 || classes == 0 || classes > INT32_MAX ||
      (uint64_t)c * hh * w > ((uint64_t)1 << 32))
    return dlrt__set_error(DLRT_ERR_IO, "%s: implausible header: %llu samples of %u x %u x %u, "
                           "%u classes; the header is corrupt", path,
                           (unsigned long long)count, c, hh, w, classes);
  uint64_t per_image = (uint64_t)c * hh * w * (image_dtype == REC_DTYPE_U8 ? 1 : 4);
  uint64_t per_label = *label_dtype == REC_DTYPE_U8 ? 1 : 4;
  if (count > (file_bytes - REC_HEADER_BYTES) / (per_image + per_label) + 1)
    return dlrt__set_error(DLRT_ERR_IO, "%s: truncated: the header announces %llu samples of "
                           "%llu bytes, the file holds %llu bytes", path,
                           (unsigned long long)count, (unsigned long long)(per_image + per_label),
                           (unsigned long long)file_bytes);
  uint64_t want = REC_HEADER_BYTES + count * (per_image + per_label);
  if (file_bytes != want)
    return dlrt__set_error(DLRT_ERR_IO, "%s: %s: %llu bytes, the header announces %llu (%llu "
                           "samples of %u x %u x %u); %s", path,
                           file_bytes < want ? "truncated" : "extra bytes after the data",
                           (unsigned long long)file_bytes, (unsigned long long)want,
                           (unsigned long long)count, c, hh, w,
                           file_bytes < want ? "the copy was cut short, write it again"
                                             : "the file is corrupt");
  d->count = (int64_t)count;
  d->channels = c, d->height = hh, d->width = w;
  d->classes = (int)classes;
  d->image_dtype = image_dtype == REC_DTYPE_U8 ? DLRT_U8 : DLRT_F32;
  return DLRT_OK;
}

int dlrt_dataset_open_records(const char *path, int flags, dlrt_dataset *out) {
  DLRT__CHECK_ARG(out, "dlrt_dataset_open_records: out is NULL");
  memset(out, 0, sizeof *out);
  DLRT__CHECK_ARG(path, "dlrt_dataset_open_records: path is NULL");
  DLRT__CHECK_ARG((flags & ~DLRT_DATASET_MMAP) == 0, "dlrt_dataset_open_records: unknown "
                  "flags 0x%x", (unsigned)flags);
  struct stat st;
  int fd, rc = dlrt__open_regular(path, "a record file", &fd, &st);
  if (rc < 0) return rc;
  dlrt_dataset d = {0};
  unsigned char header[REC_HEADER_BYTES];
  uint32_t label_dtype = 0;
  if ((uint64_t)st.st_size < REC_HEADER_BYTES) {
    rc = dlrt__set_error(DLRT_ERR_IO, "%s: truncated: %lld bytes, less than the %d-byte "
                         "header of a record file", path, (long long)st.st_size,
                         REC_HEADER_BYTES);
    goto done;
  }
  if ((rc = read_at(fd, path, header, sizeof header, 0)) < 0) goto done;
  if ((rc = parse_header(path, header, (uint64_t)st.st_size, &d, &label_dtype)) < 0) goto done;

  size_t images = image_bytes(&d) * (size_t)d.count;
  size_t label_size = label_dtype == REC_DTYPE_U8 ? 1 : 4;
  d.labels = malloc((size_t)d.count * sizeof *d.labels);
  unsigned char *raw = malloc((size_t)d.count * label_size);
  if (!d.labels || !raw) {
    free(raw);
    rc = dlrt__set_error(DLRT_ERR_OOM, "%s: out of host memory for %lld labels", path,
                         (long long)d.count);
    goto done;
  }
  rc = read_at(fd, path, raw, (size_t)d.count * label_size, REC_HEADER_BYTES + images);
  for (int64_t i = 0; i < d.count && rc == DLRT_OK; i++) {
    int64_t v = label_size == 1 ? raw[i] : (int32_t)get32(raw + 4 * i);
    if (v < 0 || v >= d.classes)
      rc = dlrt__set_error(DLRT_ERR_IO, "%s: label %lld of sample %lld is outside [0, %d) "
                           "(the header's class count): the file is corrupt", path,
                           (long long)v, (long long)i, d.classes);
    else
      d.labels[i] = (int32_t)v;
  }
  free(raw);
  if (rc < 0) goto done;

  if (flags & DLRT_DATASET_MMAP) {
    /* Map the whole file (offsets must be page aligned); images start after
     * the header. */
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
      rc = dlrt__set_error(DLRT_ERR_IO, "%s: cannot map the file: %s", path, strerror(errno));
      goto done;
    }
    madvise(map, (size_t)st.st_size, MADV_RANDOM); /* shuffled reads: no read-ahead */
    d.mapping = map;
    d.mapping_bytes = (size_t)st.st_size;
    d.images = (uint8_t *)map + REC_HEADER_BYTES;
  } else {
    d.images = malloc(images);
    if (!d.images) {
      rc = dlrt__set_error(DLRT_ERR_OOM, "%s: out of host memory for %zu bytes of images "
                           "(open it mapped: --mmap / DLRT_DATASET_MMAP)", path, images);
      goto done;
    }
    rc = read_at(fd, path, d.images, images, REC_HEADER_BYTES);
  }
  snprintf(d.source, sizeof d.source, "%s", path);

done:
  close(fd);
  if (rc < 0) {
    dlrt_dataset_free(&d);
    return rc;
  }
  *out = d;
  return DLRT_OK;
}
