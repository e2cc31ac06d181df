/* host_launch.c — kernels of kernels/ run at once over host memory by the
 * cpu backend (dlrt__host_launch, launch.h): the host-side optimizer of
 * offloaded state. Apart from launch.c so that tests that build the
 * launcher with stand-in backends need no registry. */
#include "config.h"

#include <string.h>

#include "device/launch.h"
#include "device/registry.h" /* dlrt__ensure_init */
#include "util/status.h"

void dlrt__host_launch_start(dlrt__launcher *lb, int kernel, int64_t items, const char *call) {
  memset(lb, 0, sizeof *lb);
  lb->call = call;
  lb->launch.kernel = kernel;
  lb->launch.items = items;
}

void dlrt__host_launch_ptr(dlrt__launcher *lb, const void *ptr, size_t esize) {
  dlrt_mem mem = {.handle = (void *)ptr, .host = (void *)ptr};
  dlrt__launch_mem_arg(lb, mem, 0, esize);
}

int dlrt__host_launch(dlrt__launcher *lb) {
  int rc = dlrt__ensure_init();
  if (rc == DLRT_OK) rc = dlrt__launch_check_args(lb);
  if (rc < 0) return rc;
  if (!dlrt__backend_cpu.host_launch)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "%s: the cpu backend runs no host kernels",
                           lb->call);
  const dlrt__launch *l = &lb->launch;
  if (l->items < 0 || l->groups < 0)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: a launch of %lld items or %lld groups",
                           lb->call, (long long)l->items, (long long)l->groups);
  if (l->items == 0 && l->groups == 0) return DLRT_OK;
  return dlrt__backend_cpu.host_launch(l);
}
