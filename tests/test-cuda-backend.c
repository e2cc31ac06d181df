/*
 * test-cuda-backend.c — the CUDA backend's logic that holds without a GPU
 * (backends/cuda/): which errors lose a device and what every call after
 * one says, the zero-block launch guard, the launch grid, start-up and
 * shutdown with no driver or no device.
 *
 * Built from the backend's own sources and the static cudart (its symbols
 * are hidden in libdlrt; see Makefile.am), and run where the CUDA runtime
 * finds no device: there every real CUDA call fails, so a call that
 * succeeds, or fails naming an earlier call, shows that the backend
 * answered before reaching CUDA. On a machine with a GPU the same points
 * hold; tests/gpu-check.sh runs the rest (the cuBLAS math mode and
 * workspaces, peer access, free memory without a context) there.
 */
#include "config.h"

#include <string.h>

#include "../backends/cuda/cuda_internal.h"
#include "dialect.h"
#include "tap.h"

/* kernels/cuda_kernels.cu's table: no kernel runs here. */
const void *const dlrt__cuda_kernels[DLRT__K_COUNT];

static void has(const char *what, const char *part) {
  const char *msg = dlrt_last_error();
  ok(strstr(msg, part) != NULL, "%s: the message has \"%s\": %s", what, part, msg);
}

static void test_start_and_shutdown(void) {
  void *ctx = (void *)1;
  int n = -1;
  is_status(dlrt__backend_cuda.init(&ctx, &n), DLRT_OK,
            "init succeeds whether or not there is a driver");
  ok(n >= 0, "and counts %d devices", n);
  ok(ctx == NULL, "with no context of its own");
  /* What the registry does at teardown (test-registry-shutdown): with no
   * NCCL communicator and no NVML session, nothing to release, no crash. */
  dlrt__backend_cuda.shutdown(ctx);
  dlrt__backend_cuda.shutdown(ctx);
  ok(1, "shutdown with a NULL context returns, twice");
}

static void test_sticky_classification(void) {
  const cudaError_t sticky[] = {
      cudaErrorIllegalAddress,     cudaErrorLaunchTimeout,       cudaErrorAssert,
      cudaErrorHardwareStackError, cudaErrorIllegalInstruction,  cudaErrorMisalignedAddress,
      cudaErrorInvalidAddressSpace, cudaErrorInvalidPc,          cudaErrorLaunchFailure,
      cudaErrorTensorMemoryLeak,   cudaErrorContained,           cudaErrorExternalDevice,
      cudaErrorMpsClientTerminated, cudaErrorECCUncorrectable};
  const cudaError_t recoverable[] = {
      cudaSuccess, cudaErrorInvalidValue, cudaErrorMemoryAllocation, cudaErrorNotReady,
      cudaErrorInvalidConfiguration, cudaErrorLaunchOutOfResources, cudaErrorNoDevice,
      cudaErrorInsufficientDriver, cudaErrorPeerAccessAlreadyEnabled};
  int right = 0;
  for (size_t i = 0; i < sizeof sticky / sizeof sticky[0]; i++)
    right += cuda_error_is_sticky(sticky[i]) == 1;
  is_int(right, (int)(sizeof sticky / sizeof sticky[0]),
         "the errors that poison a context are sticky");
  right = 0;
  for (size_t i = 0; i < sizeof recoverable / sizeof recoverable[0]; i++)
    right += cuda_error_is_sticky(recoverable[i]) == 0;
  is_int(right, (int)(sizeof recoverable / sizeof recoverable[0]),
         "out of memory, bad arguments, not-ready and no-device are not");
}

static cuda_device make_device(int ordinal) {
  cuda_device dev = {.ordinal = ordinal, .multiprocessors = 132};
  snprintf(dev.name, sizeof dev.name, "cuda:%d", ordinal);
  pthread_mutex_init(&dev.lock, NULL);
  return dev;
}

static void test_recoverable_error(void) {
  cuda_device dev = make_device(0);
  is_status(cuda_fail(&dev, "cudaMalloc", cudaErrorMemoryAllocation), DLRT_ERR_OOM,
            "a failed cudaMalloc is out of memory");
  has("out of memory", "cudaMalloc");
  is_int(dev.lost, 0, "and does not lose the device");
  is_status(cuda_check_live(&dev), DLRT_OK, "which stays usable");
  is_status(cuda_fail(&dev, "cudaMemcpyAsync", cudaErrorInvalidValue), DLRT_ERR_BACKEND,
            "a bad argument is a backend error");
  is_int(dev.lost, 0, "that does not lose the device either");
  pthread_mutex_destroy(&dev.lock);
}

static void test_lost_device(void) {
  cuda_device dev = make_device(1);
  cuda_stream stream = {.dev = &dev};
  is_status(cuda_fail(&dev, "cudaStreamSynchronize", cudaErrorIllegalAddress),
            DLRT_ERR_DEVICE_LOST, "an illegal address loses the device");
  has("lost", "cuda:1 is lost");
  has("lost", "cudaStreamSynchronize failed");
  has("lost", "cudaErrorIllegalAddress");
  has("lost", "restart the process");
  is_int(dev.lost, 1, "the device is marked lost");

  /* The fault surfaces again at the next call: the message keeps the first. */
  is_status(cuda_fail(&dev, "cudaMemcpyAsync", cudaErrorIllegalAddress), DLRT_ERR_DEVICE_LOST,
            "the next failing call is a lost device too");
  has("the first call is kept", "cudaStreamSynchronize failed");
  ok(strstr(dlrt_last_error(), "cudaMemcpyAsync") == NULL,
     "and the later call is not named as the cause");

  /* Every entry point refuses at once, before CUDA (which, with no device
   * here, would fail otherwise and name another call). */
  const dlrt_backend_iface *be = &dlrt__backend_cuda;
  dlrt_mem mem = {0};
  void *out = NULL;
  float host[4] = {0};
  dlrt_gemm_desc gemm = {.dtype = DLRT_F32, .m = 2, .n = 2, .k = 2, .lda = 2, .ldb = 2,
                         .ldc = 2, .batch = 1, .alpha = 1, .beta = 0};
  dlrt__launch launch = {.kernel = 0, .items = 1};
#define REFUSED(call)                                                                      \
  do {                                                                                     \
    dlrt_clear_error();                                                                    \
    int rc_ = (call);                                                                      \
    ok(rc_ == DLRT_ERR_DEVICE_LOST &&                                                      \
           strstr(dlrt_last_error(), "cudaStreamSynchronize failed") != NULL,              \
       "%s on a lost device is refused naming the first failing call (%s)", #call,       \
       dlrt_err_name(rc_));                                                                \
  } while (0)
  REFUSED(be->mem_alloc(&dev, 256, &mem));
  REFUSED(be->host_alloc(&dev, 256, &out, &out));
  REFUSED(be->stream_create(&dev, &out));
  REFUSED(be->event_create(&dev, &out));
  REFUSED(be->stream_synchronize(&stream));
  REFUSED(be->copy_h2d(&stream, mem, 0, host, sizeof host));
  REFUSED(be->copy_d2h(&stream, host, mem, 0, sizeof host));
  REFUSED(be->copy_h2d_rows(&stream, mem, 0, host, 8, 4, 2));
  REFUSED(be->copy_d2d(&stream, mem, 0, mem, 0, 4));
  REFUSED(be->memset(&stream, mem, 0, 0, 4));
  REFUSED(be->gemm(&stream, &gemm, mem, 0, mem, 0, mem, 0));
  REFUSED(be->launch(&stream, &launch));
#undef REFUSED

  /* A peer copy involving it, from a live device's stream. */
  cuda_device live = make_device(2);
  cuda_stream live_stream = {.dev = &live};
  is_status(be->copy_peer(&live_stream, &dev, mem, 0, &live, mem, 0, 4), DLRT_ERR_DEVICE_LOST,
            "a peer copy to a lost device is refused");
  is_int(live.lost, 0, "without losing the other device");
  pthread_mutex_destroy(&live.lock);
  pthread_mutex_destroy(&dev.lock);
}

/* A grid of zero blocks is cudaErrorInvalidConfiguration: nothing to run is
 * success, decided before any CUDA call. */
static void test_launch_grid(void) {
  dlrt__launch l = {0};
  is_int((int)cuda_launch_blocks(&l, 132), 0, "zero items and zero groups: no blocks");
  l.items = 1;
  is_int((int)cuda_launch_blocks(&l, 132), 1, "one item: one block");
  l.items = DLRT_WG + 1;
  is_int((int)cuda_launch_blocks(&l, 132), 2, "DLRT_WG + 1 items: two blocks");
  l.items = (int64_t)1 << 40;
  is_int((int)cuda_launch_blocks(&l, 132), 132 * 32,
         "2^40 items: 32 blocks per multiprocessor (the kernels stride)");
  l.items = 0;
  l.groups = 7;
  is_int((int)cuda_launch_blocks(&l, 132), 7, "7 groups: 7 blocks");
  l.groups = -1;
  is_int((int)cuda_launch_blocks(&l, 132), 0, "a negative count: no blocks");

  cuda_device dev = make_device(0);
  cuda_stream stream = {.dev = &dev};
  dlrt__launch empty = {.kernel = 0};
  is_status(dlrt__backend_cuda.launch(&stream, &empty), DLRT_OK,
            "a launch of nothing succeeds without touching CUDA");
  pthread_mutex_destroy(&dev.lock);
}

static void test_no_device(void) {
  int n = 0;
  void *ctx = NULL;
  dlrt__backend_cuda.init(&ctx, &n);
  if (n > 0) {
    skip(2, "this machine has %d CUDA devices: the no-device case is not seen here", n);
    return;
  }
  dlrt_device_props props;
  int rc = dlrt__backend_cuda.device_props(ctx, 0, &props);
  ok(rc < 0, "the properties of a device that is not there are an error (%s)",
     dlrt_err_name(rc));
  void *dev = NULL;
  rc = dlrt__backend_cuda.device_open(ctx, 0, &dev);
  ok(rc < 0 && dev == NULL, "so is opening it (%s): %s", dlrt_err_name(rc), dlrt_last_error());
}

int main(void) {
  test_start_and_shutdown();
  test_sticky_classification();
  test_recoverable_error();
  test_lost_device();
  test_launch_grid();
  test_no_device();
  return done_testing();
}
