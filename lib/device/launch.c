/* launch.c — see launch.h. */
#include "config.h"

#include <string.h>

#include "device/launch.h"
#include "util/status.h"

int dlrt__launch_operand(dlrt__launcher *lb, const char *name, dlrt_buffer_t *buf,
                         size_t offset, int64_t count, size_t esize) {
  DLRT__CHECK_ARG(buf, "%s: operand %s is NULL", lb->call, name);
  const dlrt__span *sp = dlrt__span_of(buf);
  if (sp->dev != lb->dev)
    return dlrt__set_error(DLRT_ERR_WRONG_DEVICE, "%s: %s is on %s but the stream is on %s",
                           lb->call, name, sp->dev->spec, lb->dev->spec);
  DLRT__CHECK_ARG(offset % esize == 0, "%s: offset %zu of %s is not a multiple of the "
                  "element size %zu", lb->call, offset, name, esize);
  if ((uint64_t)count > SIZE_MAX / esize ||
      !dlrt__range_ok(offset, (size_t)count * esize, sp->size))
    return dlrt__set_error(DLRT_ERR_OUT_OF_RANGE, "%s: %lld elements of %s (%zu bytes each) "
                           "from offset %zu do not fit its %zu bytes", lb->call,
                           (long long)count, name, esize, offset, sp->size);
  return DLRT_OK;
}

void dlrt__launch_mem_arg(dlrt__launcher *lb, dlrt_mem mem, size_t offset, size_t esize) {
  dlrt__arg *a = &lb->launch.args[lb->launch.n_args++];
  a->kind = DLRT__ARG_BUFFER;
  a->mem = mem;
  a->offset = offset;
  a->elem_size = esize;
}

void dlrt__launch_buffer_arg(dlrt__launcher *lb, dlrt_buffer_t *buf, size_t offset, size_t esize) {
  const dlrt__span *sp = dlrt__span_of(buf);
  dlrt__launch_mem_arg(lb, sp->mem, sp->offset + offset, esize);
}

void dlrt__launch_f32(dlrt__launcher *lb, float f) {
  dlrt__arg *a = &lb->launch.args[lb->launch.n_args++];
  a->kind = DLRT__ARG_F32;
  a->f = f;
}

void dlrt__launch_i64(dlrt__launcher *lb, int64_t i) {
  dlrt__arg *a = &lb->launch.args[lb->launch.n_args++];
  a->kind = DLRT__ARG_I64;
  a->i = i;
}

int dlrt__launch_submit(dlrt_stream_t *stream, dlrt__launcher *lb) {
  if (!lb->dev->be->launch)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "%s: the %s backend has no kernels in this "
                           "build", lb->call, lb->dev->be->name);
  return lb->dev->be->launch(stream->ctx, &lb->launch);
}

int dlrt__launch_start(dlrt__launcher *lb, dlrt_stream_t *stream, const char *call) {
  memset(lb, 0, sizeof *lb);
  lb->call = call;
  DLRT__CHECK_ARG(stream, "%s: stream is NULL", call);
  lb->dev = stream->dev;
  return DLRT_OK;
}

