/* launch.c — see launch.h. */
#include "config.h"

#include <string.h>

#include "device/launch.h"
#include "kernel_table.h"
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

static const char *kind_name(int kind) {
  return kind == DLRT__ARG_BUFFER ? "a buffer"
         : kind == DLRT__ARG_F32  ? "an f32"
         : kind == DLRT__ARG_I64  ? "an i64"
                                  : "of no known kind";
}

/* The launch against its kernel's entry in the kernel table: a wrong count
 * or kind of argument would compute garbage, not fail, in the backend. */
int dlrt__launch_check_args(const dlrt__launcher *lb) {
  const dlrt__launch *l = &lb->launch;
  if (l->kernel < 0 || l->kernel >= DLRT__K_COUNT)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: no kernel %d in kernels/kernel_table.h",
                           lb->call, l->kernel);
  const dlrt__kernel_info *k = &dlrt__kernel_table[l->kernel];
  if (l->n_args != k->n_args)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: kernel %s takes %d arguments "
                           "(kernels/kernel_table.h), the launch gives %d", lb->call, k->name,
                           k->n_args, l->n_args);
  for (int i = 0; i < l->n_args; i++)
    if ((int)l->args[i].kind != k->kinds[i])
      return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: argument %d of kernel %s is %s "
                             "(kernels/kernel_table.h), the launch gives %s", lb->call, i,
                             k->name, kind_name(k->kinds[i]), kind_name(l->args[i].kind));
  return DLRT_OK;
}

int dlrt__launch_submit(dlrt_stream_t *stream, dlrt__launcher *lb) {
  if (!lb->dev->be->launch)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "%s: the %s backend has no kernels in this "
                           "build", lb->call, lb->dev->be->name);
  int rc = dlrt__launch_check_args(lb);
  if (rc < 0) return rc;
  const dlrt__launch *l = &lb->launch;
  if (l->items < 0 || l->groups < 0)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: a launch of %lld items or %lld groups: "
                           "counts are never negative", lb->call, (long long)l->items,
                           (long long)l->groups);
  /* Nothing to run is success, and never reaches the backend: a GPU grid of
   * zero blocks is an error there (cudaErrorInvalidConfiguration). */
  if (l->items == 0 && l->groups == 0) return DLRT_OK;
  return lb->dev->be->launch(stream->ctx, &lb->launch);
}

int dlrt__launch_start(dlrt__launcher *lb, dlrt_stream_t *stream, const char *call) {
  memset(lb, 0, sizeof *lb);
  lb->call = call;
  DLRT__CHECK_ARG(stream, "%s: stream is NULL", call);
  lb->dev = stream->dev;
  return DLRT_OK;
}

