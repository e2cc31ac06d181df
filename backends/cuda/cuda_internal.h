/* cuda_internal.h — the CUDA backend's objects, shared by its files. */
#ifndef DLRT_BACKENDS_CUDA_INTERNAL_H
#define DLRT_BACKENDS_CUDA_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include <cuda_runtime_api.h>
#include <driver_types.h>

#include "device/backend.h"

typedef struct {
  int ordinal;
  char name[32];        /* "cuda:N" for messages */
  int multiprocessors;  /* to size grid-stride launches */
  int compute_major;    /* compute capability, to size cuBLAS workspaces */
  size_t max_pitch;     /* cudaDevAttrMaxPitch: the widest pitch of a 2-D copy, bytes */
  pthread_mutex_t lock; /* guards the cuBLAS handle and peers_enabled */
  void *cublas;         /* cublasHandle_t, created on the first GEMM */
  uint64_t peers_enabled; /* bit k: peer access to cuda:k was enabled (k < 64) */
  /* Set once a sticky error (an illegal address, a kernel fault) has poisoned
   * this device's context: every later call fails at once naming the first
   * failing call, instead of failing somewhere unrelated. `lost` is written
   * last, with release order, after `lost_reason`. */
  int lost;
  char lost_reason[192];
} cuda_device;

typedef struct {
  cuda_device *dev;
  cudaStream_t stream;
  /* This stream's cuBLAS workspace (cudaMalloc'd on its first GEMM): cuBLAS
   * picks kernels from the workspace it is given, and a pool shared by
   * several streams of one handle makes that choice, and so the result,
   * depend on which streams run at once. */
  void *cublas_workspace;
  size_t cublas_workspace_bytes;
} cuda_stream;

/* Sets the detail message for a failed CUDA call; returns the status. A
 * sticky error marks `dev` lost (see cuda_device.lost). */
int cuda_fail(cuda_device *dev, const char *call, cudaError_t err);
/* 1 for the errors that leave the CUDA context unusable ("any further CUDA
 * work will return the same error"), 0 for the others. */
int cuda_error_is_sticky(cudaError_t err);
/* DLRT_OK, or DLRT_ERR_BACKEND naming the call that lost the device. */
int cuda_check_live(const cuda_device *dev);

/* cuda_compute.c */
int cuda_gemm(void *stream, const dlrt_gemm_desc *d, dlrt_mem a, size_t a_off, dlrt_mem b,
              size_t b_off, dlrt_mem c, size_t c_off);
int cuda_launch(void *stream, const dlrt__launch *launch);
void cuda_compute_release(cuda_device *dev);
/* Frees the stream's cuBLAS workspace; the stream is idle. */
void cuda_compute_stream_release(cuda_stream *s);
/* The grid of a launch: blocks of DLRT_WG threads for `items` items (or
 * `groups` groups when items is 0), at most 32 per multiprocessor since the
 * kernels stride; 0 when there is nothing to run. */
long long cuda_launch_blocks(const dlrt__launch *launch, int multiprocessors);
/* dlopen of the first of NAMES that loads: from DIR first (the folder configure
 * found the library in; NULL for none), then by the library path. NULL if none
 * loads, with dlerror() telling why the last one failed. */
void *cuda_dlopen(const char *dir, const char *const *names, size_t count);

/* cuda_nvml.c: the device's free memory (bytes) read through NVML, without
 * creating a CUDA context; DLRT_ERR_UNSUPPORTED where NVML is missing. */
int cuda_nvml_free_memory(const struct cudaDeviceProp *prop, uint64_t *free_bytes);
void cuda_nvml_release(void);

#ifdef DLRT_HAVE_NCCL
/* cuda_nccl.c */
int cuda_allreduce_sum_f32(void *const *streams, const dlrt_mem *mems, const size_t *offsets,
                           int64_t count, int n);
void cuda_nccl_release(void);
#endif

#endif
