/*
 * test-registry-shutdown.c — the registry shuts down every backend it
 * started (lib/device/registry.c), including one that started with no
 * context and no device.
 *
 * The CUDA backend starts that way on a machine without a GPU and keeps its
 * process-wide state (NCCL communicators, NVML) outside any context; a
 * registry that shut down only backends with a non-NULL context never ran
 * cuda_shutdown, so NCCL communicators were never destroyed. The registry
 * is internal, so this program is built from its source (see Makefile.am)
 * with stand-ins for the compiled backends and for closing devices, which
 * record what the registry asks of them.
 */
#include <stdlib.h>
#include <string.h>

#include "device/backend.h"
#include "device/registry.h"
#include "tap.h"

/* ---------------------------------------------------------------- stand-ins */

typedef struct {
  int inits, shutdowns, devices_closed;
  int closed_after_shutdown; /* devices closed after their backend: a use after free */
  void *ctx_at_shutdown;
  int n_devices;      /* what init reports */
  int fail_init;      /* init returns an error */
  void *ctx_from_init; /* what init stores in *ctx */
} standin_state;

/* Indexed as the registry's backends may be: cuda, opencl, cpu. */
static standin_state state[3];
static int cpu_ctx_token;

#define STANDIN(idx, backend_name)                                                           \
  static int init_##idx(void **ctx, int *n) {                                              \
    state[idx].inits++;                                                                      \
    *ctx = state[idx].ctx_from_init;                                                         \
    *n = state[idx].n_devices;                                                               \
    return state[idx].fail_init ? DLRT_ERR_BACKEND : DLRT_OK;                               \
  }                                                                                          \
  static void shutdown_##idx(void *ctx) {                                                    \
    state[idx].shutdowns++;                                                                  \
    state[idx].ctx_at_shutdown = ctx;                                                        \
  }                                                                                          \
  static int props_##idx(void *ctx, int i, dlrt_device_props *p) {                           \
    (void)ctx;                                                                               \
    (void)i;                                                                                 \
    memset(p, 0, sizeof *p);                                                                 \
    p->total_memory = 1 << 20;                                                               \
    return DLRT_OK;                                                                          \
  }                                                                                          \
  const dlrt_backend_iface dlrt__backend_##backend_name = {                                 \
      .api_version = DLRT_BACKEND_API_VERSION,                                               \
      .name = #backend_name,                                                                 \
      .init = init_##idx,                                                                    \
      .shutdown = shutdown_##idx,                                                            \
      .device_props = props_##idx,                                                           \
  };

STANDIN(0, cuda)
STANDIN(1, opencl)
STANDIN(2, cpu)

/* device.c's close, which the registry calls for each device at teardown. */
void dlrt__device_close(dlrt_device_t *dev) {
  for (int i = 0; i < 3; i++)
    if (dev->be == (i == 0 ? &dlrt__backend_cuda : i == 1 ? &dlrt__backend_opencl
                                                             : &dlrt__backend_cpu))
    {
      state[i].devices_closed++;
      state[i].closed_after_shutdown += state[i].shutdowns > 0;
    }
}

/* ---------------------------------------------------------------- tests */

static void reset(void) {
  memset(state, 0, sizeof state);
  /* As on a machine without a GPU or an OpenCL platform: cuda and opencl
   * start with no device and no context, the cpu with both. */
  state[2].n_devices = 1;
  state[2].ctx_from_init = &cpu_ctx_token;
}

static void test_shutdown_without_ctx(void) {
  reset();
  unsetenv("DLRT_BACKEND");
  is_status(dlrt_init(), DLRT_OK, "dlrt_init with cuda and opencl finding no device");
  is_int(dlrt_device_count(), 1, "only the cpu device is listed");
  dlrt_shutdown();
  const char *names[] = {"cuda", "opencl", "cpu"};
  for (int i = 0; i < 3; i++) {
    is_int(state[i].inits, 1, "%s was started once", names[i]);
    is_int(state[i].shutdowns, 1, "%s was shut down once%s", names[i],
           i < 2 ? ", though it has no context and no device" : "");
  }
  ok(state[2].ctx_at_shutdown == &cpu_ctx_token, "the cpu's shutdown is given its context");
  ok(state[0].ctx_at_shutdown == NULL, "cuda's shutdown is given its NULL context");
  is_int(state[2].devices_closed, 1, "the cpu device was closed");
  is_int(state[2].closed_after_shutdown, 0, "before its backend was shut down");
  dlrt_shutdown();
  is_int(state[0].shutdowns + state[1].shutdowns + state[2].shutdowns, 3,
         "a second dlrt_shutdown shuts nothing down again");
}

static void test_failed_and_left_out(void) {
  reset();
  state[1].fail_init = 1;
  is_status(dlrt_init(), DLRT_OK, "dlrt_init with opencl failing to start");
  dlrt_shutdown();
  is_int(state[1].shutdowns, 0, "a backend whose init failed is not shut down");
  is_int(state[0].shutdowns, 1, "the others are");

  reset();
  setenv("DLRT_BACKEND", "cpu", 1);
  is_status(dlrt_init(), DLRT_OK, "dlrt_init with DLRT_BACKEND=cpu");
  dlrt_shutdown();
  unsetenv("DLRT_BACKEND");
  is_int(state[0].inits + state[0].shutdowns, 0,
         "a backend DLRT_BACKEND leaves out is neither started nor shut down");
  is_int(state[2].shutdowns, 1, "the one it names is shut down");
}

static void test_restart(void) {
  reset();
  is_status(dlrt_init(), DLRT_OK, "dlrt_init");
  dlrt_shutdown();
  is_status(dlrt_init(), DLRT_OK, "dlrt_init again after dlrt_shutdown");
  dlrt_shutdown();
  is_int(state[0].inits, 2, "cuda started twice");
  is_int(state[0].shutdowns, 2, "and shut down twice");
}

int main(void) {
  test_shutdown_without_ctx();
  test_failed_and_left_out();
  test_restart();
  return done_testing();
}
