/* cuda_nvml.c — a device's free memory through NVML, the library nvidia-smi
 * reads it with.
 *
 * cudaMemGetInfo needs a CUDA context on the device, and since CUDA 12
 * cudaSetDevice creates one: a query of every GPU's free memory (by `auto`,
 * dlinfo or a budget) would leave a context, hundreds of MiB of device
 * memory, on each. NVML reads the same figure without one. It is part of the
 * driver (libnvidia-ml.so.1), loaded with dlopen on the first query; its
 * handful of declarations are written out here because the toolkit does not
 * always ship nvml.h. NVML numbers devices its own way: a device is found by
 * its PCI address, which CUDA_VISIBLE_DEVICES cannot renumber. */
#include "config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "cuda_internal.h"
#include "util/status.h"

/* nvml.h's ABI (stable since NVML 5; the _v2 entry points since R319). */
typedef int nvml_return;             /* nvmlReturn_t: 0 is NVML_SUCCESS */
typedef struct nvml_device *nvml_device; /* nvmlDevice_t */
typedef struct {
  unsigned long long total, free, used; /* bytes */
} nvml_memory;                          /* nvmlMemory_t */

static struct {
  pthread_mutex_t lock;
  int tried;       /* dlopen attempted */
  int initialized; /* nvmlInit_v2 succeeded and nvmlShutdown has not run */
  void *lib;
  nvml_return (*init)(void);
  nvml_return (*shutdown)(void);
  nvml_return (*by_pci)(const char *, nvml_device *);
  nvml_return (*memory)(nvml_device, nvml_memory *);
} nvml = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Caller holds nvml.lock. */
static int nvml_ready(void) {
  if (!nvml.tried) {
    nvml.tried = 1;
    nvml.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (nvml.lib) {
      *(void **)&nvml.init = dlsym(nvml.lib, "nvmlInit_v2");
      *(void **)&nvml.shutdown = dlsym(nvml.lib, "nvmlShutdown");
      *(void **)&nvml.by_pci = dlsym(nvml.lib, "nvmlDeviceGetHandleByPciBusId_v2");
      *(void **)&nvml.memory = dlsym(nvml.lib, "nvmlDeviceGetMemoryInfo");
      if (!nvml.init || !nvml.shutdown || !nvml.by_pci || !nvml.memory) {
        dlclose(nvml.lib);
        nvml.lib = NULL;
      }
    }
  }
  if (nvml.lib && !nvml.initialized) nvml.initialized = nvml.init() == 0;
  return nvml.initialized;
}

int cuda_nvml_free_memory(const struct cudaDeviceProp *prop, uint64_t *free_bytes) {
  char bus_id[32];
  snprintf(bus_id, sizeof bus_id, "%08X:%02X:%02X.0", (unsigned)prop->pciDomainID,
           (unsigned)prop->pciBusID, (unsigned)prop->pciDeviceID);
  int rc = DLRT_ERR_UNSUPPORTED;
  pthread_mutex_lock(&nvml.lock);
  nvml_device dev;
  nvml_memory mem;
  if (nvml_ready() && nvml.by_pci(bus_id, &dev) == 0 && nvml.memory(dev, &mem) == 0) {
    *free_bytes = mem.free;
    rc = DLRT_OK;
  }
  pthread_mutex_unlock(&nvml.lock);
  return rc;
}

void cuda_nvml_release(void) {
  pthread_mutex_lock(&nvml.lock);
  if (nvml.initialized) nvml.shutdown();
  nvml.initialized = 0;
  pthread_mutex_unlock(&nvml.lock);
}
