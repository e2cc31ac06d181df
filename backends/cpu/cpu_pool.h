/* cpu_pool.h — the CPU backend's thread pool for its kernels (internal).
 * Idle workers sleep on a condition variable instead of spinning, so they
 * never take cycles from OpenBLAS's threads between kernels (an OpenMP team
 * spinning after each region halved training throughput). */
#ifndef DLRT_BACKENDS_CPU_POOL_H
#define DLRT_BACKENDS_CPU_POOL_H

#include <stdint.h>

/* Calls fn(ctx, s) for every s in [0, slices), spread over the pool's
 * threads and the caller; returns when all are done. Slices are handed out
 * in contiguous runs per thread, so which thread runs which slice never
 * changes the results. One region runs at a time. */
void cpu_pool_run(int64_t slices, void (*fn)(void *ctx, int64_t slice), void *ctx);
/* Threads a region uses (caller included). */
int cpu_pool_size(void);
/* Threads used by regions (0: one per core); takes effect at the next region. */
void cpu_pool_set_threads(int threads);
/* Stops the workers (at library shutdown). */
void cpu_pool_shutdown(void);

#endif
