/* cuda_internal.h — the CUDA backend's objects, shared by its files. */
#ifndef DLRT_BACKENDS_CUDA_INTERNAL_H
#define DLRT_BACKENDS_CUDA_INTERNAL_H

#include <pthread.h>

#include <cuda_runtime_api.h>

#include "device/backend.h"

typedef struct {
  int ordinal;
  char name[32];        /* "cuda:N" for messages */
  int multiprocessors;  /* to size grid-stride launches */
  pthread_mutex_t lock; /* guards the cuBLAS handle (one per device) */
  void *cublas;         /* cublasHandle_t, created on the first GEMM */
} cuda_device;

typedef struct {
  cuda_device *dev;
  cudaStream_t stream;
} cuda_stream;

/* Sets the detail message for a failed CUDA call; returns the status. */
int cuda_fail(const cuda_device *dev, const char *call, cudaError_t err);

/* cuda_compute.c */
int cuda_gemm(void *stream, const dlrt_gemm_desc *d, dlrt_mem a, size_t a_off, dlrt_mem b,
              size_t b_off, dlrt_mem c, size_t c_off);
int cuda_launch(void *stream, const dlrt__launch *launch);
void cuda_compute_release(cuda_device *dev);
/* dlopen of the first of NAMES that loads: from DIR first (the folder configure
 * found the library in; NULL for none), then by the library path. NULL if none
 * loads, with dlerror() telling why the last one failed. */
void *cuda_dlopen(const char *dir, const char *const *names, size_t count);

#ifdef DLRT_HAVE_NCCL
/* cuda_nccl.c */
int cuda_allreduce_sum_f32(void *const *streams, const dlrt_mem *mems, const size_t *offsets,
                           int64_t count, int n);
void cuda_nccl_release(void);
#endif

#endif
