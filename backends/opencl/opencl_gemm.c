/* opencl_gemm.c — the OpenCL backend's GEMM: dlrt's own tiled kernel (fp16
 * and bf16 everywhere, fp32 on CPU devices such as PoCL) and CLBlast (fp32
 * on GPUs). */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opencl_internal.h"
#ifdef DLRT_HAVE_CLBLAST
#include <clblast_c.h>
#endif

#include "util/status.h"

/* The tiled GEMM: fp16, bf16 or fp32 A, B and C (or 16-bit A and B with an
 * fp32 C, its type cf a kernel argument), fp32 arithmetic. All
 * 16-bit GEMMs (CLBlast lacks bf16, and its Hgemm accumulates in half), and
 * fp32 on CPU devices. Core OpenCL 1.2 only: fp16 through vload_half(n) /
 * vstore_half_rte, bf16 as ushort with the rounding of kernels/dialect.h.
 *
 * A work-group of WX x WY work-items computes a TM x TN tile of C (TM =
 * WY*RM, TN = WX*RN), stepping through k by TK: each step the group stages
 * the TM x TK slice of op(A) (in A's own layout) and the TK x TN slice of
 * op(B) (n fastest) in local memory as floats, 8 elements per load inside the
 * matrices and zeros past their edges; then each work-item accumulates RM
 * rows (ty + WY*i) by RN consecutive columns (tx*RN + j), a floatRN per row.
 * Every output is one fp32 sum over p = 0..k-1 in order (a*b+c may contract
 * into fma where the device has one), so the result depends on neither the
 * scheduling nor the size of the launch. A GEMM with too few tiles of C to
 * fill the device and a long k is split along k instead: each slice's sums
 * go to a scratch buffer and a second kernel adds them in slice order (the
 * split depends only on the shape and the device's compute units, so
 * results still repeat bit for bit). beta == 0 does not read C. */
static const char hgemm_source[] =
    "#define TM (WY * RM)\n"
    "#define TN (WX * RN)\n"
    "#define LA (TM + 1)\n"
    "#define LK (TK + 1)\n"
    "#define CAT_(a, b) a##b\n"
    "#define CAT(a, b) CAT_(a, b)\n"
    "#define VT CAT(float, RN)\n"
    "#pragma OPENCL FP_CONTRACT ON\n"
    "/* Storage types (ty, a constant in each kernel): 0 f16, 1 bf16, 2 f32. */\n"
    "static inline float ld16(__global const void *p, long i, const int ty) {\n"
    "  if (ty == 2) return ((__global const float *)p)[i];\n"
    "  __global const ushort *q = (__global const ushort *)p;\n"
    "  return ty ? as_float((uint)q[i] << 16) : vload_half((size_t)i, (__global const half *)q);\n"
    "}\n"
    "static inline float8 ld16x8(__global const void *p, long i, const int ty) {\n"
    "  if (ty == 2) return vload8(0, (__global const float *)p + i);\n"
    "  __global const ushort *q = (__global const ushort *)p;\n"
    "  return ty ? as_float8(convert_uint8(vload8(0, q + i)) << 16)\n"
    "            : vload_half8(0, (__global const half *)(q + i));\n"
    "}\n"
    "static inline void st16(__global void *p, long i, float v, const int ty) {\n"
    "  if (ty == 2) {\n"
    "    ((__global float *)p)[i] = v;\n"
    "  } else if (ty) {\n"
    "    uint u = as_uint(v);\n"
    "    ((__global ushort *)p)[i] = (u & 0x7fffffffu) > 0x7f800000u\n"
    "               ? (ushort)((u >> 16) | 0x40u)\n"
    "               : (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);\n"
    "  } else {\n"
    "    vstore_half_rte(v, (size_t)i, (__global half *)p);\n"
    "  }\n"
    "}\n"
    "/* p + i elements of type ty. */\n"
    "static inline __global void *at(__global const void *p, long i, const int ty) {\n"
    "  return ty == 2 ? (__global void *)((__global const float *)p + i)\n"
    "                 : (__global void *)((__global const ushort *)p + i);\n"
    "}\n"
    "#define AS(r, c) As[ta ? (c) * LA + (r) : (r) * LK + (c)]\n"
    "/* Batch z of C = alpha op(A) op(B) + beta C over p in [k0, K); with W\n"
    "   (a k-slice of a split GEMM) the plain sums go to W instead. C is of\n"
    "   type cf (bf, or 2: fp32 beside 16-bit A and B). */\n"
    "static inline void hgemm(__global const void *A, long lda, long sa,\n"
    "                         __global const void *B, long ldb, long sb,\n"
    "                         __global void *C, long ldc, long sc, long M, long N, long K,\n"
    "                         float alpha, float beta, const int ta, const int tb, const int bf,\n"
    "                         const int cf, __local float *As, __local float *Bs, long z,\n"
    "                         long k0, __global float *W) {\n"
    "  const int tx = (int)get_local_id(0), ty = (int)get_local_id(1), lid = ty * WX + tx;\n"
    "  const long i0 = (long)get_group_id(1) * TM, j0 = (long)get_group_id(0) * TN;\n"
    "  const int inside = i0 + TM <= M && j0 + TN <= N;\n"
    "  A = at(A, z * sa, bf);\n"
    "  B = at(B, z * sb, bf);\n"
    "  C = at(C, z * sc, cf);\n"
    "  VT acc[RM];\n"
    "  for (int i = 0; i < RM; i++) acc[i] = (VT)(0.0f);\n"
    "  for (long p0 = k0; p0 < K; p0 += TK) {\n"
    "    if (inside && p0 + TK <= K) {\n"
    "      for (int q = lid; q < TM * TK / 8; q += WX * WY) {\n"
    "        const int r = ta ? q % (TM / 8) * 8 : q / (TK / 8);\n"
    "        const int c = ta ? q / (TM / 8) : q % (TK / 8) * 8;\n"
    "        const long i = i0 + r, p = p0 + c;\n"
    "        vstore8(ld16x8(A, ta ? p * lda + i : i * lda + p, bf), 0, &AS(r, c));\n"
    "      }\n"
    "      for (int q = lid; q < TK * TN / 8; q += WX * WY) {\n"
    "        const int r = tb ? q % (TK / 8) * 8 : q / (TN / 8);\n"
    "        const int c = tb ? q / (TK / 8) : q % (TN / 8) * 8;\n"
    "        const long p = p0 + r, j = j0 + c;\n"
    "        const float8 v = ld16x8(B, tb ? j * ldb + p : p * ldb + j, bf);\n"
    "        if (tb) {\n"
    "          Bs[(r + 0) * TN + c] = v.s0;\n"
    "          Bs[(r + 1) * TN + c] = v.s1;\n"
    "          Bs[(r + 2) * TN + c] = v.s2;\n"
    "          Bs[(r + 3) * TN + c] = v.s3;\n"
    "          Bs[(r + 4) * TN + c] = v.s4;\n"
    "          Bs[(r + 5) * TN + c] = v.s5;\n"
    "          Bs[(r + 6) * TN + c] = v.s6;\n"
    "          Bs[(r + 7) * TN + c] = v.s7;\n"
    "        } else {\n"
    "          vstore8(v, 0, Bs + r * TN + c);\n"
    "        }\n"
    "      }\n"
    "    } else {\n"
    "      for (int q = lid; q < TM * TK; q += WX * WY) {\n"
    "        const int r = ta ? q % TM : q / TK, c = ta ? q / TM : q % TK;\n"
    "        const long i = i0 + r, p = p0 + c;\n"
    "        AS(r, c) = i < M && p < K ? ld16(A, ta ? p * lda + i : i * lda + p, bf) : 0.0f;\n"
    "      }\n"
    "      for (int q = lid; q < TK * TN; q += WX * WY) {\n"
    "        const int r = tb ? q % TK : q / TN, c = tb ? q / TK : q % TN;\n"
    "        const long p = p0 + r, j = j0 + c;\n"
    "        Bs[r * TN + c] = p < K && j < N ? ld16(B, tb ? j * ldb + p : p * ldb + j, bf) : 0.0f;\n"
    "      }\n"
    "    }\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    for (int kk = 0; kk < TK; kk++) {\n"
    "      const VT b = CAT(vload, RN)(0, Bs + kk * TN + tx * RN);\n"
    "      for (int i = 0; i < RM; i++) acc[i] += (VT)(AS(ty + WY * i, kk)) * b;\n"
    "    }\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  }\n"
    "  for (int i = 0; i < RM; i++) {\n"
    "    const long row = i0 + ty + WY * i;\n"
    "    float out[RN];\n"
    "    CAT(vstore, RN)(acc[i], 0, out);\n"
    "    for (int j = 0; j < RN; j++) {\n"
    "      const long col = j0 + tx * RN + j;\n"
    "      if (row < M && col < N) {\n"
    "        if (W) {\n"
    "          W[row * N + col] = out[j];\n"
    "          continue;\n"
    "        }\n"
    "        float v = alpha * out[j];\n"
    "        if (beta != 0.0f) v += beta * ld16(C, row * ldc + col, cf);\n"
    "        st16(C, row * ldc + col, v, cf);\n"
    "      }\n"
    "    }\n"
    "  }\n"
    "}\n"
    "/* z runs over batch x splits: slice s of k (a multiple of TK long) of a\n"
    "   split GEMM writes its sums to W[z] (M x N), summed by hgemm_reduce. */\n"
    "#define HGEMM(name, ta, tb, bf)                                                      \\\n"
    "  __kernel __attribute__((reqd_work_group_size(WX, WY, 1))) void name(             \\\n"
    "      __global const void *A, long a_off, long lda, long sa,                         \\\n"
    "      __global const void *B, long b_off, long ldb, long sb,                         \\\n"
    "      __global void *C, long c_off, long ldc, long sc, long M, long N, long K,        \\\n"
    "      float alpha, float beta, long splits, __global float *W, int cf) {             \\\n"
    "    __local float As[TK * LA > TM * LK ? TK * LA : TM * LK], Bs[TK * TN];            \\\n"
    "    const long z = (long)get_global_id(2), b = z / splits, s = z - b * splits;      \\\n"
    "    const long chunk = ((K + splits - 1) / splits + TK - 1) / TK * TK;               \\\n"
    "    const long k0 = s * chunk, k1 = k0 + chunk < K ? k0 + chunk : K;                 \\\n"
    "    hgemm(at(A, a_off, bf), lda, sa, at(B, b_off, bf), ldb, sb, at(C, c_off, cf),    \\\n"
    "          ldc, sc, M, N, splits > 1 ? k1 : K,                                        \\\n"
    "          alpha, beta, ta, tb, bf, cf, As, Bs, b, splits > 1 ? k0 : 0,               \\\n"
    "          splits > 1 ? W + z * M * N : 0);                                           \\\n"
    "  }\n"
    "/* C = alpha (the sum of a split GEMM's slices, in slice order) + beta C. */\n"
    "#define HGEMM_REDUCE(name, bf)                                                       \\\n"
    "  __kernel void name(__global const float *W, __global void *C, long c_off,          \\\n"
    "                     long ldc, long sc, long M, long N, long splits, float alpha,     \\\n"
    "                     float beta) {                                                  \\\n"
    "    const long j = (long)get_global_id(0), i = (long)get_global_id(1);              \\\n"
    "    const long b = (long)get_global_id(2);                                          \\\n"
    "    if (i >= M || j >= N) return;                                                    \\\n"
    "    float a = 0.0f;                                                                  \\\n"
    "    for (long s = 0; s < splits; s++) a += W[((b * splits + s) * M + i) * N + j];    \\\n"
    "    __global void *c = at(at(C, c_off, bf), b * sc, bf);                             \\\n"
    "    float v = alpha * a;                                                             \\\n"
    "    if (beta != 0.0f) v += beta * ld16(c, i * ldc + j, bf);                          \\\n"
    "    st16(c, i * ldc + j, v, bf);                                                     \\\n"
    "  }\n"
    "HGEMM_REDUCE(dlrt_hgemm_reduce_f16, 0)\n"
    "HGEMM_REDUCE(dlrt_hgemm_reduce_bf16, 1)\n"
    "HGEMM_REDUCE(dlrt_hgemm_reduce_f32, 2)\n"
    "HGEMM(dlrt_hgemm_f16_nn, 0, 0, 0)\n"
    "HGEMM(dlrt_hgemm_f16_nt, 0, 1, 0)\n"
    "HGEMM(dlrt_hgemm_f16_tn, 1, 0, 0)\n"
    "HGEMM(dlrt_hgemm_f16_tt, 1, 1, 0)\n"
    "HGEMM(dlrt_hgemm_bf16_nn, 0, 0, 1)\n"
    "HGEMM(dlrt_hgemm_bf16_nt, 0, 1, 1)\n"
    "HGEMM(dlrt_hgemm_bf16_tn, 1, 0, 1)\n"
    "HGEMM(dlrt_hgemm_bf16_tt, 1, 1, 1)\n"
    "HGEMM(dlrt_hgemm_f32_nn, 0, 0, 2)\n"
    "HGEMM(dlrt_hgemm_f32_nt, 0, 1, 2)\n"
    "HGEMM(dlrt_hgemm_f32_tn, 1, 0, 2)\n"
    "HGEMM(dlrt_hgemm_f32_tt, 1, 1, 2)\n";

/* Tile shapes: CPU drivers (PoCL) run a work-group as loops over its
 * work-items and do best with few work-items holding wide vectors; GPUs get
 * the 64 x 64 tile of 8 x 8 outputs per work-item that CLBlast also starts
 * from. Measured on PoCL 3.1 (2 cores, AVX2): 8x16 outputs per work-item ran
 * 1.6x faster than 8x8 and 4x faster than fp32 CLBlast. */
typedef struct {
  int rm, rn, tk; /* outputs per work-item (rows x columns), k step */
} hgemm_shape;
static const hgemm_shape hgemm_cpu = {8, 16, 32}, hgemm_gpu = {8, 8, 16};

/* Splitting k: each slice at least this long (its tile loads must pay), and
 * the slices' partial sums (fp32, slices x M x N x batch) at most this big. */
#define HGEMM_SPLIT_MIN_K 512
#define HGEMM_SCRATCH_MAX ((size_t)32 << 20)

/* Builds the half GEMM program for the device; the caller holds dev->lock.
 * DLRT_ERR_UNSUPPORTED where the device's work-groups are too small (the
 * caller then falls back to fp32); the build log on a failed build. */
static int hgemm_build(ocl_device *dev) {
  size_t max_wg = 0, sizes[3] = {0, 0, 0};
  cl_device_type type = 0;
  clGetDeviceInfo(dev->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof max_wg, &max_wg, NULL);
  clGetDeviceInfo(dev->device, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof sizes, sizes, NULL);
  clGetDeviceInfo(dev->device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
  size_t w = max_wg >= 64 && sizes[0] >= 8 && sizes[1] >= 8   ? 8
             : max_wg >= 16 && sizes[0] >= 4 && sizes[1] >= 4 ? 4
                                                               : 0;
  if (!w)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "%s: work-groups of %zu work-items are too "
                           "small for the half-precision GEMM", dev->name, max_wg);
  const hgemm_shape *sh = (type & CL_DEVICE_TYPE_CPU) ? &hgemm_cpu : &hgemm_gpu;
  const char *extra = getenv("DLRT_OPENCL_BUILD_OPTIONS");
  char options[640];
  /* -w: PoCL prints warnings about the x86 calling convention of float16. */
  snprintf(options, sizeof options,
           "-cl-std=CL1.2 -w -DWX=%zu -DWY=%zu -DRM=%d -DRN=%d -DTK=%d %s", w, w, sh->rm,
           sh->rn, sh->tk, extra ? extra : "");
  cl_program p;
  int rc = ocl_build_program(dev, hgemm_source, options, "the tiled GEMM kernels",
                             extra != NULL, &p);
  if (rc < 0) return rc;
  dev->hgemm_program = p;
  dev->hgemm_local[0] = dev->hgemm_local[1] = w;
  dev->hgemm_tile[0] = w * (size_t)sh->rn;
  dev->hgemm_tile[1] = w * (size_t)sh->rm;
  return DLRT_OK;
}

/* The kernel for (type, transposes), created on first use; the caller holds
 * dev->lock. */
static int hgemm_kernel(ocl_device *dev, int ty, int ta, int tb, cl_kernel *out) {
  int rc;
  if (!dev->hgemm_program && (rc = hgemm_build(dev)) < 0) return rc;
  cl_kernel *slot = &dev->hgemm_kernels[ty][ta][tb];
  if (!*slot) {
    static const char *const types[] = {"f16", "bf16", "f32"};
    char name[32];
    snprintf(name, sizeof name, "dlrt_hgemm_%s_%c%c", types[ty], ta ? 't' : 'n', tb ? 't' : 'n');
    cl_int err;
    cl_kernel k = clCreateKernel(dev->hgemm_program, name, &err);
    if (!k) return ocl_fail(dev, name, err);
    size_t wg = 0;
    clGetKernelWorkGroupInfo(k, dev->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
    if (wg < dev->hgemm_local[0] * dev->hgemm_local[1]) {
      clReleaseKernel(k);
      return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "%s: kernel %s needs work-groups of %zu, "
                             "the device allows %zu", dev->name, name,
                             dev->hgemm_local[0] * dev->hgemm_local[1], wg);
    }
    *slot = k;
  }
  *out = *slot;
  return DLRT_OK;
}

/* The reduction kernel of split GEMMs of type ty; the caller holds
 * dev->lock and built the program. */
static int hgemm_reduce_kernel(ocl_device *dev, int ty, cl_kernel *out) {
  cl_kernel *slot = &dev->hgemm_reduce[ty];
  if (!*slot) {
    static const char *const names[] = {"dlrt_hgemm_reduce_f16", "dlrt_hgemm_reduce_bf16",
                                        "dlrt_hgemm_reduce_f32"};
    cl_int err;
    if (!(*slot = clCreateKernel(dev->hgemm_program, names[ty], &err)))
      return ocl_fail(dev, names[ty], err);
  }
  *out = *slot;
  return DLRT_OK;
}

void ocl_gemm_release(ocl_device *dev) {
  for (int i = 0; i < 3; i++) {
    if (dev->hgemm_reduce[i]) clReleaseKernel(dev->hgemm_reduce[i]);
    dev->hgemm_reduce[i] = NULL;
  }
  for (int i = 0; i < 12; i++) {
    cl_kernel *k = &dev->hgemm_kernels[i >> 2][(i >> 1) & 1][i & 1];
    if (*k) clReleaseKernel(*k);
    *k = NULL;
  }
  if (dev->hgemm_program) clReleaseProgram(dev->hgemm_program);
  dev->hgemm_program = NULL;
}

static int ocl_hgemm(ocl_stream *s, const dlrt_gemm_desc *d, dlrt_mem a, size_t a_off,
                     dlrt_mem b, size_t b_off, dlrt_mem c, size_t c_off) {
  ocl_device *dev = s->dev;
  const size_t es = dlrt_dtype_size(d->dtype), c_es = d->c_f32 ? 4 : es;
  cl_long ao = (cl_long)(a_off / es), bo = (cl_long)(b_off / es), co = (cl_long)(c_off / c_es);
  cl_long lda = d->lda, ldb = d->ldb, ldc = d->ldc, sa = d->stride_a, sb = d->stride_b,
          sc = d->stride_c, m = d->m, n = d->n, k = d->k;
  cl_float alpha = d->alpha, beta = d->beta;
  const int ty = d->dtype == DLRT_F32 ? 2 : d->dtype == DLRT_BF16;
  cl_int cf = d->c_f32 ? 2 : ty; /* C's type */
  cl_kernel kernel = NULL, reduce = NULL;
  pthread_mutex_lock(&dev->lock);
  int rc = hgemm_kernel(dev, ty, !!d->trans_a, !!d->trans_b, &kernel);
  if (rc < 0) goto out;
  /* x: column tiles, y: row tiles, z: the batch (times the k slices). */
  size_t tn = dev->hgemm_tile[0], tm = dev->hgemm_tile[1];
  size_t local[3] = {dev->hgemm_local[0], dev->hgemm_local[1], 1};
  size_t global[3] = {((size_t)d->n + tn - 1) / tn * local[0],
                      ((size_t)d->m + tm - 1) / tm * local[1], (size_t)d->batch};
  /* Too few tiles to fill the device and a long k (the weight gradient of a
   * convolution: a small C summed over every pixel of the batch): split k
   * into slices whose sums a second kernel adds in slice order. */
  size_t tiles = global[0] / local[0] * (global[1] / local[1]) * (size_t)d->batch;
  size_t want = 2 * (size_t)(dev->compute_units ? dev->compute_units : 1);
  cl_long splits = 1;
  if (tiles < want && d->k >= 8 * HGEMM_SPLIT_MIN_K) {
    splits = (cl_long)((want + tiles - 1) / tiles);
    if (splits > d->k / HGEMM_SPLIT_MIN_K) splits = d->k / HGEMM_SPLIT_MIN_K;
    if (splits > 64) splits = 64;
  }
  size_t scratch = (size_t)splits * (size_t)d->m * (size_t)d->n * (size_t)d->batch * 4;
  if (splits > 1 && scratch > HGEMM_SCRATCH_MAX) splits = 1;
  cl_int err = CL_SUCCESS;
  if (splits > 1 && scratch > s->gemm_scratch_bytes) {
    if (s->gemm_scratch) clReleaseMemObject(s->gemm_scratch);
    s->gemm_scratch_bytes = 0;
    s->gemm_scratch = clCreateBuffer(dev->context, CL_MEM_READ_WRITE, scratch, NULL, &err);
    if (!s->gemm_scratch) {
      rc = ocl_fail(dev, "clCreateBuffer(GEMM slices)", err);
      goto out;
    }
    s->gemm_scratch_bytes = scratch;
  }
  cl_mem w = splits > 1 ? s->gemm_scratch : NULL;
  const struct { size_t size; const void *value; } args[] = {
      {sizeof(cl_mem), &a.handle}, {sizeof ao, &ao},    {sizeof lda, &lda},
      {sizeof sa, &sa},            {sizeof(cl_mem), &b.handle}, {sizeof bo, &bo},
      {sizeof ldb, &ldb},          {sizeof sb, &sb},    {sizeof(cl_mem), &c.handle},
      {sizeof co, &co},            {sizeof ldc, &ldc},  {sizeof sc, &sc},
      {sizeof m, &m},              {sizeof n, &n},      {sizeof k, &k},
      {sizeof alpha, &alpha},      {sizeof beta, &beta}, {sizeof splits, &splits},
      {sizeof(cl_mem), &w},        {sizeof cf, &cf}};
  for (cl_uint i = 0; i < sizeof args / sizeof args[0] && err == CL_SUCCESS; i++)
    err = clSetKernelArg(kernel, i, args[i].size, args[i].value);
  if (err != CL_SUCCESS) {
    rc = ocl_fail(dev, "clSetKernelArg", err);
    goto out;
  }
  global[2] *= (size_t)splits;
  err = clEnqueueNDRangeKernel(s->queue, kernel, 3, NULL, global, local, 0, NULL, NULL);
  if (err != CL_SUCCESS) {
    rc = ocl_fail(dev, "clEnqueueNDRangeKernel(half GEMM)", err);
    goto out;
  }
  if (splits > 1) {
    if ((rc = hgemm_reduce_kernel(dev, cf, &reduce)) < 0) goto out;
    const struct { size_t size; const void *value; } rargs[] = {
        {sizeof(cl_mem), &w},  {sizeof(cl_mem), &c.handle}, {sizeof co, &co},
        {sizeof ldc, &ldc},    {sizeof sc, &sc},            {sizeof m, &m},
        {sizeof n, &n},        {sizeof splits, &splits},    {sizeof alpha, &alpha},
        {sizeof beta, &beta}};
    for (cl_uint i = 0; i < sizeof rargs / sizeof rargs[0] && err == CL_SUCCESS; i++)
      err = clSetKernelArg(reduce, i, rargs[i].size, rargs[i].value);
    size_t rglobal[3] = {(size_t)d->n, (size_t)d->m, (size_t)d->batch};
    if (err == CL_SUCCESS)
      err = clEnqueueNDRangeKernel(s->queue, reduce, 3, NULL, rglobal, NULL, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
      rc = ocl_fail(dev, "GEMM slice sums", err);
      goto out;
    }
  }
  clFlush(s->queue);
out:
  pthread_mutex_unlock(&dev->lock);
  return rc;
}

#ifdef DLRT_HAVE_CLBLAST
static int clblast_fail(const ocl_stream *s, const dlrt_gemm_desc *d, CLBlastStatusCode st) {
  return dlrt__set_error(st == CLBlastOpenCLOutOfResources || st == CLBlastOpenCLOutOfHostMemory
                             ? DLRT_ERR_OOM
                             : DLRT_ERR_BACKEND,
                         "%s: CLBlast %s GEMM (%lld x %lld x %lld, batch %lld) failed with "
                         "status %d", s->dev->name, dlrt_dtype_name(d->dtype), (long long)d->m,
                         (long long)d->n, (long long)d->k, (long long)d->batch, (int)st);
}
#endif

/* fp16 and bf16 through the tiled GEMM above, which accumulates in fp32 as
 * dlrt_gemm promises (CLBlast's Hgemm takes alpha and beta in half and
 * accumulates in half); fp32 there too on CPU devices, where it runs 3.5x
 * faster than CLBlast on PoCL, and without CLBlast; else fp32 through
 * CLBlast, tuned for GPUs. CLBlast offsets and strides are in elements. */
int ocl_gemm(void *ps, const dlrt_gemm_desc *d, dlrt_mem a, size_t a_off, dlrt_mem b,
                    size_t b_off, dlrt_mem c, size_t c_off) {
  ocl_stream *s = ps;
  if (d->dtype == DLRT_F16 || d->dtype == DLRT_BF16)
    return ocl_hgemm(s, d, a, a_off, b, b_off, c, c_off);
#ifdef DLRT_HAVE_CLBLAST
  /* DLRT_OPENCL_CLBLAST=1 keeps CPU devices on CLBlast (comparisons). */
  if (d->dtype == DLRT_F32 && s->dev->is_cpu && !getenv("DLRT_OPENCL_CLBLAST")) {
    int rc = ocl_hgemm(s, d, a, a_off, b, b_off, c, c_off);
    if (rc != DLRT_ERR_UNSUPPORTED) return rc; /* else: work-groups too small, CLBlast */
  }
  if (d->dtype != DLRT_F32)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "%s: no %s GEMM", s->dev->name,
                           dlrt_dtype_name(d->dtype));
  const CLBlastLayout L = CLBlastLayoutRowMajor;
  CLBlastTranspose ta = d->trans_a ? CLBlastTransposeYes : CLBlastTransposeNo;
  CLBlastTranspose tb = d->trans_b ? CLBlastTransposeYes : CLBlastTransposeNo;
  size_t m = (size_t)d->m, n = (size_t)d->n, k = (size_t)d->k;
  size_t lda = (size_t)d->lda, ldb = (size_t)d->ldb, ldc = (size_t)d->ldc;
  size_t sa = (size_t)d->stride_a, sb = (size_t)d->stride_b, sc = (size_t)d->stride_c;
  size_t ao = a_off / 4, bo = b_off / 4, co = c_off / 4, batch = (size_t)d->batch;
  CLBlastStatusCode st;
  if (batch == 1)
    st = CLBlastSgemm(L, ta, tb, m, n, k, d->alpha, a.handle, ao, lda, b.handle, bo, ldb,
                      d->beta, c.handle, co, ldc, &s->queue, NULL);
  else
    st = CLBlastSgemmStridedBatched(L, ta, tb, m, n, k, d->alpha, a.handle, ao, lda, sa,
                                    b.handle, bo, ldb, sb, d->beta, c.handle, co, ldc, sc,
                                    batch, &s->queue, NULL);
  if (st != CLBlastSuccess) return clblast_fail(s, d, st);
  clFlush(s->queue);
  return DLRT_OK;
#else
  if (d->dtype == DLRT_F32) return ocl_hgemm(s, d, a, a_off, b, b_off, c, c_off);
  return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "%s: no %s GEMM", s->dev->name,
                         dlrt_dtype_name(d->dtype));
#endif
}
