/* dlbench-vendor.c — the vendor libraries beside dlrt's GEMM: OpenBLAS on
 * plain host arrays, CLBlast on its own OpenCL context and queue for the
 * same device, cuBLAS loaded at run time (skipped with a note when absent). */
#include "config.h"

#include <cblas.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DLRT_HAVE_CLBLAST
#include <CL/cl.h>
#include <clblast_c.h>
#endif

#include "dlbench-vendor.h"
/* ------------------------------------------------ vendor libraries */



/* OpenBLAS: the library dlrt's CPU backend calls, here on plain arrays from
 * the calling thread; a synchronous call, so the host clock times it. */
typedef struct {
  vendor base;
  float *a, *b, *c;
} blas_vendor;

static int blas_supports(vendor *v, dlrt_dtype t) {
  if (t == DLRT_F32)
    return 1;
  snprintf(v->error, sizeof v->error, "OpenBLAS has no %s GEMM", dlrt_dtype_name(t));
  return 0;
}

static int blas_setup(vendor *v, const gemm_case *g) {
  blas_vendor *b = (blas_vendor *)v;
  v->g = g;
  b->a = malloc(g->a_elems * 4);
  b->b = malloc(g->b_elems * 4);
  b->c = malloc(g->c_elems * 4);
  if (!b->a || !b->b || !b->c) {
    snprintf(v->error, sizeof v->error, "out of host memory");
    return -1;
  }
  memcpy(b->a, g->a_host, g->a_elems * 4);
  memcpy(b->b, g->b_host, g->b_elems * 4);
  return 0;
}

/* Threads OpenBLAS is called with directly: OPENBLAS_NUM_THREADS, else all
 * cores, as a program calling it would. dlrt's CPU backend sets OpenBLAS to
 * one thread and spreads GEMM over its own pool, so each direct call sets
 * the count and puts it back. */
static int blas_threads(void) {
  const char *env = getenv("OPENBLAS_NUM_THREADS");
  int n = env ? atoi(env) : 0;
  return n > 0 ? n : openblas_get_num_procs();
}

static int blas_run(void *p, double *ms) {
  blas_vendor *b = p;
  const dlrt_gemm_desc *d = &b->base.g->desc;
  openblas_set_num_threads(blas_threads());
  double t0 = tool_now_s();
  cblas_sgemm(CblasRowMajor, d->trans_a ? CblasTrans : CblasNoTrans,
              d->trans_b ? CblasTrans : CblasNoTrans, (blasint)d->m, (blasint)d->n,
              (blasint)d->k, d->alpha, b->a, (blasint)d->lda, b->b, (blasint)d->ldb, d->beta,
              b->c, (blasint)d->ldc);
  *ms = (tool_now_s() - t0) * 1e3;
  openblas_set_num_threads(1);
  return DLRT_OK;
}

static int blas_result(vendor *v, gemm_case *g) {
  memcpy(g->c_vendor, ((blas_vendor *)v)->c, g->c_elems * 4);
  return 0;
}

static void blas_release(vendor *v) {
  blas_vendor *b = (blas_vendor *)v;
  free(b->a);
  free(b->b);
  free(b->c);
  b->a = b->b = b->c = NULL;
}

static void blas_close(vendor *v) {
  blas_release(v);
  free(v);
}

static const vendor_ops BLAS_OPS = {"openblas", "wall", blas_supports, blas_setup, blas_run,
                                    blas_result, blas_release, blas_close};

static vendor *blas_open(const dlrt_device_props *p, char *why, size_t size) {
  (void)p;
  blas_vendor *b = calloc(1, sizeof *b);
  if (!b)
    snprintf(why, size, "out of host memory");
  else
    b->base.ops = &BLAS_OPS;
  return b ? &b->base : NULL;
}

#ifdef DLRT_HAVE_CLBLAST
/* CLBlast with its own context, queue and buffers on the OpenCL device of
 * the same name, timed as dlrt's OpenCL events are: from the end of a
 * marker before the call to the end of a marker after it. */
typedef struct {
  vendor base;
  cl_context context;
  cl_command_queue queue;
  int has_fp16;
  cl_mem a, b, c;
} clblast_vendor;

static int cl_failed(vendor *v, const char *call, cl_int err) {
  snprintf(v->error, sizeof v->error, "%s failed with OpenCL error %d", call, (int)err);
  return -1;
}

static int clblast_supports(vendor *v, dlrt_dtype t) {
  if (t == DLRT_F32 || (t == DLRT_F16 && ((clblast_vendor *)v)->has_fp16))
    return 1;
  snprintf(v->error, sizeof v->error, t == DLRT_F16 ? "CLBlast: the device lacks cl_khr_fp16"
                                                    : "CLBlast has no %s GEMM",
           dlrt_dtype_name(t));
  return 0;
}

static cl_mem cl_upload(clblast_vendor *c, const void *host, size_t bytes, cl_int *err) {
  cl_mem m = clCreateBuffer(c->context, CL_MEM_READ_WRITE, bytes, NULL, err);
  if (m && host)
    *err = clEnqueueWriteBuffer(c->queue, m, CL_TRUE, 0, bytes, host, 0, NULL, NULL);
  return m;
}

static int clblast_setup(vendor *v, const gemm_case *g) {
  clblast_vendor *c = (clblast_vendor *)v;
  cl_int err = CL_SUCCESS;
  v->g = g;
  c->a = cl_upload(c, g->a_host, g->a_elems * g->esize, &err);
  if (err == CL_SUCCESS) c->b = cl_upload(c, g->b_host, g->b_elems * g->esize, &err);
  if (err == CL_SUCCESS) c->c = cl_upload(c, NULL, g->c_elems * g->esize, &err);
  return err == CL_SUCCESS ? 0 : cl_failed(v, "clCreateBuffer/clEnqueueWriteBuffer", err);
}

/* Marker and flush: what dlrt_event_record does on OpenCL. */
static cl_int cl_marker(cl_command_queue q, cl_event *e) {
  cl_int err = clEnqueueMarkerWithWaitList(q, 0, NULL, e);
  if (err == CL_SUCCESS) clFlush(q);
  return err;
}

static CLBlastStatusCode clblast_gemm(clblast_vendor *c) {
  const dlrt_gemm_desc *d = &c->base.g->desc;
  CLBlastTranspose ta = d->trans_a ? CLBlastTransposeYes : CLBlastTransposeNo;
  CLBlastTranspose tb = d->trans_b ? CLBlastTransposeYes : CLBlastTransposeNo;
  size_t m = (size_t)d->m, n = (size_t)d->n, k = (size_t)d->k;
  if (d->dtype == DLRT_F32)
    return CLBlastSgemm(CLBlastLayoutRowMajor, ta, tb, m, n, k, d->alpha, c->a, 0,
                        (size_t)d->lda, c->b, 0, (size_t)d->ldb, d->beta, c->c, 0,
                        (size_t)d->ldc, &c->queue, NULL);
  /* alpha 1 and beta 0 as IEEE half: 0x3c00 and 0x0000. */
  return CLBlastHgemm(CLBlastLayoutRowMajor, ta, tb, m, n, k, 0x3c00, c->a, 0, (size_t)d->lda,
                      c->b, 0, (size_t)d->ldb, 0x0000, c->c, 0, (size_t)d->ldc, &c->queue,
                      NULL);
}

static int clblast_run(void *p, double *ms) {
  clblast_vendor *c = p;
  cl_event e0 = NULL, e1 = NULL;
  cl_ulong t0 = 0, t1 = 0;
  cl_int err = cl_marker(c->queue, &e0);
  if (err == CL_SUCCESS) {
    CLBlastStatusCode st = clblast_gemm(c);
    if (st != CLBlastSuccess) {
      clReleaseEvent(e0);
      snprintf(c->base.error, sizeof c->base.error, "CLBlast GEMM failed with status %d",
               (int)st);
      return DLRT_ERR_BACKEND;
    }
    clFlush(c->queue); /* as dlrt's OpenCL GEMM does */
    err = cl_marker(c->queue, &e1);
  }
  if (err == CL_SUCCESS) err = clWaitForEvents(1, &e1);
  if (err == CL_SUCCESS)
    err = clGetEventProfilingInfo(e0, CL_PROFILING_COMMAND_END, sizeof t0, &t0, NULL);
  if (err == CL_SUCCESS)
    err = clGetEventProfilingInfo(e1, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
  if (e0) clReleaseEvent(e0);
  if (e1) clReleaseEvent(e1);
  if (err != CL_SUCCESS) {
    cl_failed(&c->base, "timing the CLBlast GEMM", err);
    return DLRT_ERR_BACKEND;
  }
  *ms = (double)(int64_t)(t1 - t0) / 1e6; /* nanoseconds */
  return DLRT_OK;
}

static int clblast_result(vendor *v, gemm_case *g) {
  clblast_vendor *c = (clblast_vendor *)v;
  cl_int err = clEnqueueReadBuffer(c->queue, c->c, CL_TRUE, 0, g->c_elems * g->esize,
                                   g->c_vendor, 0, NULL, NULL);
  return err == CL_SUCCESS ? 0 : cl_failed(v, "clEnqueueReadBuffer", err);
}

static void clblast_release(vendor *v) {
  clblast_vendor *c = (clblast_vendor *)v;
  cl_mem *mems[] = {&c->a, &c->b, &c->c};
  for (int i = 0; i < 3; i++) {
    if (*mems[i]) clReleaseMemObject(*mems[i]);
    *mems[i] = NULL;
  }
}

static void clblast_close(vendor *v) {
  clblast_vendor *c = (clblast_vendor *)v;
  clblast_release(v);
  if (c->queue) clReleaseCommandQueue(c->queue);
  if (c->context) clReleaseContext(c->context);
  free(c);
}

static const vendor_ops CLBLAST_OPS = {"clblast", "event", clblast_supports, clblast_setup,
                                       clblast_run, clblast_result, clblast_release,
                                       clblast_close};

/* The OpenCL device named `name`: the one at dlrt's index (dlrt numbers the
 * devices of all platforms in order) when its name matches, else the first
 * of that name. */
static int cl_find_device(const char *name, int index, cl_platform_id *platform,
                          cl_device_id *device) {
  cl_platform_id plats[16];
  cl_uint np = 0;
  int found = 0, seen = 0;
  if (clGetPlatformIDs(16, plats, &np) != CL_SUCCESS)
    return 0;
  for (cl_uint p = 0; p < np && p < 16; p++) {
    cl_device_id ids[64];
    cl_uint nd = 0;
    if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 64, ids, &nd) != CL_SUCCESS)
      continue;
    for (cl_uint d = 0; d < nd && d < 64; d++, seen++) {
      char dev_name[128] = "";
      clGetDeviceInfo(ids[d], CL_DEVICE_NAME, sizeof dev_name - 1, dev_name, NULL);
      if (strcmp(dev_name, name) != 0 || (found && seen != index))
        continue;
      *platform = plats[p];
      *device = ids[d];
      found = 1;
    }
  }
  return found;
}

static vendor *clblast_open(const dlrt_device_props *p, char *why, size_t size) {
  cl_platform_id platform;
  cl_device_id device;
  cl_int err;
  if (!cl_find_device(p->name, p->index, &platform, &device)) {
    snprintf(why, size, "no OpenCL device named '%s' for CLBlast", p->name);
    return NULL;
  }
  clblast_vendor *c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(why, size, "out of host memory");
    return NULL;
  }
  c->base.ops = &CLBLAST_OPS;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)platform, 0};
  c->context = clCreateContext(props, 1, &device, NULL, NULL, &err);
  if (c->context)
    c->queue = clCreateCommandQueue(c->context, device, CL_QUEUE_PROFILING_ENABLE, &err);
  if (!c->queue) {
    snprintf(why, size, "CLBlast: cannot create an OpenCL context and queue (error %d)",
             (int)err);
    clblast_close(&c->base);
    return NULL;
  }
  char ext[4096] = "";
  clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, sizeof ext - 1, ext, NULL);
  c->has_fp16 = strstr(ext, "cl_khr_fp16") != NULL;
  return &c->base;
}
#else
static vendor *clblast_open(const dlrt_device_props *p, char *why, size_t size) {
  (void)p;
  snprintf(why, size, "dlbench was built without CLBlast");
  return NULL;
}
#endif

/* cuBLAS, loaded at run time (libcudart and libcublas need no headers here
 * and may be absent): its own stream and cudaMalloc'd operands, timed by
 * CUDA events like dlrt's CUDA backend; fp32 by cublasSgemm, fp16 and bf16
 * by cublasGemmEx with fp32 accumulation, as dlrt asks of cuBLAS. */
enum { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14, CUBLAS_COMPUTE_32F = 68,
       CUBLAS_GEMM_DEFAULT = -1, CUDA_MEMCPY_H2D = 1, CUDA_MEMCPY_D2H = 2 };

typedef struct {
  vendor base;
  void *cudart, *cublas;
  int ordinal;
  void *stream, *start, *end, *handle;
  void *a, *b, *c;
  int (*set_device)(int);
  int (*malloc_)(void **, size_t);
  int (*free_)(void *);
  int (*memcpy_)(void *, const void *, size_t, int);
  int (*stream_create)(void **);
  int (*stream_destroy)(void *);
  int (*event_create)(void **);
  int (*event_destroy)(void *);
  int (*event_record)(void *, void *);
  int (*event_synchronize)(void *);
  int (*event_elapsed)(float *, void *, void *);
  int (*create)(void **);
  int (*destroy)(void *);
  int (*set_stream)(void *, void *);
  int (*sgemm)(void *, int, int, int, int, int, const float *, const void *, int, const void *,
               int, const float *, void *, int);
  int (*gemm_ex)(void *, int, int, int, int, int, const void *, const void *, int, int,
                 const void *, int, int, const void *, void *, int, int, int, int);
} cublas_vendor;

static int cuda_failed(vendor *v, const char *call, int err) {
  snprintf(v->error, sizeof v->error, "%s failed with error %d", call, err);
  return -1;
}

static int cublas_supports(vendor *v, dlrt_dtype t) {
  (void)v;
  (void)t;
  return 1;
}

static int cublas_setup(vendor *v, const gemm_case *g) {
  cublas_vendor *c = (cublas_vendor *)v;
  int err = c->set_device(c->ordinal);
  v->g = g;
  if (!err) err = c->malloc_(&c->a, g->a_elems * g->esize);
  if (!err) err = c->malloc_(&c->b, g->b_elems * g->esize);
  if (!err) err = c->malloc_(&c->c, g->c_elems * g->esize);
  if (!err) err = c->memcpy_(c->a, g->a_host, g->a_elems * g->esize, CUDA_MEMCPY_H2D);
  if (!err) err = c->memcpy_(c->b, g->b_host, g->b_elems * g->esize, CUDA_MEMCPY_H2D);
  return err ? cuda_failed(v, "cudaMalloc/cudaMemcpy", err) : 0;
}

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the
 * operands swap, and m with n. */
static int cublas_gemm(cublas_vendor *c) {
  const dlrt_gemm_desc *d = &c->base.g->desc;
  int ta = d->trans_b, tb = d->trans_a; /* CUBLAS_OP_T is 1, CUBLAS_OP_N 0 */
  if (d->dtype == DLRT_F32)
    return c->sgemm(c->handle, ta, tb, (int)d->n, (int)d->m, (int)d->k, &d->alpha, c->b,
                    (int)d->ldb, c->a, (int)d->lda, &d->beta, c->c, (int)d->ldc);
  int t = d->dtype == DLRT_F16 ? CUDA_R_16F : CUDA_R_16BF;
  return c->gemm_ex(c->handle, ta, tb, (int)d->n, (int)d->m, (int)d->k, &d->alpha, c->b, t,
                    (int)d->ldb, c->a, t, (int)d->lda, &d->beta, c->c, t, (int)d->ldc,
                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

static int cublas_run(void *p, double *ms) {
  cublas_vendor *c = p;
  float elapsed = 0;
  int err = c->event_record(c->start, c->stream), st = 0;
  if (!err && (st = cublas_gemm(c)) != 0) {
    snprintf(c->base.error, sizeof c->base.error, "cuBLAS GEMM failed with status %d", st);
    return DLRT_ERR_BACKEND;
  }
  if (!err) err = c->event_record(c->end, c->stream);
  if (!err) err = c->event_synchronize(c->end);
  if (!err) err = c->event_elapsed(&elapsed, c->start, c->end);
  if (err) {
    cuda_failed(&c->base, "timing the cuBLAS GEMM", err);
    return DLRT_ERR_BACKEND;
  }
  *ms = elapsed;
  return DLRT_OK;
}

static int cublas_result(vendor *v, gemm_case *g) {
  cublas_vendor *c = (cublas_vendor *)v;
  int err = c->memcpy_(g->c_vendor, c->c, g->c_elems * g->esize, CUDA_MEMCPY_D2H);
  return err ? cuda_failed(v, "cudaMemcpy", err) : 0;
}

static void cublas_release(vendor *v) {
  cublas_vendor *c = (cublas_vendor *)v;
  void **mems[] = {&c->a, &c->b, &c->c};
  for (int i = 0; i < 3; i++) {
    if (*mems[i]) c->free_(*mems[i]);
    *mems[i] = NULL;
  }
}

static void cublas_close(vendor *v) {
  cublas_vendor *c = (cublas_vendor *)v;
  if (c->free_) cublas_release(v);
  if (c->handle) c->destroy(c->handle);
  if (c->start) c->event_destroy(c->start);
  if (c->end) c->event_destroy(c->end);
  if (c->stream) c->stream_destroy(c->stream);
  if (c->cublas) dlclose(c->cublas);
  if (c->cudart) dlclose(c->cudart);
  free(c);
}

static const vendor_ops CUBLAS_OPS = {"cublas", "event", cublas_supports, cublas_setup,
                                      cublas_run, cublas_result, cublas_release, cublas_close};

static void *open_first(const char *const *names) {
  void *lib = NULL;
  for (; *names && !lib; names++)
    lib = dlopen(*names, RTLD_NOW | RTLD_LOCAL);
  return lib;
}

/* Resolves every entry point; 0 and the missing name in why if one lacks. */
static int cublas_symbols(cublas_vendor *c, char *why, size_t size) {
  struct { void *lib; const char *name; void **slot; } syms[] = {
      {c->cudart, "cudaSetDevice", (void **)&c->set_device},
      {c->cudart, "cudaMalloc", (void **)&c->malloc_},
      {c->cudart, "cudaFree", (void **)&c->free_},
      {c->cudart, "cudaMemcpy", (void **)&c->memcpy_},
      {c->cudart, "cudaStreamCreate", (void **)&c->stream_create},
      {c->cudart, "cudaStreamDestroy", (void **)&c->stream_destroy},
      {c->cudart, "cudaEventCreate", (void **)&c->event_create},
      {c->cudart, "cudaEventDestroy", (void **)&c->event_destroy},
      {c->cudart, "cudaEventRecord", (void **)&c->event_record},
      {c->cudart, "cudaEventSynchronize", (void **)&c->event_synchronize},
      {c->cudart, "cudaEventElapsedTime", (void **)&c->event_elapsed},
      {c->cublas, "cublasCreate_v2", (void **)&c->create},
      {c->cublas, "cublasDestroy_v2", (void **)&c->destroy},
      {c->cublas, "cublasSetStream_v2", (void **)&c->set_stream},
      {c->cublas, "cublasSgemm_v2", (void **)&c->sgemm},
      {c->cublas, "cublasGemmEx", (void **)&c->gemm_ex}};
  for (size_t i = 0; i < sizeof syms / sizeof *syms; i++)
    if (!(*syms[i].slot = dlsym(syms[i].lib, syms[i].name))) {
      snprintf(why, size, "cuBLAS: %s not found in the loaded libraries", syms[i].name);
      return 0;
    }
  return 1;
}

/* The CUDA ordinal of the device named `name` (dlrt's index when its name
 * matches): through the driver API, which every CUDA machine has. */
static int cuda_find_ordinal(const char *name, int index) {
  static const char *const drivers[] = {"libcuda.so.1", "libcuda.so", NULL};
  void *lib = open_first(drivers);
  int found = index, count = 0;
  if (!lib)
    return index;
  int (*init)(unsigned) = (int (*)(unsigned))dlsym(lib, "cuInit");
  int (*get_count)(int *) = (int (*)(int *))dlsym(lib, "cuDeviceGetCount");
  int (*get)(int *, int) = (int (*)(int *, int))dlsym(lib, "cuDeviceGet");
  int (*get_name)(char *, int, int) = (int (*)(char *, int, int))dlsym(lib, "cuDeviceGetName");
  if (init && get_count && get && get_name && !init(0) && !get_count(&count)) {
    for (int i = -1; i < count; i++) { /* dlrt's index first, then the others */
      int ordinal = i < 0 ? index : i, dev = 0;
      char dev_name[256] = "";
      if (ordinal < count && !get(&dev, ordinal) && !get_name(dev_name, sizeof dev_name, dev) &&
          strcmp(dev_name, name) == 0) {
        found = ordinal;
        break;
      }
    }
  }
  dlclose(lib);
  return found;
}

static vendor *cublas_open(const dlrt_device_props *p, char *why, size_t size) {
  static const char *const cudarts[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so",
                                        NULL};
  static const char *const cublases[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so",
                                         NULL};
  cublas_vendor *c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(why, size, "out of host memory");
    return NULL;
  }
  c->base.ops = &CUBLAS_OPS;
  c->cudart = open_first(cudarts);
  c->cublas = c->cudart ? open_first(cublases) : NULL;
  int err = -1;
  if (!c->cudart || !c->cublas)
    snprintf(why, size, "cuBLAS not loadable (%s)", dlerror());
  else if (cublas_symbols(c, why, size)) {
    c->ordinal = cuda_find_ordinal(p->name, p->index);
    if (!(err = c->set_device(c->ordinal)) && !(err = c->stream_create(&c->stream)) &&
        !(err = c->event_create(&c->start)) && !(err = c->event_create(&c->end)) &&
        !(err = c->create(&c->handle)))
      err = c->set_stream(c->handle, c->stream);
    if (err)
      snprintf(why, size, "cuBLAS: setting up on CUDA device %d failed with error %d",
               c->ordinal, err);
  }
  if (err) {
    cublas_close(&c->base);
    return NULL;
  }
  return &c->base;
}

/* The vendor library of the device's backend, or NULL with why not. */
vendor *vendor_open(const dlrt_device_props *p, char *why, size_t size) {
  if (strcmp(p->backend, "cpu") == 0)
    return blas_open(p, why, size);
  if (strcmp(p->backend, "opencl") == 0)
    return clblast_open(p, why, size);
  if (strcmp(p->backend, "cuda") == 0)
    return cublas_open(p, why, size);
  snprintf(why, size, "no vendor library known for the %s backend", p->backend);
  return NULL;
}
