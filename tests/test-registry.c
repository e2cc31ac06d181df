/*
 * test-registry.c — backends, device enumeration and properties, device specs
 * (including $DLRT_DEVICE and "auto"), $DLRT_BACKEND, and init/shutdown cycles.
 *
 * The number of points depends on the backends compiled in and the devices
 * found, so the plan is printed at the end (done_testing).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "tap.h"

#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)

static const char *const known_backends[] = {"cpu", "opencl", "cuda"};
enum { KNOWN_BACKENDS = sizeof known_backends / sizeof known_backends[0] };

static int backend_compiled(const char *name) {
  for (int i = 0; i < dlrt_backend_count(); i++) {
    const char *b = dlrt_backend_name(i);
    if (b && strcmp(b, name) == 0)
      return 1;
  }
  return 0;
}

static int is_power_of_two(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

static void test_names_and_version(void) {
  is_str(dlrt_version_string(),
         STRINGIFY(DLRT_VERSION_MAJOR) "." STRINGIFY(DLRT_VERSION_MINOR) "." STRINGIFY(
             DLRT_VERSION_PATCH),
         "dlrt_version_string() matches the header's version macros");
  const dlrt_device_kind kinds[] = {DLRT_DEVICE_CPU, DLRT_DEVICE_INTEGRATED,
                                    DLRT_DEVICE_DISCRETE};
  int distinct = 1;
  for (int i = 0; i < 3; i++) {
    const char *a = dlrt_device_kind_name(kinds[i]);
    diag("kind %d is \"%s\"", (int)kinds[i], a ? a : "(NULL)");
    if (!a || !a[0])
      distinct = 0;
    for (int j = 0; j < i && a; j++) {
      const char *b = dlrt_device_kind_name(kinds[j]);
      if (b && strcmp(a, b) == 0)
        distinct = 0;
    }
  }
  ok(distinct, "dlrt_device_kind_name gives three distinct non-empty names");
}

static void test_init(void) {
  tap_check(dlrt_init(), "dlrt_init()");
  tap_check(dlrt_init(), "dlrt_init() a second time is harmless");
}

static void test_backends(void) {
  int count = dlrt_backend_count();
  ok(count >= 1 && count <= KNOWN_BACKENDS, "dlrt_backend_count() = %d", count);

  int device_sum = 0;
  for (int i = 0; i < count; i++) {
    const char *name = dlrt_backend_name(i);
    int known = 0;
    for (int k = 0; name && k < KNOWN_BACKENDS; k++)
      known |= strcmp(name, known_backends[k]) == 0;
    ok(known, "backend %d is \"%s\", one of cpu/opencl/cuda", i,
       name ? name : "(NULL)");
    if (!name)
      continue;
    int available = dlrt_backend_available(name);
    int devices = dlrt_backend_device_count(name);
    diag("backend %s: available %d, %d device(s)", name, available, devices);
    ok(available == 0 || available == 1, "dlrt_backend_available(\"%s\") is 0 or 1",
       name);
    ok(devices >= 0 && (available == 1 || devices == 0),
       "backend %s: %d devices, none unless it started", name, devices);
    if (devices > 0)
      device_sum += devices;
  }
  ok(dlrt_backend_name(count) == NULL && dlrt_backend_name(-1) == NULL,
     "dlrt_backend_name outside [0, count) is NULL");
  is_int(dlrt_device_count(), device_sum,
         "dlrt_device_count() is the sum over the backends");

  is_int(dlrt_backend_available("cpu"), 1, "the cpu backend always starts");
  is_int(dlrt_backend_device_count("cpu"), 1, "the cpu backend has one device");

  if (backend_compiled("cuda") && dlrt_backend_device_count("cuda") == 0) {
    is_int(dlrt_backend_available("cuda"), 0,
           "cuda is compiled in but did not start (no GPU)");
  } else {
    skip(1, backend_compiled("cuda") ? "a CUDA device is present"
                                     : "cuda not compiled in");
  }

  ok(dlrt_backend_available("vulkan") != 1,
     "dlrt_backend_available(\"vulkan\") is not 1 (got %d)",
     dlrt_backend_available("vulkan"));
  ok(dlrt_backend_device_count("vulkan") <= 0,
     "dlrt_backend_device_count(\"vulkan\") has no devices (got %d)",
     dlrt_backend_device_count("vulkan"));
  is_status(dlrt_backend_available(NULL), DLRT_ERR_INVALID_ARG,
            "dlrt_backend_available(NULL)");
  is_status(dlrt_backend_device_count(NULL), DLRT_ERR_INVALID_ARG,
            "dlrt_backend_device_count(NULL)");
}

static void test_device(int index) {
  dlrt_device_t *dev = NULL;
  if (!tap_check(dlrt_device_get(index, &dev), "dlrt_device_get(%d)", index) ||
      !ok(dev != NULL, "device %d is not NULL", index))
    return;
  dlrt_device_props p;
  memset(&p, 0, sizeof p);
  if (!tap_check(dlrt_device_props_get(dev, &p), "dlrt_device_props_get(%d)", index))
    return;
  diag("device %d: %s  \"%s\" vendor \"%s\" driver \"%s\" kind %s, %llu MiB "
       "total, %llu MiB free, alignment %zu, host-addressable %d, %d CUs",
       index, p.spec, p.name, p.vendor, p.driver, dlrt_device_kind_name(p.kind),
       (unsigned long long)(p.total_memory >> 20),
       (unsigned long long)(p.free_memory >> 20), p.alignment, p.host_addressable,
       p.compute_units);

  const char *spec = dlrt_device_spec(dev);
  is_str(spec, p.spec, "device %d: dlrt_device_spec equals props.spec", index);
  char expected_spec[64];
  snprintf(expected_spec, sizeof expected_spec, "%s:%d", p.backend, p.index);
  is_str(p.spec, expected_spec, "device %d: spec is backend:index", index);
  ok(backend_compiled(p.backend), "device %d: backend \"%s\" is compiled in", index,
     p.backend);
  ok(p.index >= 0 && p.index < dlrt_backend_device_count(p.backend),
     "device %d: index %d within its backend's %d devices", index, p.index,
     dlrt_backend_device_count(p.backend));
  ok(p.name[0] != '\0', "device %d has a name", index);
  ok(p.kind == DLRT_DEVICE_CPU || p.kind == DLRT_DEVICE_INTEGRATED ||
         p.kind == DLRT_DEVICE_DISCRETE,
     "device %d: kind %d is valid", index, (int)p.kind);
  ok(p.total_memory > 0, "device %d: total_memory > 0", index);
  ok(p.free_memory <= p.total_memory, "device %d: free_memory <= total_memory", index);
  ok(is_power_of_two(p.alignment) && p.alignment >= 64,
     "device %d: alignment %zu is a power of two >= 64", index, p.alignment);
  ok(p.host_addressable == 0 || p.host_addressable == 1,
     "device %d: host_addressable is 0 or 1", index);
  ok(p.compute_units >= 1, "device %d: compute_units %d >= 1", index, p.compute_units);

  dlrt_device_t *again = NULL;
  tap_check(dlrt_device_open(p.spec, &again), "dlrt_device_open(\"%s\")", p.spec);
  ok(again == dev, "opening \"%s\" gives the same device object", p.spec);
  tap_check(dlrt_device_synchronize(dev), "dlrt_device_synchronize(%s)", p.spec);
}

static void test_devices(void) {
  int count = dlrt_device_count();
  ok(count >= 1, "dlrt_device_count() = %d, at least the CPU", count);
  for (int i = 0; i < count; i++)
    test_device(i);

  /* Every spec is different: a device reachable by two specs, or two devices
   * behind one, would make "cuda:1" mean nothing. */
  int distinct = 1;
  for (int i = 0; i < count; i++)
    for (int j = 0; j < i; j++) {
      dlrt_device_t *a = NULL, *b = NULL;
      dlrt_device_get(i, &a);
      dlrt_device_get(j, &b);
      if (a && b && strcmp(dlrt_device_spec(a), dlrt_device_spec(b)) == 0)
        distinct = 0;
    }
  ok(distinct, "the %d devices have distinct specs", count);

  dlrt_device_t *dev = NULL;
  ok(dlrt_device_get(count, &dev) < 0, "dlrt_device_get(count) fails");
  ok(dlrt_device_get(-1, &dev) < 0, "dlrt_device_get(-1) fails");
  is_status(dlrt_device_get(0, NULL), DLRT_ERR_INVALID_ARG,
            "dlrt_device_get with a NULL out pointer");
  dlrt_device_props p;
  is_status(dlrt_device_props_get(NULL, &p), DLRT_ERR_INVALID_ARG,
            "dlrt_device_props_get(NULL device)");
  if (dlrt_device_get(0, &dev) == DLRT_OK)
    is_status(dlrt_device_props_get(dev, NULL), DLRT_ERR_INVALID_ARG,
              "dlrt_device_props_get(NULL props)");
  is_status(dlrt_device_synchronize(NULL), DLRT_ERR_INVALID_ARG,
            "dlrt_device_synchronize(NULL)");
}

static dlrt_device_t *open_or_null(const char *spec) {
  dlrt_device_t *dev = NULL;
  return dlrt_device_open(spec, &dev) == DLRT_OK ? dev : NULL;
}

static void test_cpu_spec(void) {
  dlrt_device_t *cpu = open_or_null("cpu");
  dlrt_device_t *cpu0 = open_or_null("cpu:0");
  ok(cpu != NULL, "\"cpu\" opens");
  ok(cpu0 != NULL && cpu0 == cpu, "\"cpu:0\" opens the same device");
  if (!cpu)
    return;
  is_str(dlrt_device_spec(cpu), "cpu:0", "the CPU's spec is \"cpu:0\"");
  dlrt_device_props p;
  memset(&p, 0, sizeof p);
  tap_check(dlrt_device_props_get(cpu, &p), "props of the CPU");
  is_int(p.kind, DLRT_DEVICE_CPU, "the CPU's kind is DLRT_DEVICE_CPU");
  is_int(p.host_addressable, 1, "the CPU is host-addressable");
  is_str(p.backend, "cpu", "the CPU's backend is \"cpu\"");
}

/* "auto" picks the best kind (discrete > integrated > CPU); between devices
 * of that kind CUDA beats OpenCL. */
static void test_auto_spec(void) {
  int best_kind = -1, best_has_cuda = 0;
  for (int i = 0; i < dlrt_device_count(); i++) {
    dlrt_device_t *dev = NULL;
    dlrt_device_props p;
    if (dlrt_device_get(i, &dev) != DLRT_OK ||
        dlrt_device_props_get(dev, &p) != DLRT_OK)
      continue;
    if ((int)p.kind > best_kind) {
      best_kind = p.kind;
      best_has_cuda = 0;
    }
    if ((int)p.kind == best_kind && strcmp(p.backend, "cuda") == 0)
      best_has_cuda = 1;
  }

  dlrt_device_t *chosen = NULL;
  if (!tap_check(dlrt_device_open("auto", &chosen), "\"auto\" opens a device"))
    return;
  dlrt_device_props p;
  memset(&p, 0, sizeof p);
  dlrt_device_props_get(chosen, &p);
  diag("auto chose %s (%s)", p.spec, p.name);
  is_int(p.kind, best_kind, "\"auto\" chose a device of the best kind present");
  if (best_has_cuda)
    is_str(p.backend, "cuda", "\"auto\" prefers CUDA at equal kind");
  else
    skip(1, "no CUDA device of the best kind");

  unsetenv("DLRT_DEVICE");
  ok(open_or_null(NULL) == chosen, "NULL without $DLRT_DEVICE means \"auto\"");
  ok(open_or_null("") == chosen, "\"\" without $DLRT_DEVICE means \"auto\"");
}

static void test_env_spec(void) {
  dlrt_device_t *cpu = open_or_null("cpu");
  dlrt_device_t *dev = NULL;

  setenv("DLRT_DEVICE", "cpu", 1);
  ok(cpu && open_or_null(NULL) == cpu, "DLRT_DEVICE=cpu: NULL opens the CPU");
  ok(cpu && open_or_null("") == cpu, "DLRT_DEVICE=cpu: \"\" opens the CPU");
  setenv("DLRT_DEVICE", "bogus", 1);
  is_status(dlrt_device_open(NULL, &dev), DLRT_ERR_BAD_SPEC,
            "DLRT_DEVICE=bogus: NULL fails with BAD_SPEC");
  setenv("DLRT_DEVICE", "cpu:1", 1);
  is_status(dlrt_device_open("", &dev), DLRT_ERR_NO_DEVICE,
            "DLRT_DEVICE=cpu:1: \"\" fails with NO_DEVICE");
  unsetenv("DLRT_DEVICE");
}

static void expect_no_device(const char *spec) {
  dlrt_device_t *dev = NULL;
  dlrt_clear_error();
  if (is_status(dlrt_device_open(spec, &dev), DLRT_ERR_NO_DEVICE,
                "\"%s\" names no device here", spec))
    ok(strstr(dlrt_last_error(), "cpu:0") != NULL,
       "the message for \"%s\" lists the devices there are: %s", spec,
       dlrt_last_error());
}

static void test_missing_devices(void) {
  expect_no_device("cpu:1");
  for (int k = 1; k < KNOWN_BACKENDS; k++) {
    const char *backend = known_backends[k];
    if (!backend_compiled(backend)) {
      skip(3, "%s not compiled in", backend);
      continue;
    }
    int devices = dlrt_backend_device_count(backend);
    char spec[32];
    snprintf(spec, sizeof spec, "%s:%d", backend, devices);
    expect_no_device(spec);
    dlrt_device_t *dev = NULL;
    if (devices > 0)
      tap_check(dlrt_device_open(backend, &dev), "\"%s\" alone opens %s:0", backend,
                backend);
    else
      is_status(dlrt_device_open(backend, &dev), DLRT_ERR_NO_DEVICE,
                "\"%s\" alone: no %s device here", backend, backend);
  }
  if (backend_compiled("opencl"))
    expect_no_device("opencl:99");
  else
    skip(2, "opencl not compiled in");
  if (backend_compiled("cuda") && dlrt_backend_device_count("cuda") == 0)
    expect_no_device("cuda:0");
  else
    skip(2, backend_compiled("cuda") ? "a CUDA device is present"
                                     : "cuda not compiled in");
}

static void test_bad_specs(void) {
  char long_spec[201];
  memset(long_spec, 'c', 200);
  long_spec[200] = '\0';
  const char *const bad[] = {"gpu", "cpu:",     "cpu:x",  "cpu:-1",
                             ":0",  "cuda:0:1", "cpu:0x", long_spec};
  dlrt_device_t *dev = NULL;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    is_status(dlrt_device_open(bad[i], &dev), DLRT_ERR_BAD_SPEC,
              "\"%.24s%s\" is malformed", bad[i], strlen(bad[i]) > 24 ? "..." : "");

  dlrt_clear_error();
  if (is_status(dlrt_device_open("vulkan:0", &dev), DLRT_ERR_BAD_SPEC,
                "\"vulkan:0\": an unknown backend is a malformed spec")) {
    int lists_all = 1;
    for (int i = 0; i < dlrt_backend_count(); i++)
      if (!strstr(dlrt_last_error(), dlrt_backend_name(i)))
        lists_all = 0;
    ok(lists_all, "the message lists the known backends: %s", dlrt_last_error());
  }
  is_status(dlrt_device_open("cpu", NULL), DLRT_ERR_INVALID_ARG,
            "dlrt_device_open with a NULL out pointer");
}

/* DLRT_BACKEND is read when the library starts; a shutdown/init cycle picks
 * up a new value and drops devices of backends no longer named. */
static void test_backend_env(void) {
  int all_devices = dlrt_device_count();
  dlrt_shutdown();
  setenv("DLRT_BACKEND", "cpu", 1);
  tap_check(dlrt_init(), "dlrt_init() with DLRT_BACKEND=cpu");
  is_int(dlrt_device_count(), 1, "DLRT_BACKEND=cpu: only the CPU");
  if (backend_compiled("opencl"))
    is_int(dlrt_backend_available("opencl"), 0,
           "DLRT_BACKEND=cpu: opencl is compiled but not started");
  else
    skip(1, "opencl not compiled in");
  ok(open_or_null("cpu") != NULL, "DLRT_BACKEND=cpu: \"cpu\" opens");

  if (backend_compiled("opencl")) {
    dlrt_device_t *dev = NULL;
    is_status(dlrt_device_open("opencl:0", &dev), DLRT_ERR_NO_DEVICE,
              "DLRT_BACKEND=cpu: opening opencl:0 fails");
    ok(strstr(dlrt_last_error(), "left out by DLRT_BACKEND") &&
           !strstr(dlrt_last_error(), "no driver"),
       "... blaming DLRT_BACKEND, not the driver: %s", dlrt_last_error());
  } else {
    skip(2, "opencl not compiled in");
  }

  /* Names in any case, with blanks around them. */
  dlrt_shutdown();
  setenv("DLRT_BACKEND", " CPU ", 1);
  tap_check(dlrt_init(), "dlrt_init() with DLRT_BACKEND=\" CPU \"");
  is_int(dlrt_device_count(), 1, "DLRT_BACKEND=\" CPU \": the CPU, as for cpu");
  ok(open_or_null("CPU:0") != NULL, "the spec \"CPU:0\" opens the CPU (case-insensitive)");

  /* A name that is no backend starts nothing silently: it is an error. */
  static const char *const bad[] = {"bogus", "cpu,bogus", "cpu,", "cpus"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    dlrt_shutdown();
    setenv("DLRT_BACKEND", bad[i], 1);
    is_status(dlrt_init(), DLRT_ERR_INVALID_ARG, "dlrt_init() with DLRT_BACKEND=\"%s\"",
              bad[i]);
    int lists_all = strstr(dlrt_last_error(), "DLRT_BACKEND") != NULL;
    for (int b = 0; b < dlrt_backend_count(); b++)
      lists_all &= strstr(dlrt_last_error(), dlrt_backend_name(b)) != NULL;
    ok(lists_all, "... names the variable and lists the compiled backends: %s",
       dlrt_last_error());
    is_status(dlrt_device_count(), DLRT_ERR_INVALID_ARG,
              "... and so does a call that starts the library implicitly");
  }
  /* A backend dlrt knows but this build lacks. */
  const char *absent = NULL;
  for (int i = 0; i < KNOWN_BACKENDS && !absent; i++)
    if (!backend_compiled(known_backends[i])) absent = known_backends[i];
  if (absent) {
    dlrt_shutdown();
    setenv("DLRT_BACKEND", absent, 1);
    is_status(dlrt_init(), DLRT_ERR_INVALID_ARG, "DLRT_BACKEND=%s in a build without it",
              absent);
    ok(strstr(dlrt_last_error(), "rebuild with --with-"), "... says how to get it: %s",
       dlrt_last_error());
  } else {
    skip(2, "every known backend is compiled in");
  }

  dlrt_shutdown();
  unsetenv("DLRT_BACKEND");
  tap_check(dlrt_init(), "dlrt_init() again without DLRT_BACKEND");
  is_int(dlrt_device_count(), all_devices, "every device is back");
}

/* The first call after shutdown starts the library implicitly; several
 * threads racing to be that first call must all see one registry. */
typedef struct {
  pthread_barrier_t *start;
  int devices;
} racer;

static void *count_devices(void *arg) {
  racer *r = arg;
  pthread_barrier_wait(r->start);
  r->devices = dlrt_device_count();
  return NULL;
}

static void test_concurrent_init(void) {
  enum { THREADS = 4 };
  int all_devices = dlrt_device_count();
  dlrt_shutdown();
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, THREADS);
  pthread_t threads[THREADS];
  racer racers[THREADS];
  for (int i = 0; i < THREADS; i++) {
    racers[i] = (racer){&start, -1};
    if (pthread_create(&threads[i], NULL, count_devices, &racers[i]) != 0)
      bail_out("pthread_create failed");
  }
  int agree = 1;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(threads[i], NULL);
    if (racers[i].devices != all_devices) {
      diag("thread %d counted %d devices", i, racers[i].devices);
      agree = 0;
    }
  }
  pthread_barrier_destroy(&start);
  ok(agree, "%d threads starting the library at once all count %d devices", THREADS,
     all_devices);
}

int main(void) {
  /* This program tests these variables itself; it starts from neither. */
  unsetenv("DLRT_DEVICE");
  unsetenv("DLRT_BACKEND");
  test_names_and_version();
  test_init();
  test_backends();
  test_devices();
  test_cpu_spec();
  test_auto_spec();
  test_env_spec();
  test_missing_devices();
  test_bad_specs();
  test_backend_env();
  test_concurrent_init();
  dlrt_shutdown();
  return done_testing();
}
