/* cpu.c — the CPU backend: host memory, worker-thread streams, and the
 * device interface on top of them. Compute lives in cpu_compute.c. */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_internal.h"
#include "cpu_native.h"
#include "cpu_pool.h"
#include "util/host_gate.h"
#include "util/status.h"

/* Segments are page-aligned: the allocator carves 512-byte-aligned blocks out
 * of them, and pages are only committed when touched. */
#define CPU_SEGMENT_ALIGN 4096
#define CPU_PREFERRED_ALIGN 64 /* a cache line: what vector loads want */

typedef struct {
  char name[128];
  char vendor[64];
} cpu_identity;

static void read_identity(cpu_identity *id) {
  snprintf(id->name, sizeof id->name, "CPU");
  snprintf(id->vendor, sizeof id->vendor, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  int have_name = 0, have_vendor = 0;
  while ((!have_name || !have_vendor) && fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (!colon) continue;
    char *value = colon + 1;
    while (*value == ' ' || *value == '\t') value++;
    value[strcspn(value, "\n")] = '\0';
    if (!have_name && strncmp(line, "model name", 10) == 0) {
      snprintf(id->name, sizeof id->name, "%s", value);
      have_name = 1;
    } else if (!have_vendor && strncmp(line, "vendor_id", 9) == 0) {
      const char *v = strcmp(value, "GenuineIntel") == 0   ? "Intel"
                      : strcmp(value, "AuthenticAMD") == 0 ? "AMD"
                                                           : value;
      snprintf(id->vendor, sizeof id->vendor, "%s", v);
      have_vendor = 1;
    }
  }
  fclose(f);
}

/* MemAvailable from /proc/meminfo, in bytes; 0 if unreadable. */
static uint64_t available_memory(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kib = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
  fclose(f);
  return (uint64_t)kib * 1024;
}

static int cpu_init(void **ctx, int *n_devices) {
  cpu_identity *id = calloc(1, sizeof *id);
  if (!id) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  read_identity(id);
  cpu_blas_single_threaded();
  *ctx = id;
  *n_devices = 1;
  return DLRT_OK;
}

static void cpu_shutdown(void *ctx) {
  cpu_pool_shutdown();
  free(ctx);
}

static int cpu_device_props(void *ctx, int index, dlrt_device_props *p) {
  const cpu_identity *id = ctx;
  (void)index;
  snprintf(p->name, sizeof p->name, "%s", id->name);
  snprintf(p->vendor, sizeof p->vendor, "%s", id->vendor);
  const cpu_native_isa *isa = cpu_native_selected();
  snprintf(p->driver, sizeof p->driver, "%s, %s kernels", cpu_blas_version(),
           strcmp(isa->name, "dialect") == 0 ? "the dialect's" : isa->name);
  p->kind = DLRT_DEVICE_CPU;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  p->total_memory = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
  p->free_memory = available_memory();
  p->alignment = CPU_PREFERRED_ALIGN;
  p->host_addressable = 1;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  p->compute_units = cores > 0 ? (int)cores : 1;
  p->threads = cpu_pool_size();
  return DLRT_OK;
}

static int cpu_device_open(void *ctx, int index, void **dev) {
  (void)index;
  *dev = ctx; /* one CPU device, no per-device state */
  return DLRT_OK;
}

static void cpu_device_close(void *dev) { (void)dev; }

/* ---------------------------------------------------------------- memory */

static int aligned_host_alloc(size_t bytes, void **out) {
  void *p = NULL;
  int err = posix_memalign(&p, CPU_SEGMENT_ALIGN, bytes);
  if (err || !p)
    return dlrt__set_error(DLRT_ERR_OOM, "cpu:0: the system refused %zu bytes", bytes);
  *out = p;
  return DLRT_OK;
}

static int cpu_mem_alloc(void *dev, size_t bytes, dlrt_mem *out) {
  (void)dev;
  int rc = aligned_host_alloc(bytes, &out->handle);
  out->host = out->handle;
  return rc;
}

static void cpu_mem_free(void *dev, dlrt_mem mem) {
  (void)dev;
  free(mem.handle);
}

/* Host memory the CPU "copies" from is just memory: no pinning needed. */
static int cpu_host_alloc(void *dev, size_t bytes, void **ptr, void **handle) {
  (void)dev;
  *handle = NULL;
  return aligned_host_alloc(bytes, ptr);
}

static void cpu_host_free(void *dev, void *ptr, void *handle) {
  (void)dev;
  (void)handle;
  free(ptr);
}

/* ---------------------------------------------------------------- streams */

static int cpu_stream_create_(void *dev, void **out) {
  (void)dev;
  return cpu_stream_create((cpu_stream **)out);
}
static void cpu_stream_destroy_(void *s) { cpu_stream_destroy(s); }
static int cpu_stream_synchronize_(void *s) { return cpu_stream_synchronize(s); }
static int cpu_event_create_(void *dev, void **out) {
  (void)dev;
  return cpu_event_create((cpu_event **)out);
}
static void cpu_event_destroy_(void *e) { cpu_event_destroy(e); }
static int cpu_event_record_(void *e, void *s) { return cpu_event_record(e, s); }
static int cpu_stream_wait_event_(void *s, void *e) { return cpu_stream_wait_event(s, e); }
static int cpu_event_synchronize_(void *e) { return cpu_event_synchronize(e); }
static int cpu_event_query_(void *e) { return cpu_event_query(e); }
static int cpu_event_elapsed_ms_(void *a, void *b, float *ms) { return cpu_event_elapsed_ms(a, b, ms); }

/* ---------------------------------------------------------------- copies */

typedef struct {
  void *dst;
  const void *src;
  size_t bytes;
  int value; /* memset only */
} copy_command;

static int run_copy(void *payload) {
  copy_command *c = payload;
  memmove(c->dst, c->src, c->bytes);
  return DLRT_OK;
}

static int run_memset(void *payload) {
  copy_command *c = payload;
  memset(c->dst, c->value, c->bytes);
  return DLRT_OK;
}

static int cpu_copy_h2d(void *s, dlrt_mem dst, size_t off, const void *src, size_t bytes) {
  copy_command c = {(char *)dst.host + off, src, bytes, 0};
  return cpu_stream_enqueue(s, run_copy, &c, sizeof c);
}

static int cpu_copy_d2h(void *s, void *dst, dlrt_mem src, size_t off, size_t bytes) {
  copy_command c = {dst, (char *)src.host + off, bytes, 0};
  return cpu_stream_enqueue(s, run_copy, &c, sizeof c);
}

/* Rows: `rows` of `width` bytes, dst_pitch and src_pitch apart. */
typedef struct {
  char *dst;
  const char *src;
  size_t dst_pitch, src_pitch, width, rows;
} rows_command;

static int run_copy_rows(void *payload) {
  rows_command *c = payload;
  for (size_t r = 0; r < c->rows; r++)
    memcpy(c->dst + r * c->dst_pitch, c->src + r * c->src_pitch, c->width);
  return DLRT_OK;
}

static int cpu_copy_h2d_rows(void *s, dlrt_mem dst, size_t off, const void *src, size_t pitch,
                             size_t width, size_t rows) {
  rows_command c = {(char *)dst.host + off, src, width, pitch, width, rows};
  return cpu_stream_enqueue(s, run_copy_rows, &c, sizeof c);
}

static int cpu_copy_d2h_rows(void *s, void *dst, size_t pitch, dlrt_mem src, size_t off,
                             size_t width, size_t rows) {
  rows_command c = {dst, (const char *)src.host + off, pitch, width, width, rows};
  return cpu_stream_enqueue(s, run_copy_rows, &c, sizeof c);
}

static int cpu_copy_d2d(void *s, dlrt_mem dst, size_t doff, dlrt_mem src, size_t soff,
                        size_t bytes) {
  copy_command c = {(char *)dst.host + doff, (char *)src.host + soff, bytes, 0};
  return cpu_stream_enqueue(s, run_copy, &c, sizeof c);
}

static int cpu_memset(void *s, dlrt_mem dst, size_t off, int value, size_t bytes) {
  copy_command c = {(char *)dst.host + off, NULL, bytes, value};
  return cpu_stream_enqueue(s, run_memset, &c, sizeof c);
}

/* ---------------------------------------------------------------- link gates */

/* The link model's notice and gate (backend.h): commands on the stream's
 * worker, which waits at a shut gate; other streams have their own. */
typedef struct {
  void (*fn)(void *arg);
  void *arg;
} notify_command;

static int run_notify(void *payload) {
  notify_command *c = payload;
  c->fn(c->arg);
  return DLRT_OK;
}

static int cpu_stream_notify(void *s, void (*fn)(void *arg), void *arg) {
  notify_command c = {fn, arg};
  return cpu_stream_enqueue(s, run_notify, &c, sizeof c);
}

static int cpu_gate_create(void *dev, void **out) {
  (void)dev;
  return dlrt__host_gate_create((dlrt__host_gate **)out);
}

static int run_gate_wait(void *payload) {
  dlrt__host_gate_wait(*(dlrt__host_gate **)payload);
  return DLRT_OK;
}

static int cpu_stream_wait_gate(void *s, void *gate) {
  int rc = cpu_stream_enqueue(s, run_gate_wait, &gate, sizeof gate);
  if (rc < 0) dlrt__host_gate_drop(gate);
  return rc;
}

static void cpu_gate_open(void *gate) { dlrt__host_gate_open(gate); }
static void cpu_gate_open_at(void *gate, double when) { dlrt__host_gate_open_at(gate, when); }

const dlrt_backend_iface dlrt__backend_cpu = {
    .api_version = DLRT_BACKEND_API_VERSION,
    .name = "cpu",
    .init = cpu_init,
    .shutdown = cpu_shutdown,
    .device_props = cpu_device_props,
    .device_open = cpu_device_open,
    .device_close = cpu_device_close,
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_host_free,
    .stream_create = cpu_stream_create_,
    .stream_destroy = cpu_stream_destroy_,
    .stream_synchronize = cpu_stream_synchronize_,
    .event_create = cpu_event_create_,
    .event_destroy = cpu_event_destroy_,
    .event_record = cpu_event_record_,
    .stream_wait_event = cpu_stream_wait_event_,
    .event_synchronize = cpu_event_synchronize_,
    .event_query = cpu_event_query_,
    .event_elapsed_ms = cpu_event_elapsed_ms_,
    .copy_h2d = cpu_copy_h2d,
    .copy_d2h = cpu_copy_d2h,
    .copy_h2d_rows = cpu_copy_h2d_rows,
    .copy_d2h_rows = cpu_copy_d2h_rows,
    .copy_d2d = cpu_copy_d2d,
    .copy_peer = NULL,
    .memset = cpu_memset,
    .stream_notify = cpu_stream_notify,
    .gate_create = cpu_gate_create,
    .stream_wait_gate = cpu_stream_wait_gate,
    .gate_open = cpu_gate_open,
    .gate_open_at = cpu_gate_open_at,
    .gemm = cpu_gemm,
    .launch = cpu_launch,
    .host_launch = cpu_host_launch,
};
