/* cuda_nccl.c — the all-reduce of data-parallel replicas on several CUDA
 * devices of one process, through NCCL: device to device (NVLink or PCIe),
 * without the host.
 *
 * NCCL is loaded with dlopen on the first all-reduce rather than linked, as
 * cuBLAS is, so that libdlrt loads on machines without it; there the
 * all-reduce reports DLRT_ERR_UNSUPPORTED and the trainer combines the
 * gradients through the host instead. Built when configure finds nccl.h
 * (DLRT_HAVE_NCCL). */
#include "config.h"

#ifdef DLRT_HAVE_NCCL

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* nccl.h declares a few functions with () for (void). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "cuda_internal.h"
#include "util/status.h"

typedef ncclResult_t (*comm_init_all_fn)(ncclComm_t *, int, const int *);
typedef ncclResult_t (*comm_destroy_fn)(ncclComm_t);
typedef ncclResult_t (*all_reduce_fn)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                                      ncclComm_t, cudaStream_t);
typedef ncclResult_t (*group_fn)(void);
typedef const char *(*error_string_fn)(ncclResult_t);

enum { MAX_RANKS = 64 };

static struct {
  pthread_once_t once;
  pthread_mutex_t lock; /* guards the communicators */
  void *lib;
  char error[256];
  comm_init_all_fn comm_init_all;
  comm_destroy_fn comm_destroy;
  all_reduce_fn all_reduce;
  group_fn group_start, group_end;
  error_string_fn error_string;
  /* One clique of communicators, for the devices (ordinals, in order) of
   * the last all-reduce; made again when the set changes. */
  int n;
  int ordinals[MAX_RANKS];
  ncclComm_t comms[MAX_RANKS];
} nccl = {.once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER};

/* --with-nccl=DIR's library folder, searched before the library path. */
#ifndef DLRT_NCCL_LIBDIR
#define DLRT_NCCL_LIBDIR NULL
#endif

static void load_nccl(void) {
  static const char *const names[] = {"libnccl.so.2", "libnccl.so"};
  nccl.lib = cuda_dlopen(DLRT_NCCL_LIBDIR, names, sizeof names / sizeof names[0]);
  if (!nccl.lib) {
    snprintf(nccl.error, sizeof nccl.error, "NCCL (libnccl.so.2) could not be loaded: %s; "
             "install NCCL or add its folder to LD_LIBRARY_PATH (the gradients go through "
             "the host meanwhile)", dlerror());
    return;
  }
  nccl.comm_init_all = (comm_init_all_fn)dlsym(nccl.lib, "ncclCommInitAll");
  nccl.comm_destroy = (comm_destroy_fn)dlsym(nccl.lib, "ncclCommDestroy");
  nccl.all_reduce = (all_reduce_fn)dlsym(nccl.lib, "ncclAllReduce");
  nccl.group_start = (group_fn)dlsym(nccl.lib, "ncclGroupStart");
  nccl.group_end = (group_fn)dlsym(nccl.lib, "ncclGroupEnd");
  nccl.error_string = (error_string_fn)dlsym(nccl.lib, "ncclGetErrorString");
  if (!nccl.comm_init_all || !nccl.comm_destroy || !nccl.all_reduce || !nccl.group_start ||
      !nccl.group_end || !nccl.error_string) {
    snprintf(nccl.error, sizeof nccl.error, "the loaded NCCL lacks ncclCommInitAll and "
             "friends; it is older than NCCL 2");
    dlclose(nccl.lib);
    nccl.lib = NULL;
  }
}

static int nccl_fail(const char *call, ncclResult_t r) {
  return dlrt__set_error(r == ncclSystemError ? DLRT_ERR_OOM : DLRT_ERR_BACKEND,
                         "%s failed: %s (NCCL %d)", call, nccl.error_string(r), (int)r);
}

static void drop_comms(void) {
  for (int i = 0; i < nccl.n; i++) nccl.comm_destroy(nccl.comms[i]);
  nccl.n = 0;
}

/* The communicators of these devices; caller holds nccl.lock. */
static int comms_for(const int *ordinals, int n) {
  if (n == nccl.n && memcmp(ordinals, nccl.ordinals, (size_t)n * sizeof *ordinals) == 0)
    return DLRT_OK;
  drop_comms();
  ncclResult_t r = nccl.comm_init_all(nccl.comms, n, ordinals);
  if (r != ncclSuccess) return nccl_fail("ncclCommInitAll", r);
  memcpy(nccl.ordinals, ordinals, (size_t)n * sizeof *ordinals);
  nccl.n = n;
  return DLRT_OK;
}

int cuda_allreduce_sum_f32(void *const *streams, const dlrt_mem *mems, const size_t *offsets,
                           int64_t count, int n) {
  pthread_once(&nccl.once, load_nccl);
  if (!nccl.lib) return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "%s", nccl.error);
  if (n < 1 || n > MAX_RANKS)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "an all-reduce over %d CUDA devices (1 to %d)",
                           n, MAX_RANKS);
  int ordinals[MAX_RANKS];
  for (int i = 0; i < n; i++) {
    ordinals[i] = ((const cuda_stream *)streams[i])->dev->ordinal;
    for (int j = 0; j < i; j++)
      if (ordinals[j] == ordinals[i])
        return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "an NCCL all-reduce needs distinct "
                               "devices; cuda:%d is named twice", ordinals[i]);
  }
  pthread_mutex_lock(&nccl.lock);
  int rc = comms_for(ordinals, n);
  if (rc == DLRT_OK) {
    /* One group: NCCL launches the n reductions together (one thread may
     * drive several devices only inside a group). */
    ncclResult_t r = nccl.group_start();
    for (int i = 0; i < n && r == ncclSuccess; i++) {
      void *p = (char *)mems[i].handle + offsets[i];
      r = nccl.all_reduce(p, p, (size_t)count, ncclFloat32, ncclSum, nccl.comms[i],
                          ((const cuda_stream *)streams[i])->stream);
    }
    ncclResult_t end = nccl.group_end();
    if (r == ncclSuccess) r = end;
    if (r != ncclSuccess) rc = nccl_fail("ncclAllReduce", r);
  }
  pthread_mutex_unlock(&nccl.lock);
  return rc;
}

void cuda_nccl_release(void) {
  pthread_mutex_lock(&nccl.lock);
  if (nccl.lib) drop_comms();
  pthread_mutex_unlock(&nccl.lock);
}

#endif /* DLRT_HAVE_NCCL */
