/* registry.c — backend registry, device enumeration, device specs.
 *
 * Every compiled backend is started once (dlrt_init); one that finds no driver
 * or platform contributes zero devices. Devices are numbered globally in
 * backend order (cuda, opencl, cpu) and addressed by "backend:index" specs. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "device/link_model.h"
#include "device/registry.h"
#include "util/status.h"

/* Order of enumeration; "auto" prefers earlier backends at equal device kind. */
static const dlrt_backend_iface *const compiled[] = {
#ifdef DLRT_HAVE_CUDA
    &dlrt__backend_cuda,
#endif
#ifdef DLRT_HAVE_OPENCL
    &dlrt__backend_opencl,
#endif
    &dlrt__backend_cpu,
};
#define N_COMPILED ((int)(sizeof compiled / sizeof compiled[0]))

typedef struct {
  const dlrt_backend_iface *be;
  void *ctx;
  int started;
  int left_out; /* by DLRT_BACKEND */
  int n_devices;
} backend_slot;

static struct {
  pthread_mutex_t lock;
  int initialized;
  backend_slot backends[N_COMPILED];
  dlrt_device_t *devices;
  int n_devices;
  char backend_env[128]; /* DLRT_BACKEND as read at init, for messages */
} reg = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Backends dlrt knows, compiled into this build or not (for messages). */
static const char *const known_backends[] = {"cpu", "opencl", "cuda"};

static void list_backends(char *out, size_t n);

/* DLRT_BACKEND=cpu,opencl: which compiled backends may start, into
 * enabled[] (all when unset or empty). Names are case-insensitive (CPU is
 * cpu) and may have blanks around them; an unknown or absent one is an
 * error that lists this build's backends: a typo must not silently start
 * nothing. */
static int parse_backend_env(int enabled[N_COMPILED]) {
  const char *list = getenv("DLRT_BACKEND");
  for (int i = 0; i < N_COMPILED; i++) enabled[i] = !list || !*list;
  if (!list || !*list) return DLRT_OK;
  char known[128];
  list_backends(known, sizeof known);
  for (const char *p = list;;) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    const char *name = p;
    while (n > 0 && isspace((unsigned char)*name)) name++, n--;
    while (n > 0 && isspace((unsigned char)name[n - 1])) n--;
    int found = 0;
    for (int i = 0; i < N_COMPILED; i++)
      if (strlen(compiled[i]->name) == n && strncasecmp(compiled[i]->name, name, n) == 0)
        enabled[i] = found = 1;
    if (!found) {
      for (size_t i = 0; i < sizeof known_backends / sizeof known_backends[0]; i++)
        if (n > 0 && strlen(known_backends[i]) == n &&
            strncasecmp(known_backends[i], name, n) == 0)
          return dlrt__set_error(DLRT_ERR_INVALID_ARG, "DLRT_BACKEND=\"%s\": this build has no "
                                 "%s backend (rebuild with --with-%s); it has: %s", list,
                                 known_backends[i], known_backends[i], known);
      return dlrt__set_error(DLRT_ERR_INVALID_ARG, "DLRT_BACKEND=\"%s\": %s%.*s%s is not a "
                             "backend; give a comma-separated list of %s (any case), or unset "
                             "it for all", list, n ? "\"" : "an empty name", (int)n, name,
                             n ? "\"" : "", known);
    }
    if (!end) break;
    p = end + 1;
  }
  return DLRT_OK;
}

/* Closes every device and backend; also unwinds a failed init. */
static void teardown_locked(void) {
  for (int i = 0; i < reg.n_devices; i++) {
    dlrt__device_close(&reg.devices[i]);
    pthread_mutex_destroy(&reg.devices[i].lock);
    pthread_mutex_destroy(&reg.devices[i].attach_lock);
  }
  free(reg.devices);
  reg.devices = NULL;
  reg.n_devices = 0;
  /* Every backend whose init succeeded, with or without a ctx: a backend's
   * process-wide state (NCCL communicators, NVML) is not in its ctx. */
  for (int i = 0; i < N_COMPILED; i++)
    if (reg.backends[i].started && reg.backends[i].be->shutdown)
      reg.backends[i].be->shutdown(reg.backends[i].ctx);
  memset(reg.backends, 0, sizeof reg.backends);
  __atomic_store_n(&reg.initialized, 0, __ATOMIC_RELEASE);
}

static int init_locked(void) {
  int total = 0, rc, enabled[N_COMPILED];
  const char *limit_text = getenv("DLRT_MEM_LIMIT");
  if ((rc = parse_backend_env(enabled)) < 0) return rc;
  if ((rc = dlrt__link_check_env()) < 0) return rc;
  const char *backend_env = getenv("DLRT_BACKEND");
  snprintf(reg.backend_env, sizeof reg.backend_env, "%s", backend_env ? backend_env : "");
  for (int i = 0; i < N_COMPILED; i++) {
    backend_slot *s = &reg.backends[i];
    memset(s, 0, sizeof *s);
    s->be = compiled[i];
    if (s->be->api_version != DLRT_BACKEND_API_VERSION) continue;
    if ((s->left_out = !enabled[i])) continue;
    int n = 0;
    /* A backend that fails to start is absent, not fatal; one that starts
     * is shut down at teardown, even with no device and no ctx. */
    s->started = s->be->init(&s->ctx, &n) == DLRT_OK;
    if (!s->started || n < 0) n = 0;
    s->n_devices = n;
    total += n;
  }
  reg.devices = calloc(total ? (size_t)total : 1, sizeof *reg.devices);
  if (!reg.devices) {
    rc = dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
    goto fail;
  }
  int k = 0;
  for (int i = 0; i < N_COMPILED; i++) {
    backend_slot *s = &reg.backends[i];
    for (int d = 0; d < s->n_devices; d++, k++) {
      dlrt_device_t *dev = &reg.devices[k];
      dev->be = s->be;
      dev->be_ctx = s->ctx;
      dev->index = d;
      snprintf(dev->spec, sizeof dev->spec, "%s:%d", s->be->name, d);
      pthread_mutex_init(&dev->lock, NULL);
      pthread_mutex_init(&dev->attach_lock, NULL);
      if (limit_text && *limit_text) {
        dlrt_device_props p;
        uint64_t limit;
        if (s->be->device_props(s->ctx, d, &p) < 0) p.total_memory = 0;
        if (dlrt_parse_size(limit_text, p.total_memory, &limit) < 0) {
          rc = dlrt__set_error(DLRT_ERR_INVALID_ARG, "DLRT_MEM_LIMIT=\"%s\" is not a size: "
                               "use bytes with an optional K, M, G or T suffix (256M) or "
                               "a percentage of device memory (50%%)", limit_text);
          reg.n_devices = k + 1;
          goto fail;
        }
        dev->initial_limit = limit;
      }
    }
  }
  reg.n_devices = total;
  __atomic_store_n(&reg.initialized, 1, __ATOMIC_RELEASE);
  return DLRT_OK;
fail:
  teardown_locked();
  return rc;
}

int dlrt_init(void) {
  int rc = DLRT_OK;
  pthread_mutex_lock(&reg.lock);
  if (!reg.initialized) rc = init_locked();
  pthread_mutex_unlock(&reg.lock);
  return rc;
}

int dlrt__ensure_init(void) {
  /* Fast path without the lock once initialised (set last, under the lock). */
  if (__atomic_load_n(&reg.initialized, __ATOMIC_ACQUIRE)) return DLRT_OK;
  return dlrt_init();
}

void dlrt_shutdown(void) {
  pthread_mutex_lock(&reg.lock);
  if (reg.initialized) teardown_locked();
  pthread_mutex_unlock(&reg.lock);
}

/* ---------------------------------------------------------------- backends */

int dlrt_backend_count(void) { return N_COMPILED; }

const char *dlrt_backend_name(int index) {
  return index >= 0 && index < N_COMPILED ? compiled[index]->name : NULL;
}

static backend_slot *find_backend(const char *name) {
  for (int i = 0; i < N_COMPILED; i++)
    if (strcasecmp(compiled[i]->name, name) == 0) return &reg.backends[i];
  return NULL;
}

static void list_backends(char *out, size_t n) {
  size_t used = 0;
  out[0] = '\0';
  for (int i = 0; i < N_COMPILED && used < n; i++)
    used += (size_t)snprintf(out + used, n - used, "%s%s", i ? ", " : "", compiled[i]->name);
}

int dlrt_backend_available(const char *name) {
  int rc = dlrt__ensure_init();
  if (rc < 0) return rc;
  DLRT__CHECK_ARG(name, "backend name is NULL");
  backend_slot *s = find_backend(name);
  if (!s) {
    char known[128];
    list_backends(known, sizeof known);
    return dlrt__set_error(DLRT_ERR_NOT_FOUND, "backend \"%s\" is not compiled in "
                           "(this build has: %s)", name, known);
  }
  return s->n_devices > 0;
}

int dlrt_backend_device_count(const char *name) {
  int rc = dlrt_backend_available(name);
  return rc < 0 ? rc : find_backend(name)->n_devices;
}

/* ---------------------------------------------------------------- devices */

int dlrt_device_count(void) {
  int rc = dlrt__ensure_init();
  return rc < 0 ? rc : reg.n_devices;
}

int dlrt_device_get(int index, dlrt_device_t **out) {
  int rc = dlrt__ensure_init();
  if (rc < 0) return rc;
  DLRT__CHECK_ARG(out, "out is NULL");
  if (index < 0 || index >= reg.n_devices)
    return dlrt__set_error(DLRT_ERR_NO_DEVICE, "device index %d out of range: there %s "
                           "%d device%s", index, reg.n_devices == 1 ? "is" : "are",
                           reg.n_devices, reg.n_devices == 1 ? "" : "s");
  *out = &reg.devices[index];
  return DLRT_OK;
}

/* "auto": discrete over integrated over CPU; at equal kind CUDA before OpenCL
 * for GPUs, but the CPU backend before an OpenCL driver on the CPU (PoCL: same
 * silicon, no copies); then the most memory. */
static int auto_rank(const dlrt_device_t *d, const dlrt_device_props *p) {
  int kind = p->kind == DLRT_DEVICE_DISCRETE ? 2 : p->kind == DLRT_DEVICE_INTEGRATED ? 1 : 0;
  int native = p->kind == DLRT_DEVICE_CPU ? strcmp(d->be->name, "cpu") == 0
                                          : strcmp(d->be->name, "cuda") == 0;
  return kind * 2 + native;
}

static int pick_auto(dlrt_device_t **out) {
  dlrt_device_t *best = NULL;
  dlrt_device_props bp, p;
  for (int i = 0; i < reg.n_devices; i++) {
    dlrt_device_t *d = &reg.devices[i];
    if (d->be->device_props(d->be_ctx, d->index, &p) < 0) continue;
    if (!best || auto_rank(d, &p) > auto_rank(best, &bp) ||
        (auto_rank(d, &p) == auto_rank(best, &bp) && p.total_memory > bp.total_memory)) {
      best = d;
      bp = p;
    }
  }
  if (!best) return dlrt__set_error(DLRT_ERR_NO_DEVICE, "no device is available");
  *out = best;
  return DLRT_OK;
}

static void list_devices(char *out, size_t n) {
  size_t used = 0;
  out[0] = '\0';
  for (int i = 0; i < reg.n_devices && used < n; i++)
    used += (size_t)snprintf(out + used, n - used, "%s%s", i ? ", " : "", reg.devices[i].spec);
}

int dlrt_device_open(const char *spec, dlrt_device_t **out) {
  int rc = dlrt__ensure_init();
  if (rc < 0) return rc;
  DLRT__CHECK_ARG(out, "out is NULL");
  const char *from = "";
  if (!spec || !*spec) {
    spec = getenv("DLRT_DEVICE");
    from = " (from DLRT_DEVICE)";
    if (!spec || !*spec) spec = "auto";
  }
  if (strcmp(spec, "auto") == 0) return pick_auto(out);

  char known[128], devices[512];
  list_backends(known, sizeof known);
  list_devices(devices, sizeof devices);
  size_t len = strlen(spec);
  const char *colon = strchr(spec, ':');
  size_t name_len = colon ? (size_t)(colon - spec) : len;
  if (len > 64 || name_len == 0)
    return dlrt__set_error(DLRT_ERR_BAD_SPEC, "device spec \"%.64s\"%s is malformed: use "
                           "BACKEND[:INDEX] (backends: %s) or auto", spec, from, known);
  long index = 0;
  if (colon) {
    const char *digits = colon + 1;
    char *end;
    if (!isdigit((unsigned char)*digits))
      return dlrt__set_error(DLRT_ERR_BAD_SPEC, "device spec \"%s\"%s is malformed: the "
                             "index after ':' must be a number, as in cuda:0", spec, from);
    errno = 0;
    index = strtol(digits, &end, 10);
    if (*end || errno || index > 1 << 20)
      return dlrt__set_error(DLRT_ERR_BAD_SPEC, "device spec \"%s\"%s is malformed: the "
                             "index after ':' must be a number, as in cuda:0", spec, from);
  }
  backend_slot *slot = NULL;
  for (int i = 0; i < N_COMPILED; i++)
    if (strlen(compiled[i]->name) == name_len &&
        strncasecmp(compiled[i]->name, spec, name_len) == 0)
      slot = &reg.backends[i];
  if (!slot) {
    for (size_t i = 0; i < sizeof known_backends / sizeof known_backends[0]; i++)
      if (strlen(known_backends[i]) == name_len &&
          strncasecmp(known_backends[i], spec, name_len) == 0)
        return dlrt__set_error(DLRT_ERR_NO_DEVICE, "device \"%s\"%s: this build has no %.*s "
                               "backend (rebuild with --with-%.*s); devices here: %s",
                               spec, from, (int)name_len, spec, (int)name_len, spec, devices);
    return dlrt__set_error(DLRT_ERR_BAD_SPEC, "device spec \"%s\"%s names an unknown backend "
                           "\"%.*s\"; known backends: %s (or auto)", spec, from,
                           (int)name_len, spec, known);
  }
  if (slot->left_out)
    return dlrt__set_error(DLRT_ERR_NO_DEVICE, "no device %s%s: the %s backend was left out "
                           "by DLRT_BACKEND=\"%s\" (add %s to it, or unset it); devices here: "
                           "%s", spec, from, slot->be->name, reg.backend_env,
                           slot->be->name, devices);
  if (index >= slot->n_devices)
    return dlrt__set_error(DLRT_ERR_NO_DEVICE, "no device %s%s: the %s backend has %d "
                           "device%s%s; devices here: %s", spec, from, slot->be->name,
                           slot->n_devices, slot->n_devices == 1 ? "" : "s",
                           slot->n_devices ? "" : " (no driver or platform found)", devices);
  for (int i = 0; i < reg.n_devices; i++)
    if (reg.devices[i].be == slot->be && reg.devices[i].index == index) {
      *out = &reg.devices[i];
      return DLRT_OK;
    }
  return dlrt__set_error(DLRT_ERR_NO_DEVICE, "no device %s", spec);
}

const char *dlrt_device_kind_name(dlrt_device_kind kind) {
  switch (kind) {
  case DLRT_DEVICE_CPU: return "cpu";
  case DLRT_DEVICE_INTEGRATED: return "integrated";
  case DLRT_DEVICE_DISCRETE: return "discrete";
  }
  return "unknown";
}
