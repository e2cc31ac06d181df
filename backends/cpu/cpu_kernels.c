/* cpu_kernels.c — the kernels of kernels/ compiled as plain C, and their
 * launch on a CPU stream: item kernels split their index range, group kernels
 * their work-groups, over the backend's thread pool (cpu_pool.c). Where the
 * backend has a native version of a kernel (cpu_native.h), that runs in its
 * place, with the same arguments. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"
#include "cpu_native.h"
#include "cpu_pool.h"
#include "attention.h"
#include "elementwise.h"
#include "conv.h"
#include "nn.h"
#include "norm.h"
#include "optim.h"
#include "reduce.h"
#include "shape.h"
#include "transpose.h"
#include "typed.h"
#include "util/status.h"

typedef void (*cpu_kernel_fn)(const dlrt__arg *a, int64_t lo, int64_t hi);

/* One wrapper per entry of the kernel table: it unpacks the launch's
 * arguments `a` into the parameters the entry declares and calls the kernel.
 * First the entry is held to the kernel's signature: the function type it
 * describes must be the kernel's exactly (count, order of kinds, element
 * types and const), else the build stops here naming the kernel. */
#define ARG_OF(k, kind, type) ARG_##kind(k, type)
#define ARG_AT(k, arg) DLRT__KARG(ARG_OF, k, arg)
#define ARG_BUFFER(k, type) ((type)(void *)((char *)a[k].mem.host + a[k].offset))
#define ARG_F32(k, type) (a[k].f)
#define ARG_I64(k, type) (a[k].i)

#define WRAPPER(name, ...)                                                                \
  _Static_assert(_Generic(&dlrt_k_##name,                                                 \
                          void (*)(int64_t, int64_t, DLRT__KERNEL_PARAMS(__VA_ARGS__)): 1, \
                          default: 0),                                                    \
                 "kernels/kernel_table.h: the entry of dlrt_k_" #name                     \
                 " does not match the kernel's parameters");                              \
  static void w_##name(const dlrt__arg *a, int64_t lo, int64_t hi) {                      \
    dlrt_k_##name(lo, hi, DLRT__KMAP(ARG_AT, __VA_ARGS__));                               \
  }
DLRT_KERNEL_TABLE(WRAPPER)
#undef WRAPPER

static const cpu_kernel_fn kernels[DLRT__K_COUNT] = {
#define ENTRY(name, ...) [DLRT__K_##name] = w_##name,
    DLRT_KERNEL_TABLE(ENTRY)
#undef ENTRY
};

/* Below this many indices one thread is faster than waking a team; slices of
 * this many keep each thread on whole cache lines and pages. */
#define ITEM_GRAIN 16384

void cpu_set_threads(int threads) { cpu_pool_set_threads(threads); }

typedef struct {
  cpu_kernel_fn fn;
  int64_t items, groups, item_cost;
  dlrt__arg args[DLRT__MAX_ARGS];
} kernel_command;

typedef struct {
  const kernel_command *c;
  int64_t grain, total;
} slice_job;

static void run_slice(void *ctx, int64_t s) {
  const slice_job *j = ctx;
  int64_t lo = s * j->grain, hi = lo + j->grain < j->total ? lo + j->grain : j->total;
  j->c->fn(j->c->args, lo, hi);
}

static int run_kernel(void *payload) {
  const kernel_command *c = payload;
  int64_t total = c->items ? c->items : c->groups;
  int64_t cost = c->item_cost > 1 ? c->item_cost : 1;
  int64_t grain = c->items ? (ITEM_GRAIN + cost - 1) / cost : 1;
  int64_t slices = (total + grain - 1) / grain;
  if (slices <= 1) {
    c->fn(c->args, 0, total);
    return DLRT_OK;
  }
  /* Each slice writes its own outputs, so results never depend on which
   * thread ran it. */
  slice_job job = {c, grain, total};
  cpu_pool_run(slices, run_slice, &job);
  return DLRT_OK;
}

typedef struct {
  cpu_native_fn fn;
  dlrt__arg args[DLRT__MAX_ARGS];
} native_command;

static int run_native(void *payload) {
  const native_command *c = payload;
  return c->fn(c->args);
}

int cpu_host_launch(const dlrt__launch *l) {
  if (l->kernel < 0 || l->kernel >= DLRT__K_COUNT || !kernels[l->kernel])
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "cpu: no kernel %d", l->kernel);
  cpu_native_fn native = cpu_native_selected()->fn[l->kernel];
  if (native) return native(l->args);
  kernel_command c = {.fn = kernels[l->kernel], .items = l->items, .groups = l->groups,
                      .item_cost = l->item_cost};
  memcpy(c.args, l->args, sizeof c.args);
  return run_kernel(&c);
}

int cpu_launch(void *stream, const dlrt__launch *l) {
  kernel_command c;
  if (l->kernel < 0 || l->kernel >= DLRT__K_COUNT || !kernels[l->kernel])
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "cpu: no kernel %d", l->kernel);
  cpu_native_fn native = cpu_native_selected()->fn[l->kernel];
  if (native) {
    native_command n = {.fn = native};
    memcpy(n.args, l->args, sizeof n.args);
    return cpu_stream_enqueue(stream, run_native, &n, sizeof n);
  }
  c.fn = kernels[l->kernel];
  c.items = l->items;
  c.groups = l->groups;
  c.item_cost = l->item_cost;
  memcpy(c.args, l->args, sizeof c.args);
  return cpu_stream_enqueue(stream, run_kernel, &c, sizeof c);
}
