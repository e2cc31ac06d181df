/* cuda_compute.c — CUDA compute: GEMM through cuBLAS (fp32, fp16, bf16 with
 * fp32 accumulation, C in their type or fp32) and the kernels of kernels/
 * (kernels/cuda_kernels.cu).
 *
 * cuBLAS is loaded with dlopen on the first GEMM rather than linked, so that
 * libdlrt loads on machines without the CUDA toolkit; there GEMM on a CUDA
 * device reports DLRT_ERR_UNSUPPORTED naming the missing library. */
#include "config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <cublas_api.h>

#include "cuda_internal.h"
#include "dialect.h"
#include "util/status.h"

/* kernels/cuda_kernels.cu: entry points indexed by dlrt__kernel_id. */
extern const void *const dlrt__cuda_kernels[DLRT__K_COUNT];

/* ---------------------------------------------------------------- cuBLAS */

typedef cublasStatus_t (*create_fn)(cublasHandle_t *);
typedef cublasStatus_t (*destroy_fn)(cublasHandle_t);
typedef cublasStatus_t (*set_stream_fn)(cublasHandle_t, cudaStream_t);
typedef cublasStatus_t (*set_math_mode_fn)(cublasHandle_t, cublasMath_t);
typedef cublasStatus_t (*set_workspace_fn)(cublasHandle_t, void *, size_t);
typedef cublasStatus_t (*gemm_ex_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                     int, int, const void *, const void *, cudaDataType, int,
                                     const void *, cudaDataType, int, const void *, void *,
                                     cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
typedef cublasStatus_t (*gemm_batched_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                          int, int, int, const void *, const void *,
                                          cudaDataType, int, long long, const void *,
                                          cudaDataType, int, long long, const void *, void *,
                                          cudaDataType, int, long long, int,
                                          cublasComputeType_t, cublasGemmAlgo_t);

static struct {
  pthread_once_t once;
  void *lib;
  char error[256];
  create_fn create;
  destroy_fn destroy;
  set_stream_fn set_stream;
  set_math_mode_fn set_math_mode;
  set_workspace_fn set_workspace;
  gemm_ex_fn gemm;
  gemm_batched_fn gemm_batched;
} cublas = {.once = PTHREAD_ONCE_INIT};

void *cuda_dlopen(const char *dir, const char *const *names, size_t count) {
  void *lib = NULL;
  char path[4096];
  for (size_t i = 0; dir && i < count && !lib; i++)
    if (snprintf(path, sizeof path, "%s/%s", dir, names[i]) < (int)sizeof path)
      lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  for (size_t i = 0; i < count && !lib; i++)
    lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  return lib;
}

#ifndef DLRT_CUDA_LIBDIR
#define DLRT_CUDA_LIBDIR NULL
#endif

static void load_cublas(void) {
  static const char *const names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
  /* The toolkit's own cuBLAS first: the one of the headers dlrt was built with. */
  cublas.lib = cuda_dlopen(DLRT_CUDA_LIBDIR, names, sizeof names / sizeof names[0]);
  if (!cublas.lib) {
    snprintf(cublas.error, sizeof cublas.error, "cuBLAS (libcublas.so.13) could not be loaded: "
             "%s; install the CUDA toolkit's cuBLAS or add its folder to LD_LIBRARY_PATH",
             dlerror());
    return;
  }
  cublas.create = (create_fn)dlsym(cublas.lib, "cublasCreate_v2");
  cublas.destroy = (destroy_fn)dlsym(cublas.lib, "cublasDestroy_v2");
  cublas.set_stream = (set_stream_fn)dlsym(cublas.lib, "cublasSetStream_v2");
  cublas.set_math_mode = (set_math_mode_fn)dlsym(cublas.lib, "cublasSetMathMode");
  cublas.set_workspace = (set_workspace_fn)dlsym(cublas.lib, "cublasSetWorkspace_v2");
  cublas.gemm = (gemm_ex_fn)dlsym(cublas.lib, "cublasGemmEx");
  cublas.gemm_batched = (gemm_batched_fn)dlsym(cublas.lib, "cublasGemmStridedBatchedEx");
  if (!cublas.create || !cublas.destroy || !cublas.set_stream || !cublas.set_math_mode ||
      !cublas.set_workspace || !cublas.gemm || !cublas.gemm_batched) {
    snprintf(cublas.error, sizeof cublas.error, "the loaded cuBLAS lacks cublasGemmEx and "
             "friends; it is older than CUDA 11");
    dlclose(cublas.lib);
    cublas.lib = NULL;
  }
}

static int cublas_fail(cuda_device *dev, const char *call, cublasStatus_t st) {
  /* A kernel fault inside cuBLAS: the context is lost, say so. */
  if (st == CUBLAS_STATUS_EXECUTION_FAILED || st == CUBLAS_STATUS_INTERNAL_ERROR) {
    cudaError_t err = cudaPeekAtLastError();
    if (cuda_error_is_sticky(err)) return cuda_fail(dev, call, err);
  }
  int status = st == CUBLAS_STATUS_ALLOC_FAILED ? DLRT_ERR_OOM
               : st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_ARCH_MISMATCH
                   ? DLRT_ERR_UNSUPPORTED
                   : DLRT_ERR_BACKEND;
  return dlrt__set_error(status, "%s: %s failed with cuBLAS status %d", dev->name, call, (int)st);
}

/* The device's handle, created on first use; caller holds dev->lock and has
 * selected the device (a handle belongs to the device current at its
 * creation). */
static int cublas_handle(cuda_device *dev, cublasHandle_t *out) {
  pthread_once(&cublas.once, load_cublas);
  if (!cublas.lib)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "%s: %s", dev->name, cublas.error);
  if (!dev->cublas) {
    cublasHandle_t h;
    cublasStatus_t st = cublas.create(&h);
    if (st != CUBLAS_STATUS_SUCCESS) return cublas_fail(dev, "cublasCreate", st);
    /* Tensor cores for fp16 / bf16, fp32 stays IEEE fp32 (no TF32), and the
     * fp32 accumulation dlrt_gemm promises holds for split-K too: the
     * default math mode alone lets cuBLAS sum split-K partials in fp16. */
    st = cublas.set_math_mode(h, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                                CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
    if (st != CUBLAS_STATUS_SUCCESS) {
      cublas.destroy(h);
      return cublas_fail(dev, "cublasSetMathMode", st);
    }
    dev->cublas = h;
  }
  *out = dev->cublas;
  return DLRT_OK;
}

void cuda_compute_release(cuda_device *dev) {
  if (dev->cublas) cublas.destroy(dev->cublas);
  dev->cublas = NULL;
}

void cuda_compute_stream_release(cuda_stream *s) {
  if (s->cublas_workspace) cudaFree(s->cublas_workspace);
  s->cublas_workspace = NULL;
  s->cublas_workspace_bytes = 0;
}

/* The stream's own workspace, allocated on its first GEMM: the size cuBLAS
 * recommends (32 MiB on Hopper and later, 4 MiB before). Device selected. */
static int stream_workspace(cuda_stream *s) {
  if (s->cublas_workspace) return DLRT_OK;
  size_t bytes = (size_t)(s->dev->compute_major >= 9 ? 32 : 4) << 20;
  cudaError_t err = cudaMalloc(&s->cublas_workspace, bytes);
  if (err != cudaSuccess) {
    s->cublas_workspace = NULL;
    return cuda_fail(s->dev, "cudaMalloc (the stream's cuBLAS workspace)", err);
  }
  s->cublas_workspace_bytes = bytes;
  return DLRT_OK;
}

static cudaDataType cuda_type(dlrt_dtype t) {
  return t == DLRT_F16 ? CUDA_R_16F : t == DLRT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

int cuda_gemm(void *ps, const dlrt_gemm_desc *d, dlrt_mem a, size_t a_off, dlrt_mem b,
              size_t b_off, dlrt_mem c, size_t c_off) {
  cuda_stream *s = ps;
  cuda_device *dev = s->dev;
  if (d->m > INT32_MAX || d->n > INT32_MAX || d->k > INT32_MAX || d->lda > INT32_MAX ||
      d->ldb > INT32_MAX || d->ldc > INT32_MAX || d->batch > INT32_MAX)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "%s: dlrt_gemm dimensions beyond 2^31 are "
                           "not supported", dev->name);
  int rc = cuda_check_live(dev);
  if (rc < 0) return rc;
  cudaError_t err = cudaSetDevice(dev->ordinal);
  if (err != cudaSuccess) return cuda_fail(dev, "cudaSetDevice", err);
  pthread_mutex_lock(&dev->lock);
  cublasHandle_t h = NULL;
  if ((rc = cublas_handle(dev, &h)) < 0 || (rc = stream_workspace(s)) < 0) goto out;
  /* cublasSetStream resets the workspace to the shared pool: set the
   * stream's own after it, every time. */
  cublasStatus_t st = cublas.set_stream(h, s->stream);
  if (st != CUBLAS_STATUS_SUCCESS) {
    rc = cublas_fail(dev, "cublasSetStream", st);
    goto out;
  }
  st = cublas.set_workspace(h, s->cublas_workspace, s->cublas_workspace_bytes);
  if (st != CUBLAS_STATUS_SUCCESS) {
    rc = cublas_fail(dev, "cublasSetWorkspace", st);
    goto out;
  }
  /* cuBLAS is column-major: a row-major C = op(A) op(B) is the column-major
   * C^T = op(B)^T op(A)^T, so swap the operands and m with n. */
  cudaDataType t = cuda_type(d->dtype), tc = d->c_f32 ? CUDA_R_32F : t;
  cublasOperation_t ta = d->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t tb = d->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const char *pa = (const char *)a.handle + a_off, *pb = (const char *)b.handle + b_off;
  char *pc = (char *)c.handle + c_off;
  if (d->batch == 1)
    st = cublas.gemm(h, ta, tb, (int)d->n, (int)d->m, (int)d->k, &d->alpha, pb, t, (int)d->ldb,
                     pa, t, (int)d->lda, &d->beta, pc, tc, (int)d->ldc, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT);
  else
    st = cublas.gemm_batched(h, ta, tb, (int)d->n, (int)d->m, (int)d->k, &d->alpha, pb, t,
                             (int)d->ldb, d->stride_b, pa, t, (int)d->lda, d->stride_a,
                             &d->beta, pc, tc, (int)d->ldc, d->stride_c, (int)d->batch,
                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS)
    rc = cublas_fail(dev, d->batch == 1 ? "cublasGemmEx" : "cublasGemmStridedBatchedEx", st);
out:
  pthread_mutex_unlock(&dev->lock);
  return rc;
}

/* ---------------------------------------------------------------- kernels */

long long cuda_launch_blocks(const dlrt__launch *l, int multiprocessors) {
  long long work = l->items > 0 ? l->items : l->items == 0 && l->groups > 0 ? l->groups : 0;
  long long blocks = l->items > 0 ? (work + DLRT_WG - 1) / DLRT_WG : work;
  long long max_blocks = (long long)(multiprocessors > 0 ? multiprocessors : 1) * 32;
  return blocks > max_blocks ? max_blocks : blocks;
}

int cuda_launch(void *ps, const dlrt__launch *l) {
  cuda_stream *s = ps;
  cuda_device *dev = s->dev;
  /* A grid of zero blocks is cudaErrorInvalidConfiguration: nothing to run
   * is success, before any CUDA call. */
  long long blocks = cuda_launch_blocks(l, dev->multiprocessors);
  if (blocks == 0) return DLRT_OK;
  int live = cuda_check_live(dev);
  if (live < 0) return live;
  /* cudaLaunchKernel takes the address of each argument. */
  void *params[DLRT__MAX_ARGS];
  void *pointers[DLRT__MAX_ARGS];
  long long integers[DLRT__MAX_ARGS];
  for (int i = 0; i < l->n_args; i++) {
    const dlrt__arg *a = &l->args[i];
    switch (a->kind) {
    case DLRT__ARG_BUFFER:
      pointers[i] = (char *)a->mem.handle + a->offset;
      params[i] = &pointers[i];
      break;
    case DLRT__ARG_F32: params[i] = (void *)&a->f; break;
    case DLRT__ARG_I64:
      integers[i] = a->i;
      params[i] = &integers[i];
      break;
    }
  }
  /* Grid-stride kernels: enough blocks to fill the device, no more. */
  dim3 grid = {(unsigned)blocks, 1, 1}, block = {DLRT_WG, 1, 1};
  cudaError_t err = cudaSetDevice(dev->ordinal);
  if (err == cudaSuccess)
    err = cudaLaunchKernel(dlrt__cuda_kernels[l->kernel], grid, block, params, 0, s->stream);
  return err == cudaSuccess ? DLRT_OK : cuda_fail(dev, "cudaLaunchKernel", err);
}
