/* launch.h — building a kernel launch from public objects (internal): the
 * checks every op repeats (device, alignment, range) and the argument list
 * in the kernel's signature order. Used by lib/device/compute.c and the graph
 * executor. */
#ifndef DLRT_DEVICE_LAUNCH_H
#define DLRT_DEVICE_LAUNCH_H

#include "device/device.h"

typedef struct {
  const char *call; /* "dlrt_elementwise(add)": names the caller in messages */
  dlrt_device_t *dev;
  dlrt__launch launch;
} dlrt__launcher;

/* Starts a launch on `stream` (DLRT_ERR_INVALID_ARG when it is NULL). */
int dlrt__launch_start(dlrt__launcher *lb, dlrt_stream_t *stream, const char *call);
/* Checks that `count` elements of `esize` bytes of `buf` from byte `offset`
 * lie on the launcher's device, aligned and in range. */
int dlrt__launch_operand(dlrt__launcher *lb, const char *name, dlrt_buffer_t *buf,
                         size_t offset, int64_t count, size_t esize);
void dlrt__launch_buffer_arg(dlrt__launcher *lb, dlrt_buffer_t *buf, size_t offset,
                             size_t esize);
void dlrt__launch_mem_arg(dlrt__launcher *lb, dlrt_mem mem, size_t offset, size_t esize);
void dlrt__launch_f32(dlrt__launcher *lb, float f);
void dlrt__launch_i64(dlrt__launcher *lb, int64_t i);
/* Queues the launch (DLRT_ERR_UNSUPPORTED when the backend has no kernels;
 * DLRT_ERR_INVALID_ARG, naming the kernel and the argument, when the
 * arguments' count or kinds differ from the kernel's entry in the table). A
 * launch of zero items and zero groups does nothing and returns DLRT_OK
 * without reaching the backend. */
int dlrt__launch_submit(dlrt_stream_t *stream, dlrt__launcher *lb);

#endif
