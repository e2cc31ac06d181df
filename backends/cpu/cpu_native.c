/* cpu_native.c — which instruction set's native kernels run, and how a
 * native kernel's tasks are shared over the pool (see cpu_native.h). */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_native.h"
#include "cpu_pool.h"

/* Below this much work (elements) per part, one thread does it all: waking
 * a worker costs some microseconds. */
#define NATIVE_GRAIN 32768

/* No native kernel: the dialect's run (DLRT_CPU_ISA=dialect, to compare). */
static const cpu_native_isa cpu_native_dialect = {.name = "dialect"};

static int isa_supported(const cpu_native_isa *isa) {
  if (isa == &cpu_native_generic || isa == &cpu_native_dialect) return 1;
#if CPU_NATIVE_X86
  __builtin_cpu_init();
  int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (isa == &cpu_native_avx2) return avx2;
  if (isa == &cpu_native_avx512)
    return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
#endif
  return 0;
}

/* The instruction sets from best to worst. */
static const cpu_native_isa *const isas[] = {
#if CPU_NATIVE_X86
    &cpu_native_avx512, &cpu_native_avx2,
#endif
    &cpu_native_generic};

const cpu_native_isa *cpu_native_by_name(const char *name) {
  if (strcmp(name, cpu_native_dialect.name) == 0) return &cpu_native_dialect;
  for (size_t i = 0; i < sizeof isas / sizeof *isas; i++)
    if (strcmp(isas[i]->name, name) == 0) return isa_supported(isas[i]) ? isas[i] : NULL;
  return NULL;
}

static const cpu_native_isa *selected;

static void select_isa(void) {
  const char *want = getenv("DLRT_CPU_ISA");
  selected = want && *want ? cpu_native_by_name(want) : NULL;
  for (size_t i = 0; !selected && i < sizeof isas / sizeof *isas; i++)
    if (isa_supported(isas[i])) selected = isas[i];
}

const cpu_native_isa *cpu_native_selected(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, select_isa);
  return selected;
}

int cpu_native_parts(int64_t tasks, int64_t cost) {
  if (tasks < 1) return 1;
  double work = (double)tasks * (double)(cost > 1 ? cost : 1);
  int64_t parts = cpu_pool_size();
  if (parts > tasks) parts = tasks;
  if (parts > work / NATIVE_GRAIN) parts = (int64_t)(work / NATIVE_GRAIN);
  return parts < 1 ? 1 : (int)parts;
}

typedef struct {
  cpu_native_part_fn fn;
  void *ctx;
  int64_t tasks, parts;
} parallel_job;

static void run_part(void *ctx, int64_t part) {
  const parallel_job *j = ctx;
  int64_t lo = j->tasks * part / j->parts, hi = j->tasks * (part + 1) / j->parts;
  if (lo < hi) j->fn(j->ctx, lo, hi, (int)part);
}

void cpu_native_parallel(int64_t tasks, int parts, cpu_native_part_fn fn, void *ctx) {
  if (tasks < 1) return;
  parallel_job j = {fn, ctx, tasks, parts < 1 ? 1 : parts > tasks ? tasks : parts};
  if (j.parts == 1) fn(ctx, 0, tasks, 0);
  else cpu_pool_run(j.parts, run_part, &j);
}
