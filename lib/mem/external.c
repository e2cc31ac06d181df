/* external.c — buffers over memory dlrt does not own: a cpu buffer over a
 * caller's host memory (a NumPy array, a PyTorch CPU tensor), so that data
 * another framework made is used in place, without a copy. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mem/buffer.h"
#include "util/status.h"

int dlrt_buffer_wrap_host(dlrt_device_t *dev, void *ptr, size_t bytes, dlrt_buffer_t **out) {
  DLRT__CHECK_ARG(dev && ptr && out, "dlrt_buffer_wrap_host: device, pointer or out is NULL");
  DLRT__CHECK_ARG(bytes > 0, "dlrt_buffer_wrap_host: %s: cannot wrap 0 bytes", dev->spec);
  /* Only the cpu backend addresses its buffers by host pointers; a GPU's or
   * an OpenCL device's memory is not the host's, even where it is mapped. */
  if (strcmp(dev->be->name, "cpu") != 0)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "%s cannot use host memory in place: only the "
                           "cpu device can; wrap it on cpu and copy it to %s "
                           "(dlrt_copy_d2d)", dev->spec, dev->spec);
  DLRT__CHECK_ARG((uintptr_t)ptr + bytes > (uintptr_t)ptr,
                  "dlrt_buffer_wrap_host: %zu bytes at %p wrap around the address space", bytes,
                  ptr);
  /* The device's memory state (opened and attached as for any buffer), so
   * that copies and kernels find its streams. */
  dlrt__mem_device *md = NULL;
  int rc = dlrt__mem_device_get(dev, &md);
  if (rc < 0) return rc;
  dlrt_buffer_t *buf = calloc(1, sizeof *buf);
  if (!buf) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  buf->span.dev = dev;
  buf->span.mem.handle = ptr;
  buf->span.mem.host = ptr;
  buf->span.size = bytes;
  buf->refs = 1; /* alloc stays NULL: dlrt_buffer_free releases the handle only */
  *out = buf;
  return DLRT_OK;
}
