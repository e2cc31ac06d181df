/* device.c — device properties and lifetime, the upper layer's attachment,
 * raw memory, streams and events. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "device/link.h"
#include "device/registry.h"
#include "util/status.h"

/* ---------------------------------------------------------------- devices */

static int stream_new(dlrt_device_t *dev, int is_default, dlrt_stream_t **out);

int dlrt__device_ensure_open(dlrt_device_t *dev) {
  int rc = DLRT_OK;
  if (__atomic_load_n(&dev->open, __ATOMIC_ACQUIRE)) return DLRT_OK;
  pthread_mutex_lock(&dev->lock);
  if (dev->open) goto out;
  void *ctx = NULL;
  rc = dev->be->device_open(dev->be_ctx, dev->index, &ctx);
  if (rc < 0) {
    rc = dlrt__set_error(rc, "%s: cannot open the device: %s", dev->spec, dlrt_last_error());
    goto out;
  }
  dev->ctx = ctx; /* published below, once the default stream exists */
  if ((rc = stream_new(dev, 1, &dev->default_stream)) < 0) goto fail;
  /* DLRT_LINK's model, before anyone can queue a copy (a preset measures
   * its GEMM on the default stream). */
  if ((rc = dlrt__link_open_env(dev)) < 0) goto fail;
  __atomic_store_n(&dev->open, 1, __ATOMIC_RELEASE);
  goto out;
fail:
  if (dev->default_stream) {
    dev->be->stream_destroy(dev->default_stream->ctx);
    free(dev->default_stream);
    dev->default_stream = NULL;
    dev->streams = NULL;
  }
  dlrt__link_close(dev);
  dev->be->device_close(ctx);
  dev->ctx = NULL;
out:
  pthread_mutex_unlock(&dev->lock);
  return rc;
}

void dlrt__device_close(dlrt_device_t *dev) {
  if (!dev->open) return;
  dlrt__device_sync_all(dev);
  if (dev->attached) dev->hooks->close(dev->attached);
  dev->attached = NULL;
  dev->hooks = NULL;
  /* Streams the caller forgot are released with the device. */
  while (dev->streams) {
    dlrt_stream_t *s = dev->streams;
    dev->streams = s->next;
    dev->be->stream_destroy(s->ctx);
    free(s);
  }
  dlrt__link_close(dev);
  dev->be->device_close(dev->ctx);
  dev->ctx = NULL;
  dev->default_stream = NULL;
  dev->open = 0;
}

int dlrt__device_sync_all(dlrt_device_t *dev) {
  int rc = DLRT_OK;
  pthread_mutex_lock(&dev->lock);
  for (dlrt_stream_t *s = dev->streams; s; s = s->next) {
    int r = dev->be->stream_synchronize(s->ctx);
    if (r < 0 && rc == DLRT_OK) rc = r;
  }
  pthread_mutex_unlock(&dev->lock);
  return rc;
}

int dlrt__device_attached(dlrt_device_t *dev, const dlrt__device_hooks *hooks, void **state) {
  void *have = __atomic_load_n(&dev->attached, __ATOMIC_ACQUIRE);
  if (have && dev->hooks == hooks) {
    *state = have;
    return DLRT_OK;
  }
  int rc = dlrt__device_ensure_open(dev);
  if (rc < 0) return rc;
  pthread_mutex_lock(&dev->attach_lock);
  if (dev->attached && dev->hooks != hooks) {
    rc = dlrt__set_error(DLRT_ERR_STATE, "%s: another layer is attached", dev->spec);
  } else if (!dev->attached) {
    void *made = NULL;
    if ((rc = hooks->create(dev, &made)) == DLRT_OK) {
      dev->hooks = hooks;
      __atomic_store_n(&dev->attached, made, __ATOMIC_RELEASE);
    }
  }
  if (rc == DLRT_OK) *state = dev->attached;
  pthread_mutex_unlock(&dev->attach_lock);
  return rc;
}

/* The attached state, or DLRT_ERR_STATE naming `what`. */
static int attached_for(dlrt_device_t *dev, const char *what, void **state) {
  *state = __atomic_load_n(&dev->attached, __ATOMIC_ACQUIRE);
  if (!*state)
    return dlrt__set_error(DLRT_ERR_STATE, "%s: %s has no memory layer attached (allocate a "
                           "buffer on it first)", what, dev->spec);
  return DLRT_OK;
}

int dlrt__device_scratch(dlrt_device_t *dev, size_t bytes, dlrt_stream_t *stream,
                         dlrt_buffer_t **out) {
  void *st;
  int rc = attached_for(dev, "device scratch", &st);
  return rc < 0 ? rc : dev->hooks->scratch_alloc(st, bytes, stream, out);
}

void dlrt__device_scratch_free(dlrt_device_t *dev, dlrt_buffer_t *buf) {
  if (buf && dev->attached) dev->hooks->scratch_free(dev->attached, buf);
}

int dlrt__device_pinned(dlrt_device_t *dev, size_t bytes, void **out) {
  void *st;
  int rc = attached_for(dev, "pinned scratch", &st);
  return rc < 0 ? rc : dev->hooks->pinned_alloc(st, bytes, out);
}

void dlrt__device_pinned_free(dlrt_device_t *dev, void *ptr) {
  if (ptr && dev->attached) dev->hooks->pinned_free(dev->attached, ptr);
}

/* ---------------------------------------------------------------- raw memory */

int dlrt__device_mem_alloc(dlrt_device_t *dev, size_t bytes, dlrt_mem *out) {
  return dev->be->mem_alloc(dev->ctx, bytes, out);
}

void dlrt__device_mem_free(dlrt_device_t *dev, dlrt_mem mem) { dev->be->mem_free(dev->ctx, mem); }

int dlrt__device_host_alloc(dlrt_device_t *dev, size_t bytes, dlrt_mem *out) {
  void *handle = NULL;
  int rc = dev->be->host_alloc(dev->ctx, bytes, &out->host, &handle);
  out->handle = handle ? handle : out->host;
  return rc;
}

void dlrt__device_host_free(dlrt_device_t *dev, dlrt_mem mem) {
  dev->be->host_free(dev->ctx, mem.host, mem.handle == mem.host ? NULL : mem.handle);
}

int dlrt_device_synchronize(dlrt_device_t *dev) {
  DLRT__CHECK_ARG(dev, "device is NULL");
  if (!__atomic_load_n(&dev->open, __ATOMIC_ACQUIRE)) return DLRT_OK;
  return dlrt__device_sync_all(dev);
}

int dlrt_device_props_get(dlrt_device_t *dev, dlrt_device_props *props) {
  DLRT__CHECK_ARG(dev && props, "device or props is NULL");
  memset(props, 0, sizeof *props);
  int rc = dev->be->device_props(dev->be_ctx, dev->index, props);
  if (rc < 0) return rc;
  snprintf(props->spec, sizeof props->spec, "%s", dev->spec);
  snprintf(props->backend, sizeof props->backend, "%s", dev->be->name);
  props->index = dev->index;
  if (props->free_memory == DLRT__FREE_MEMORY_UNKNOWN) {
    void *st = __atomic_load_n(&dev->attached, __ATOMIC_ACQUIRE);
    uint64_t reserved = st ? dev->hooks->reserved(st) : 0;
    props->free_memory = props->total_memory > reserved ? props->total_memory - reserved : 0;
  }
  if (props->free_memory > props->total_memory) props->free_memory = props->total_memory;
  return DLRT_OK;
}

const char *dlrt_device_spec(const dlrt_device_t *dev) { return dev ? dev->spec : NULL; }

/* ---------------------------------------------------------------- streams */

static int stream_new(dlrt_device_t *dev, int is_default, dlrt_stream_t **out) {
  dlrt_stream_t *s = calloc(1, sizeof *s);
  if (!s) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  int rc = dev->be->stream_create(dev->ctx, &s->ctx);
  if (rc < 0) {
    free(s);
    return rc;
  }
  s->dev = dev;
  s->is_default = is_default;
  s->next = dev->streams;
  dev->streams = s;
  *out = s;
  return DLRT_OK;
}

int dlrt_stream_create(dlrt_device_t *dev, dlrt_stream_t **out) {
  DLRT__CHECK_ARG(dev && out, "device or out is NULL");
  int rc = dlrt__device_ensure_open(dev);
  if (rc < 0) return rc;
  pthread_mutex_lock(&dev->lock);
  rc = stream_new(dev, 0, out);
  pthread_mutex_unlock(&dev->lock);
  return rc;
}

void dlrt_stream_destroy(dlrt_stream_t *s) {
  if (!s || s->is_default) return;
  dlrt_device_t *dev = s->dev;
  dev->be->stream_synchronize(s->ctx);
  void *st = __atomic_load_n(&dev->attached, __ATOMIC_ACQUIRE);
  if (st) dev->hooks->stream_destroyed(st, s);
  pthread_mutex_lock(&dev->lock);
  for (dlrt_stream_t **p = &dev->streams; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      break;
    }
  pthread_mutex_unlock(&dev->lock);
  dev->be->stream_destroy(s->ctx);
  free(s);
}

dlrt_stream_t *dlrt_device_default_stream(dlrt_device_t *dev) {
  if (!dev || dlrt__device_ensure_open(dev) < 0) return NULL;
  return dev->default_stream;
}

dlrt_device_t *dlrt_stream_device(const dlrt_stream_t *s) { return s ? s->dev : NULL; }

int dlrt_stream_synchronize(dlrt_stream_t *s) {
  DLRT__CHECK_ARG(s, "stream is NULL");
  return s->dev->be->stream_synchronize(s->ctx);
}

/* ---------------------------------------------------------------- events */

int dlrt_event_create(dlrt_device_t *dev, dlrt_event_t **out) {
  DLRT__CHECK_ARG(dev && out, "device or out is NULL");
  int rc = dlrt__device_ensure_open(dev);
  if (rc < 0) return rc;
  dlrt_event_t *e = calloc(1, sizeof *e);
  if (!e) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  rc = dev->be->event_create(dev->ctx, &e->ctx);
  if (rc < 0) {
    free(e);
    return rc;
  }
  e->dev = dev;
  *out = e;
  return DLRT_OK;
}

void dlrt_event_destroy(dlrt_event_t *e) {
  if (!e) return;
  e->dev->be->event_destroy(e->ctx);
  free(e);
}

int dlrt_event_record(dlrt_event_t *e, dlrt_stream_t *s) {
  DLRT__CHECK_ARG(e && s, "event or stream is NULL");
  if (s->dev != e->dev)
    return dlrt__set_error(DLRT_ERR_WRONG_DEVICE, "event of %s recorded on a stream of %s: "
                           "create the event on the stream's device", e->dev->spec, s->dev->spec);
  int rc = e->dev->be->event_record(e->ctx, s->ctx);
  if (rc == DLRT_OK) e->recorded = 1;
  return rc;
}

static int require_recorded(const dlrt_event_t *e, const char *what) {
  if (!e->recorded)
    return dlrt__set_error(DLRT_ERR_STATE, "%s: the event on %s was never recorded "
                           "(call dlrt_event_record first)", what, e->dev->spec);
  return DLRT_OK;
}

int dlrt_stream_wait_event(dlrt_stream_t *s, dlrt_event_t *e) {
  DLRT__CHECK_ARG(s && e, "stream or event is NULL");
  int rc = require_recorded(e, "dlrt_stream_wait_event");
  if (rc < 0) return rc;
  if (s->dev == e->dev) return s->dev->be->stream_wait_event(s->ctx, e->ctx);
  /* Another device: no shared event object, so the host waits. Work queued on
   * `s` afterwards cannot start before this returns. */
  return e->dev->be->event_synchronize(e->ctx);
}

int dlrt_event_synchronize(dlrt_event_t *e) {
  DLRT__CHECK_ARG(e, "event is NULL");
  int rc = require_recorded(e, "dlrt_event_synchronize");
  return rc < 0 ? rc : e->dev->be->event_synchronize(e->ctx);
}

int dlrt_event_query(dlrt_event_t *e) {
  DLRT__CHECK_ARG(e, "event is NULL");
  int rc = require_recorded(e, "dlrt_event_query");
  return rc < 0 ? rc : e->dev->be->event_query(e->ctx);
}

int dlrt_event_elapsed_ms(dlrt_event_t *start, dlrt_event_t *end, float *ms) {
  DLRT__CHECK_ARG(start && end && ms, "start, end or ms is NULL");
  if (start->dev != end->dev)
    return dlrt__set_error(DLRT_ERR_WRONG_DEVICE, "elapsed time between events of %s and "
                           "%s: both must be on one device", start->dev->spec, end->dev->spec);
  int rc = require_recorded(start, "dlrt_event_elapsed_ms");
  if (rc == DLRT_OK) rc = require_recorded(end, "dlrt_event_elapsed_ms");
  return rc < 0 ? rc : start->dev->be->event_elapsed_ms(start->ctx, end->ctx, ms);
}
