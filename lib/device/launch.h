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
/* The argument checks of dlrt__launch_submit: count and kinds against the
 * kernel's entry in the table. */
int dlrt__launch_check_args(const dlrt__launcher *lb);

/* A launch over host memory, run at once by the cpu backend (on the calling
 * thread and its pool: dlrt_set_cpu_threads), with its kernels (native
 * where it has them): the same bits as the launch on a cpu stream. Start
 * it with dlrt__host_launch_start, give host pointers with
 * dlrt__host_launch_ptr and scalars as for a device launch. */
void dlrt__host_launch_start(dlrt__launcher *lb, int kernel, int64_t items, const char *call);
void dlrt__host_launch_ptr(dlrt__launcher *lb, const void *ptr, size_t esize);
int dlrt__host_launch(dlrt__launcher *lb);
/* The segments per row of dlrt_reduce's first pass (a function of the shape
 * alone, so every device adds in the same order): for a host launch of the
 * same reduction (compute.c). */
int64_t dlrt__reduce_segments(int64_t rows, int64_t cols);

#endif
