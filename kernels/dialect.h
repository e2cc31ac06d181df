/* dialect.h — one kernel source, three compilers.
 *
 * A kernel written with these macros compiles as OpenCL C (embedded in the
 * library and built by the driver), as CUDA C (nvcc) and as plain C for the
 * CPU backend, where the caller hands each thread a slice [lo, hi) of the
 * index space. Example:
 *
 *   DLRT_KERNEL(ew_relu)(DLRT_RANGE DLRT_PTR(float, y), DLRT_CPTR(float, x),
 *                        DLRT_INDEX n) {
 *     DLRT_BIND(float, y);
 *     DLRT_CBIND(float, x);
 *     DLRT_FOR_EACH(i, n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
 *   }
 *
 * Array parameters are declared with DLRT_PTR / DLRT_CPTR and bound at the top
 * of the body with DLRT_BIND / DLRT_CBIND: OpenCL 1.2 cannot offset a buffer
 * at launch, so there each array arrives as (buffer, element offset) and the
 * bind adds them; in CUDA and C the pointer arrives already offset.
 *
 * Rules: fp32 and integer arithmetic only; no library calls beyond the
 * DLRT_ math macros below; one output element per index. */
#ifndef DLRT_KERNELS_DIALECT_H
#define DLRT_KERNELS_DIALECT_H

#if defined(__OPENCL_VERSION__)
#define DLRT_KERNEL(name) __kernel void name
#define DLRT_GLOBAL __global
#define DLRT_INDEX long
#define DLRT_RANGE
#define DLRT_PTR(T, p) __global T *p##_base, long p##_offset
#define DLRT_CPTR(T, p) __global const T *p##_base, long p##_offset
#define DLRT_BIND(T, p) __global T *p = p##_base + p##_offset
#define DLRT_CBIND(T, p) __global const T *p = p##_base + p##_offset
#define DLRT_FOR_EACH(i, n) \
  for (long i = (long)get_global_id(0); i < (n); i += (long)get_global_size(0))
#define DLRT_FMAX(a, b) fmax((a), (b))

#elif defined(__CUDACC__)
#define DLRT_KERNEL(name) extern "C" __global__ void name
#define DLRT_GLOBAL
#define DLRT_INDEX long long
#define DLRT_RANGE
#define DLRT_PTR(T, p) T *p
#define DLRT_CPTR(T, p) const T *p
#define DLRT_BIND(T, p) (void)0
#define DLRT_CBIND(T, p) (void)0
#define DLRT_FOR_EACH(i, n)                                                   \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (long long)gridDim.x * blockDim.x)
#define DLRT_FMAX(a, b) fmaxf((a), (b))

#else /* plain C */
#include <stdint.h>
#define DLRT_KERNEL(name) static inline void name
#define DLRT_GLOBAL
#define DLRT_INDEX int64_t
#define DLRT_RANGE int64_t dlrt_lo, int64_t dlrt_hi,
#define DLRT_PTR(T, p) T *p
#define DLRT_CPTR(T, p) const T *p
#define DLRT_BIND(T, p) (void)0
#define DLRT_CBIND(T, p) (void)0
#define DLRT_FOR_EACH(i, n) for (int64_t i = dlrt_lo; i < (dlrt_hi < (n) ? dlrt_hi : (n)); i++)
#define DLRT_FMAX(a, b) ((a) > (b) ? (a) : (b))
#endif

#endif
