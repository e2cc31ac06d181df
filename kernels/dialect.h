/* dialect.h — one kernel source, three compilers.
 *
 * A kernel written with these macros compiles as OpenCL C 1.2 (embedded in
 * the library and built by the driver), as CUDA C (nvcc) and as plain C for
 * the CPU backend. Two shapes of kernel exist:
 *
 * Item kernels: one output element per index, grid-stride on GPUs, a slice
 * [lo, hi) of the index space per CPU thread.
 *
 *   DLRT_KERNEL(relu_f32)(DLRT_RANGE DLRT_PTR(float, y), DLRT_CPTR(float, x),
 *                         DLRT_INDEX n) {
 *     DLRT_BIND(float, y);
 *     DLRT_CBIND(float, x);
 *     DLRT_FOR_EACH(i, n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
 *   }
 *
 * Group kernels: work-groups of DLRT_WG work-items sharing local memory and
 * barriers. The body is a sequence of phases separated by DLRT_BARRIER();
 * a GPU runs each phase once per work-item, the CPU runs it as a loop over
 * the work-items (the barrier is then the loop's end). So: anything that must
 * survive a barrier lives in DLRT_LOCAL memory indexed by the work-item, and
 * every work-item of a group takes the same path through the barriers.
 *
 *   DLRT_LOCAL(float, partial, DLRT_WG);   (outermost scope: OpenCL's rule)
 *   DLRT_FOR_EACH_GROUP(g, n_groups) {
 *     DLRT_PHASE(lid) { partial[lid] = ...; }
 *     DLRT_BARRIER();
 *     DLRT_PHASE(lid) { if (lid == 0) out[g] = partial[0] + ...; }
 *     DLRT_BARRIER();
 *   }
 *
 * Array parameters are declared with DLRT_PTR / DLRT_CPTR and bound at the top
 * of the body with DLRT_BIND / DLRT_CBIND: OpenCL 1.2 cannot offset a buffer
 * at launch, so there each array arrives as (buffer, element offset) and the
 * bind adds them; in CUDA and C the pointer arrives already offset.
 *
 * Storage types: f32 is float; f16 and bf16 are stored as 16-bit words
 * (DLRT_U16) and read/written through DLRT_LD_* / DLRT_ST_*, which convert to
 * and from float (round to nearest even). Arithmetic is always fp32. */
#ifndef DLRT_KERNELS_DIALECT_H
#define DLRT_KERNELS_DIALECT_H

/* Work-items per work-group of group kernels (a power of two). */
#define DLRT_WG 256

#if defined(__OPENCL_VERSION__)
/* ------------------------------------------------------------ OpenCL C */
/* No a*b+c contraction into fma: elementwise results then agree bit for bit
 * with the CPU backend (nvcc gets --fmad=false for the same reason). */
#pragma OPENCL FP_CONTRACT OFF
#define DLRT_KERNEL(name) __kernel void name
#define DLRT_INDEX long
#define DLRT_U16 ushort
#define DLRT_RANGE
#define DLRT_PTR(T, p) __global T *p##_base, long p##_offset
#define DLRT_CPTR(T, p) __global const T *p##_base, long p##_offset
#define DLRT_BIND(T, p) __global T *p = p##_base + p##_offset
#define DLRT_CBIND(T, p) __global const T *p = p##_base + p##_offset
#define DLRT_GLOBAL_PTR(T) __global T *
#define DLRT_GLOBAL_CPTR(T) __global const T *
#define DLRT_FOR_EACH(i, n) \
  for (long i = (long)get_global_id(0); i < (n); i += (long)get_global_size(0))
#define DLRT_FOR_EACH_GROUP(g, n) \
  for (long g = (long)get_group_id(0); g < (n); g += (long)get_num_groups(0))
#define DLRT_LOCAL(T, name, count) __local T name[count]
#define DLRT_BARRIER() barrier(CLK_LOCAL_MEM_FENCE)
#define DLRT_PHASE(lid) \
  for (int lid = (int)get_local_id(0), dlrt_once_ = 1; dlrt_once_; dlrt_once_ = 0)
#define DLRT_AS_UINT(f) as_uint(f)
#define DLRT_AS_FLOAT(u) as_float(u)
#define DLRT_FMAX(a, b) fmax((a), (b))
#define DLRT_EXP(x) exp(x)
#define DLRT_LOG(x) log(x)
#define DLRT_SQRT(x) sqrt(x)
#define DLRT_TANH(x) tanh(x)
#define DLRT_ERF(x) erf(x)
#define DLRT_LD_F16(p, i) vload_half((i), (__global const half *)(p))
#define DLRT_ST_F16(p, i, v) vstore_half_rte((v), (i), (__global half *)(p))
#define DLRT_INLINE static inline

#elif defined(__CUDACC__)
/* ------------------------------------------------------------ CUDA C */
#include <cuda_fp16.h>
#define DLRT_KERNEL(name) extern "C" __global__ void __launch_bounds__(DLRT_WG) name
#define DLRT_INDEX long long
#define DLRT_U16 unsigned short
#define DLRT_RANGE
#define DLRT_PTR(T, p) T *p
#define DLRT_CPTR(T, p) const T *p
#define DLRT_BIND(T, p) (void)0
#define DLRT_CBIND(T, p) (void)0
#define DLRT_GLOBAL_PTR(T) T *
#define DLRT_GLOBAL_CPTR(T) const T *
#define DLRT_FOR_EACH(i, n)                                                     \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (long long)gridDim.x * blockDim.x)
#define DLRT_FOR_EACH_GROUP(g, n) \
  for (long long g = blockIdx.x; g < (n); g += gridDim.x)
#define DLRT_LOCAL(T, name, count) __shared__ T name[count]
#define DLRT_BARRIER() __syncthreads()
#define DLRT_PHASE(lid) \
  for (int lid = (int)threadIdx.x, dlrt_once_ = 1; dlrt_once_; dlrt_once_ = 0)
#define DLRT_AS_UINT(f) __float_as_uint(f)
#define DLRT_AS_FLOAT(u) __uint_as_float(u)
#define DLRT_FMAX(a, b) fmaxf((a), (b))
#define DLRT_EXP(x) expf(x)
#define DLRT_LOG(x) logf(x)
#define DLRT_SQRT(x) sqrtf(x)
#define DLRT_TANH(x) tanhf(x)
#define DLRT_ERF(x) erff(x)
#define DLRT_LD_F16(p, i) __half2float(__ushort_as_half((p)[i]))
#define DLRT_ST_F16(p, i, v) ((p)[i] = __half_as_ushort(__float2half_rn(v)))
#define DLRT_INLINE __device__ __forceinline__

#else
/* ------------------------------------------------------------ plain C */
#include <math.h>
#include <stdint.h>
#include <string.h>
#define DLRT_KERNEL(name) static inline void name
#define DLRT_INDEX int64_t
#define DLRT_U16 uint16_t
#define DLRT_RANGE int64_t dlrt_lo, int64_t dlrt_hi,
#define DLRT_PTR(T, p) T *p
#define DLRT_CPTR(T, p) const T *p
#define DLRT_BIND(T, p) (void)0
#define DLRT_CBIND(T, p) (void)0
#define DLRT_GLOBAL_PTR(T) T *
#define DLRT_GLOBAL_CPTR(T) const T *
#define DLRT_FOR_EACH(i, n) for (int64_t i = dlrt_lo; i < (dlrt_hi < (n) ? dlrt_hi : (n)); i++)
#define DLRT_FOR_EACH_GROUP(g, n) DLRT_FOR_EACH(g, n)
/* Zeroed: the compiler cannot see that a phase writes before the next reads. */
#define DLRT_LOCAL(T, name, count) T name[count] = {0}
#define DLRT_BARRIER() (void)0
#define DLRT_PHASE(lid) for (int lid = 0; lid < DLRT_WG; lid++)
static inline uint32_t dlrt_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float dlrt_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
#define DLRT_AS_UINT(f) dlrt_as_uint(f)
#define DLRT_AS_FLOAT(u) dlrt_as_float(u)
#define DLRT_FMAX(a, b) fmaxf((a), (b))
#define DLRT_EXP(x) expf(x)
#define DLRT_LOG(x) logf(x)
#define DLRT_SQRT(x) sqrtf(x)
#define DLRT_TANH(x) tanhf(x)
#define DLRT_ERF(x) erff(x)
#define DLRT_INLINE static inline

/* IEEE binary16 <-> binary32, round to nearest even, as the hardware does.
 * Branch-free (every case computed, the right one selected by masks) so
 * that the kernels' loops vectorize; checked equal to the branching
 * definitions over all 2^16 halves and all 2^32 floats. */
static inline float dlrt_half_to_float(uint16_t h) {
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, s = (uint32_t)(h & 0x8000u) << 16;
  uint32_t normal = ((e + 112u) << 23) | (m << 13);
  uint32_t special = 0x7f800000u | (m << 13);                               /* inf, NaN */
  uint32_t sub = dlrt_as_uint((float)(int32_t)m * 5.9604644775390625e-8f); /* m * 2^-24 */
  uint32_t is_special = 0u - (uint32_t)(e == 0x1fu), is_sub = 0u - (uint32_t)(e == 0);
  return dlrt_as_float(s | (special & is_special) | (sub & is_sub) |
                       (normal & ~(is_special | is_sub)));
}

static inline uint16_t dlrt_float_to_half(float f) {
  uint32_t u = dlrt_as_uint(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  /* Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits
   * to nearest even. */
  uint32_t r = a - 0x38000000u;
  uint32_t normal = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
  /* Below 2^-14 (subnormal or zero): the FPU rounds a + 0.5 to a multiple
   * of 2^-24, which leaves the half's bits in the low mantissa. */
  uint32_t sub = dlrt_as_uint(dlrt_as_float(a) + 0.5f) - 0x3f000000u;
  uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu); /* quiet, keeping the top payload */
  uint32_t is_nan = 0u - (uint32_t)(a > 0x7f800000u);
  uint32_t is_big = 0u - (uint32_t)(a >= 0x477ff000u); /* rounds to >= 65520: inf */
  uint32_t is_sub = 0u - (uint32_t)(a < 0x38800000u);
  uint32_t bits = (normal & ~(is_big | is_sub)) | (sub & is_sub & ~is_big);
  bits = (bits & ~is_big) | (0x7c00u & is_big & ~is_nan) | (nan & is_nan);
  return (uint16_t)(sign | bits);
}
#define DLRT_LD_F16(p, i) dlrt_half_to_float((p)[i])
#define DLRT_ST_F16(p, i, v) ((p)[i] = dlrt_float_to_half(v))
#endif

/* ------------------------------------------------------------ all dialects */

/* Tree reduction of the local array red[DLRT_WG] into red[0] with
 * COMBINE(a, b) (DLRT_ADD, DLRT_FMAX, ...); a sequence of phases, so every
 * work-item of the group must reach it. red[0] is valid after it. */
#define DLRT_GROUP_REDUCE(red, COMBINE)                                         \
  for (int dlrt_s_ = DLRT_WG / 2; dlrt_s_ > 0; dlrt_s_ >>= 1) {                \
    DLRT_PHASE(dlrt_lid_) {                                                     \
      if (dlrt_lid_ < dlrt_s_)                                                  \
        red[dlrt_lid_] = COMBINE(red[dlrt_lid_], red[dlrt_lid_ + dlrt_s_]);     \
    }                                                                           \
    DLRT_BARRIER();                                                             \
  }
#define DLRT_ADD(a, b) ((a) + (b))

/* Folds EXPR over c = 0 .. cols-1 (each work-item a strided share, then the
 * tree) with COMBINE from IDENTITY into red[0]: one row-wide reduction of a
 * group kernel. EXPR may use c. */
#define DLRT_GROUP_FOLD(red, IDENTITY, COMBINE, c, cols, EXPR)                  \
  DLRT_PHASE(dlrt_fold_lid_) {                                                  \
    float dlrt_fold_ = (IDENTITY);                                              \
    for (DLRT_INDEX c = dlrt_fold_lid_; c < (cols); c += DLRT_WG)               \
      dlrt_fold_ = COMBINE(dlrt_fold_, (EXPR));                                 \
    red[dlrt_fold_lid_] = dlrt_fold_;                                           \
  }                                                                             \
  DLRT_BARRIER();                                                               \
  DLRT_GROUP_REDUCE(red, COMBINE)
#define DLRT_MINUS_INF DLRT_AS_FLOAT(0xff800000u)

#define DLRT_LD_F32(p, i) ((p)[i])
#define DLRT_ST_F32(p, i, v) ((p)[i] = (v))

/* bfloat16 is the top half of a float: widening is a shift; narrowing rounds
 * to nearest even and keeps NaN a (quiet) NaN. */
#define DLRT_LD_BF16(p, i) DLRT_AS_FLOAT((unsigned int)(p)[i] << 16)
#define DLRT_ST_BF16(p, i, v) ((p)[i] = dlrt_float_to_bf16(v))

DLRT_INLINE DLRT_U16 dlrt_float_to_bf16(float f) {
  unsigned int u = DLRT_AS_UINT(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (DLRT_U16)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (DLRT_U16)(u >> 16);
}

#endif
