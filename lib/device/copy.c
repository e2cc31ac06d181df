/* copy.c — copies host<->device, device<->device (same device, same backend,
 * across backends through pinned bounce buffers) and memset. A copy between
 * host and device memory on a device with a link model takes the model's
 * time (link.h); one within a device's memory, and memset, do not. */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include "device/link.h"
#include "device/registry.h"
#include "util/status.h"

/* Cross-backend copies move through two pinned chunks of this size, so the
 * device-to-host copy of one chunk overlaps the host-to-device of the other. */
#define BOUNCE_CHUNK ((size_t)8 << 20)

static int check_buffer(const dlrt_buffer_t *buf, size_t offset, size_t bytes,
                        const char *what) {
  const dlrt__span *buf_sp = dlrt__span_of(buf);
  DLRT__CHECK_ARG(buf, "%s buffer is NULL", what);
  if (!dlrt__range_ok(offset, bytes, buf_sp->size))
    return dlrt__set_error(DLRT_ERR_OUT_OF_RANGE, "%s: bytes [%zu, %zu + %zu) are outside "
                           "the %zu-byte buffer on %s", what, offset, offset, bytes, buf_sp->size,
                           buf_sp->dev->spec);
  return DLRT_OK;
}

/* Resolves the stream (NULL: default) and checks it belongs to `dev`. */
static int stream_for(dlrt_device_t *dev, dlrt_stream_t *stream, dlrt_stream_t **out,
                      const char *what) {
  if (!stream) {
    *out = dev->default_stream;
    return DLRT_OK;
  }
  if (stream->dev != dev)
    return dlrt__set_error(DLRT_ERR_WRONG_DEVICE, "%s: the buffer is on %s but the stream "
                           "is on %s", what, dev->spec, stream->dev->spec);
  *out = stream;
  return DLRT_OK;
}

static int finish(dlrt_stream_t *s, int blocking, int rc) {
  if (rc == DLRT_OK && blocking) rc = s->dev->be->stream_synchronize(s->ctx);
  return rc;
}

int dlrt_copy_h2d(dlrt_buffer_t *dst, size_t dst_offset, const void *src, size_t bytes,
                  dlrt_stream_t *stream) {
  const dlrt__span *dst_sp = dlrt__span_of(dst);
  dlrt_stream_t *s = NULL;
  int rc = check_buffer(dst, dst_offset, bytes, "dlrt_copy_h2d destination");
  if (rc < 0) return rc;
  DLRT__CHECK_ARG(src || bytes == 0, "dlrt_copy_h2d: source is NULL");
  if ((rc = stream_for(dst_sp->dev, stream, &s, "dlrt_copy_h2d")) < 0) return rc;
  if (bytes == 0) return DLRT_OK;
  void *gate;
  if ((rc = dlrt__link_begin(s, DLRT__LINK_H2D, bytes, &gate)) < 0) return rc;
  rc = dst_sp->dev->be->copy_h2d(s->ctx, dst_sp->mem, dst_sp->offset + dst_offset, src, bytes);
  return finish(s, stream == NULL, dlrt__link_end(s, gate, rc));
}

int dlrt_copy_d2h(void *dst, dlrt_buffer_t *src, size_t src_offset, size_t bytes,
                  dlrt_stream_t *stream) {
  const dlrt__span *src_sp = dlrt__span_of(src);
  dlrt_stream_t *s = NULL;
  int rc = check_buffer(src, src_offset, bytes, "dlrt_copy_d2h source");
  if (rc < 0) return rc;
  DLRT__CHECK_ARG(dst || bytes == 0, "dlrt_copy_d2h: destination is NULL");
  if ((rc = stream_for(src_sp->dev, stream, &s, "dlrt_copy_d2h")) < 0) return rc;
  if (bytes == 0) return DLRT_OK;
  void *gate;
  if ((rc = dlrt__link_begin(s, DLRT__LINK_D2H, bytes, &gate)) < 0) return rc;
  rc = src_sp->dev->be->copy_d2h(s->ctx, dst, src_sp->mem, src_sp->offset + src_offset, bytes);
  return finish(s, stream == NULL, dlrt__link_end(s, gate, rc));
}

/* Rows between host memory (`pitch` apart) and a buffer (packed), either
 * way: one backend call where it has one, else a copy per row. */
static int copy_rows(int to_device, dlrt_buffer_t *buf, size_t offset, void *host, size_t pitch,
                     size_t width, size_t rows, dlrt_stream_t *stream, const char *what) {
  const dlrt__span *buf_sp = dlrt__span_of(buf);
  dlrt_stream_t *s = NULL;
  DLRT__CHECK_ARG(pitch >= width && (rows < 2 || width <= SIZE_MAX / rows),
                  "%s: %zu rows of %zu bytes, %zu apart", what, rows, width, pitch);
  int rc = check_buffer(buf, offset, width * rows, what);
  if (rc < 0) return rc;
  DLRT__CHECK_ARG(host || width * rows == 0, "%s: host memory is NULL", what);
  if ((rc = stream_for(buf_sp->dev, stream, &s, what)) < 0) return rc;
  if (width * rows == 0) return DLRT_OK;
  const dlrt_backend_iface *be = buf_sp->dev->be;
  size_t at = buf_sp->offset + offset;
  char *h = host;
  void *gate; /* the rows are one copy on the link */
  if ((rc = dlrt__link_begin(s, to_device ? DLRT__LINK_H2D : DLRT__LINK_D2H, width * rows,
                             &gate)) < 0)
    return rc;
  if (to_device && be->copy_h2d_rows) {
    rc = be->copy_h2d_rows(s->ctx, buf_sp->mem, at, h, pitch, width, rows);
  } else if (!to_device && be->copy_d2h_rows) {
    rc = be->copy_d2h_rows(s->ctx, h, pitch, buf_sp->mem, at, width, rows);
  } else {
    for (size_t r = 0; r < rows && rc == DLRT_OK; r++)
      rc = to_device ? be->copy_h2d(s->ctx, buf_sp->mem, at + r * width, h + r * pitch, width)
                     : be->copy_d2h(s->ctx, h + r * pitch, buf_sp->mem, at + r * width, width);
  }
  return finish(s, stream == NULL, dlrt__link_end(s, gate, rc));
}

int dlrt_copy_h2d_rows(dlrt_buffer_t *dst, size_t dst_offset, const void *src, size_t pitch,
                       size_t width, size_t rows, dlrt_stream_t *stream) {
  return copy_rows(1, dst, dst_offset, (void *)src, pitch, width, rows, stream,
                   "dlrt_copy_h2d_rows");
}

int dlrt_copy_d2h_rows(void *dst, size_t pitch, dlrt_buffer_t *src, size_t src_offset,
                       size_t width, size_t rows, dlrt_stream_t *stream) {
  return copy_rows(0, src, src_offset, dst, pitch, width, rows, stream, "dlrt_copy_d2h_rows");
}

int dlrt_memset(dlrt_buffer_t *dst, size_t offset, int value, size_t bytes,
                dlrt_stream_t *stream) {
  const dlrt__span *dst_sp = dlrt__span_of(dst);
  dlrt_stream_t *s = NULL;
  int rc = check_buffer(dst, offset, bytes, "dlrt_memset");
  if (rc < 0) return rc;
  DLRT__CHECK_ARG(value >= 0 && value <= 255, "dlrt_memset: value %d is not a byte", value);
  if ((rc = stream_for(dst_sp->dev, stream, &s, "dlrt_memset")) < 0) return rc;
  if (bytes == 0) return DLRT_OK;
  rc = dst_sp->dev->be->memset(s->ctx, dst_sp->mem, dst_sp->offset + offset, value, bytes);
  return finish(s, stream == NULL, rc);
}

/* Between backends: chunks go src -> pinned (on src's stream) -> dst (on
 * dst's stream), two chunks in flight. The host waits for the whole copy. */
static int copy_bounce(dlrt_buffer_t *dst, size_t dst_off, dlrt_buffer_t *src,
                       size_t src_off, size_t bytes, dlrt_stream_t *src_s,
                       dlrt_stream_t *dst_s) {
  const dlrt__span *dst_sp = dlrt__span_of(dst);
  const dlrt__span *src_sp = dlrt__span_of(src);
  const dlrt_backend_iface *sb = src_sp->dev->be, *db = dst_sp->dev->be;
  size_t chunk = bytes < BOUNCE_CHUNK ? bytes : BOUNCE_CHUNK;
  void *bounce[2] = {NULL, NULL};
  void *done[2] = {NULL, NULL}; /* dst-side events: bounce[i] is free again */
  int rc;
  if ((rc = dlrt__device_pinned(src_sp->dev, chunk, &bounce[0])) < 0) goto out;
  if ((rc = dlrt__device_pinned(src_sp->dev, chunk, &bounce[1])) < 0) goto out;
  for (int i = 0; i < 2; i++)
    if ((rc = db->event_create(dst_sp->dev->ctx, &done[i])) < 0) goto out;
  int recorded[2] = {0, 0};
  for (size_t pos = 0, k = 0; pos < bytes; pos += chunk, k ^= 1) {
    size_t n = bytes - pos < chunk ? bytes - pos : chunk;
    /* Wait until the h2d that last read this bounce buffer has finished. */
    if (recorded[k] && (rc = db->event_synchronize(done[k])) < 0) goto out;
    size_t from = src_sp->offset + src_off + pos, to = dst_sp->offset + dst_off + pos;
    if ((rc = sb->copy_d2h(src_s->ctx, bounce[k], src_sp->mem, from, n)) < 0) goto out;
    if ((rc = sb->stream_synchronize(src_s->ctx)) < 0) goto out;
    if ((rc = db->copy_h2d(dst_s->ctx, dst_sp->mem, to, bounce[k], n)) < 0) goto out;
    if ((rc = db->event_record(done[k], dst_s->ctx)) < 0) goto out;
    recorded[k] = 1;
  }
  rc = db->stream_synchronize(dst_s->ctx);
out:
  for (int i = 0; i < 2; i++) {
    if (done[i]) db->event_destroy(done[i]);
    dlrt__device_pinned_free(src_sp->dev, bounce[i]);
  }
  return rc;
}

static int copy_between(dlrt_buffer_t *dst, size_t dst_offset, dlrt_buffer_t *src,
                        size_t src_offset, size_t bytes, dlrt_stream_t *s);

int dlrt_copy_d2d(dlrt_buffer_t *dst, size_t dst_offset, dlrt_buffer_t *src,
                  size_t src_offset, size_t bytes, dlrt_stream_t *stream) {
  const dlrt__span *dst_sp = dlrt__span_of(dst);
  const dlrt__span *src_sp = dlrt__span_of(src);
  int rc = check_buffer(dst, dst_offset, bytes, "dlrt_copy_d2d destination");
  if (rc == DLRT_OK) rc = check_buffer(src, src_offset, bytes, "dlrt_copy_d2d source");
  if (rc < 0) return rc;
  dlrt_device_t *sd = src_sp->dev, *dd = dst_sp->dev;
  if (stream && stream->dev != sd && stream->dev != dd)
    return dlrt__set_error(DLRT_ERR_WRONG_DEVICE, "dlrt_copy_d2d from %s to %s on a stream "
                           "of %s: use a stream of either device", sd->spec, dd->spec,
                           stream->dev->spec);
  dlrt_stream_t *s = stream ? stream : dd->default_stream;
  if (bytes == 0) return DLRT_OK;
  if (sd == dd) {
    rc = sd->be->copy_d2d(s->ctx, dst_sp->mem, dst_sp->offset + dst_offset, src_sp->mem,
                          src_sp->offset + src_offset, bytes);
    return finish(s, stream == NULL, rc);
  }
  /* Order the copy after work queued so far on the given stream; then it
   * takes its time on both devices' links (where they have models), which
   * the host waits out with the copy itself. */
  if ((rc = s->dev->be->stream_synchronize(s->ctx)) < 0) return rc;
  double end = dlrt__link_between(sd, dd, bytes);
  rc = copy_between(dst, dst_offset, src, src_offset, bytes, s);
  if (rc == DLRT_OK) dlrt__link_sleep_until(end);
  return rc;
}

/* dlrt_copy_d2d between two devices, after the work queued on `s`: each
 * device's own stream for its side. The host waits for it. */
static int copy_between(dlrt_buffer_t *dst, size_t dst_offset, dlrt_buffer_t *src,
                        size_t src_offset, size_t bytes, dlrt_stream_t *s) {
  const dlrt__span *dst_sp = dlrt__span_of(dst);
  const dlrt__span *src_sp = dlrt__span_of(src);
  dlrt_device_t *sd = src_sp->dev, *dd = dst_sp->dev;
  dlrt_stream_t *src_s = s->dev == sd ? s : sd->default_stream;
  dlrt_stream_t *dst_s = s->dev == dd ? s : dd->default_stream;
  int rc;
  if (sd->be == dd->be && sd->be->copy_peer) {
    /* The peer copy runs on s, one device's stream: the other device's
     * stream may still be writing the source or reading the destination,
     * and its later work must see the copy done. Both sides wait, before
     * and after. */
    dlrt_stream_t *other = s == src_s ? dst_s : src_s;
    if ((rc = other->dev->be->stream_synchronize(other->ctx)) < 0) return rc;
    rc = sd->be->copy_peer(s->ctx, dd->ctx, dst_sp->mem, dst_sp->offset + dst_offset, sd->ctx,
                           src_sp->mem, src_sp->offset + src_offset, bytes);
    if (rc != DLRT_ERR_UNSUPPORTED) return finish(s, 1, rc);
  }
  /* Host-addressable on both sides (CPU): one memcpy after both are idle. */
  if (src_sp->mem.host && dst_sp->mem.host) {
    if ((rc = sd->be->stream_synchronize(src_s->ctx)) < 0) return rc;
    if ((rc = dd->be->stream_synchronize(dst_s->ctx)) < 0) return rc;
    memmove((char *)dst_sp->mem.host + dst_sp->offset + dst_offset,
            (char *)src_sp->mem.host + src_sp->offset + src_offset, bytes);
    return DLRT_OK;
  }
  if (src_sp->mem.host) {
    if ((rc = sd->be->stream_synchronize(src_s->ctx)) < 0) return rc;
    return finish(dst_s, 1, dd->be->copy_h2d(dst_s->ctx, dst_sp->mem, dst_sp->offset + dst_offset,
                                             (char *)src_sp->mem.host + src_sp->offset + src_offset,
                                             bytes));
  }
  if (dst_sp->mem.host) {
    if ((rc = dd->be->stream_synchronize(dst_s->ctx)) < 0) return rc;
    return finish(src_s, 1, sd->be->copy_d2h(src_s->ctx, (char *)dst_sp->mem.host + dst_sp->offset +
                                             dst_offset, src_sp->mem, src_sp->offset + src_offset,
                                             bytes));
  }
  return copy_bounce(dst, dst_offset, src, src_offset, bytes, src_s, dst_s);
}
