/* cpu_internal.h — pieces of the CPU backend shared between its files. */
#ifndef DLRT_BACKENDS_CPU_INTERNAL_H
#define DLRT_BACKENDS_CPU_INTERNAL_H

#include "cpu_stream.h"
#include "device/backend.h"

/* "OpenBLAS 0.3.21 ..." — the BLAS this build calls. */
const char *cpu_blas_version(void);
/* OpenBLAS to one thread: the backend's pool runs GEMM blocks instead. */
void cpu_blas_single_threaded(void);
int cpu_gemm(void *stream, const dlrt_gemm_desc *d, dlrt_mem a, size_t a_off, dlrt_mem b,
             size_t b_off, dlrt_mem c, size_t c_off);
/* Threads for the CPU kernels and OpenBLAS (0: all cores). */
void cpu_set_threads(int threads);
/* Queues a kernel of kernels/ on the stream (cpu_kernels.c). */
int cpu_launch(void *stream, const dlrt__launch *launch);
int cpu_host_launch(const dlrt__launch *launch);

#endif
