/*
 * test-kernel-table.c — the kernel table (kernels/kernel_table.h) and the
 * check of every launch against it (lib/device/launch.c).
 *
 * The launch builder is internal and libdlrt hides its internal symbols, so
 * this program is built from the same sources as the library's
 * (lib/device/launch.c, kernels/kernel_table.c, lib/util/status.c: see
 * Makefile.am) and launches on a stand-in backend that counts what reaches
 * it. That the table agrees with the kernels' signatures is checked when
 * the CPU backend and the CUDA kernels compile (cpu_kernels.c,
 * cuda_kernels.cu), not here.
 */
#include <stdio.h>
#include <string.h>

#include "device/launch.h"
#include "kernel_table.h"
#include "tap.h"

/* ---------------------------------------------------------------- stand-in backend */

static int launches; /* launches that reached the backend */

static int count_launch(void *stream, const dlrt__launch *l) {
  (void)stream;
  (void)l;
  launches++;
  return DLRT_OK;
}

static const dlrt_backend_iface counting = {.name = "counting", .launch = count_launch};
static const dlrt_backend_iface no_kernels = {.name = "no-kernels"};

static dlrt_device_t device;
static dlrt_stream_t stream = {.dev = &device};

/* A launcher for kernel `id` on the stand-in device with the arguments of
 * `kinds` (a string: b buffer, f f32, i i64). */
static void build(dlrt__launcher *lb, const char *call, int id, const char *kinds) {
  static float host[4];
  if (dlrt__launch_start(lb, &stream, call) != DLRT_OK) bail_out("launch_start failed");
  lb->launch.kernel = id;
  lb->launch.items = 1;
  for (const char *k = kinds; *k; k++) {
    if (*k == 'b') dlrt__launch_mem_arg(lb, (dlrt_mem){host, host}, 0, sizeof(float));
    else if (*k == 'f') dlrt__launch_f32(lb, 1.0f);
    else dlrt__launch_i64(lb, 1);
  }
}

/* Submits; one point for the status, one for the backend's count. */
static void submit_is(dlrt__launcher *lb, int want, const char *what) {
  int before = launches;
  is_status(dlrt__launch_submit(&stream, lb), want, "%s", what);
  is_int(launches - before, want == DLRT_OK, "%s: %s the backend", what,
         want == DLRT_OK ? "reaches" : "does not reach");
}

/* One point: the detail message holds every one of `parts`. */
static void message_has(const char *what, const char *const *parts) {
  const char *msg = dlrt_last_error();
  int all = 1;
  for (const char *const *p = parts; *p; p++)
    if (!strstr(msg, *p)) {
      diag("no \"%s\" in it", *p);
      all = 0;
    }
  ok(all, "%s: the message names the caller, kernel and argument: %s", what, msg);
}

/* ---------------------------------------------------------------- the table */

static void test_table(void) {
  int well_formed = 1;
  for (int id = 0; id < DLRT__K_COUNT; id++) {
    const dlrt__kernel_info *k = &dlrt__kernel_table[id];
    int kinds_ok = 1;
    for (int i = 0; i < k->n_args; i++)
      kinds_ok &= k->kinds[i] <= DLRT__ARG_I64;
    if (!k->name || strncmp(k->name, "dlrt_k_", 7) != 0 || k->n_args < 1 ||
        k->n_args > DLRT__MAX_ARGS || !kinds_ok) {
      diag("entry %d (%s) is malformed", id, k->name ? k->name : "no name");
      well_formed = 0;
    }
  }
  ok(well_formed, "the %d entries have a dlrt_k_ name and 1 to %d arguments of known kinds",
     DLRT__K_COUNT, DLRT__MAX_ARGS);
  is_str(dlrt__kernel_table[DLRT__K_sum_cols_bf16].name, "dlrt_k_sum_cols_bf16",
         "an entry of a typed family is at its id");
}

/* Every entry's own argument list is accepted: the table and the check agree. */
static void test_every_entry_accepted(void) {
  static const char letter[] = {[DLRT__ARG_BUFFER] = 'b', [DLRT__ARG_F32] = 'f',
                                [DLRT__ARG_I64] = 'i'};
  int accepted = 0, before = launches;
  for (int id = 0; id < DLRT__K_COUNT; id++) {
    const dlrt__kernel_info *k = &dlrt__kernel_table[id];
    char kinds[DLRT__MAX_ARGS + 1];
    for (int i = 0; i < k->n_args; i++) kinds[i] = letter[k->kinds[i]];
    kinds[k->n_args] = '\0';
    dlrt__launcher lb;
    build(&lb, "test(every)", id, kinds);
    if (dlrt__launch_submit(&stream, &lb) == DLRT_OK) accepted++;
    else diag("%s: %s", k->name, dlrt_last_error());
  }
  is_int(accepted, DLRT__K_COUNT, "a launch with its entry's arguments passes, every kernel");
  is_int(launches - before, DLRT__K_COUNT, "and each reaches the backend");
}

/* ---------------------------------------------------------------- mismatches */

static void test_mismatches(void) {
  dlrt__launcher lb;

  /* fill: y (buffer), alpha (f32), n (i64). */
  build(&lb, "test(fill)", DLRT__K_fill_f32, "bfi");
  submit_is(&lb, DLRT_OK, "fill_f32 with its three arguments");

  build(&lb, "test(fill)", DLRT__K_fill_f32, "bi");
  submit_is(&lb, DLRT_ERR_INVALID_ARG, "fill_f32 with one argument too few");
  message_has("too few", (const char *const[]){"test(fill)", "dlrt_k_fill_f32",
                                               "takes 3 arguments", "gives 2", NULL});

  build(&lb, "test(fill)", DLRT__K_fill_f32, "bfii");
  submit_is(&lb, DLRT_ERR_INVALID_ARG, "fill_f32 with one argument too many");
  message_has("too many", (const char *const[]){"test(fill)", "dlrt_k_fill_f32",
                                                "takes 3 arguments", "gives 4", NULL});

  build(&lb, "test(fill)", DLRT__K_fill_f32, "bii");
  submit_is(&lb, DLRT_ERR_INVALID_ARG, "fill_f32 with an i64 for its f32");
  message_has("i64 for f32", (const char *const[]){"test(fill)", "dlrt_k_fill_f32",
                                                   "argument 1", "is an f32", "gives an i64",
                                                   NULL});

  build(&lb, "test(fill)", DLRT__K_fill_f32, "ffi");
  submit_is(&lb, DLRT_ERR_INVALID_ARG, "fill_f32 with an f32 for its buffer");
  message_has("f32 for buffer", (const char *const[]){"dlrt_k_fill_f32", "argument 0",
                                                      "is a buffer", "gives an f32", NULL});

  /* sum_cols_bf16: s, x, rows, cols, beta (f32): the last argument wrong,
   * in a typed family away from its f32 id. */
  build(&lb, "test(sum_cols)", DLRT__K_sum_cols_bf16, "bbiii");
  submit_is(&lb, DLRT_ERR_INVALID_ARG, "sum_cols_bf16 with an i64 for its last argument");
  message_has("typed family", (const char *const[]){"test(sum_cols)", "dlrt_k_sum_cols_bf16",
                                                    "argument 4", "is an f32",
                                                    "gives an i64", NULL});

  build(&lb, "test(id)", DLRT__K_COUNT, "b");
  submit_is(&lb, DLRT_ERR_INVALID_ARG, "a kernel id past the table");
  message_has("bad id", (const char *const[]){"test(id)", "no kernel", NULL});
}

/* compute.c submits an empty launch to learn that a backend has no kernels:
 * that stays DLRT_ERR_UNSUPPORTED, not a mismatch. */
static void test_no_kernels(void) {
  dlrt__launcher lb;
  device.be = &no_kernels;
  build(&lb, "test(empty)", 0, "");
  is_status(dlrt__launch_submit(&stream, &lb), DLRT_ERR_UNSUPPORTED,
            "an empty launch on a backend without kernels is unsupported");
  device.be = &counting;
}

/* Nothing to run never reaches a backend: a CUDA grid of zero blocks is
 * cudaErrorInvalidConfiguration, so the guard is here, for every backend. */
static void test_empty_launch(void) {
  dlrt__launcher lb;
  build(&lb, "test(empty fill)", DLRT__K_fill_f32, "bfi");
  lb.launch.items = 0;
  lb.launch.groups = 0;
  int before = launches;
  is_status(dlrt__launch_submit(&stream, &lb), DLRT_OK, "a launch of zero items succeeds");
  is_int(launches - before, 0, "and does not reach the backend");

  build(&lb, "test(empty groups)", DLRT__K_fill_f32, "bfi");
  lb.launch.items = 0;
  lb.launch.groups = 1;
  before = launches;
  is_status(dlrt__launch_submit(&stream, &lb), DLRT_OK, "a launch of one group succeeds");
  is_int(launches - before, 1, "and reaches the backend");

  build(&lb, "test(negative)", DLRT__K_fill_f32, "bfi");
  lb.launch.items = -3;
  before = launches;
  is_status(dlrt__launch_submit(&stream, &lb), DLRT_ERR_INVALID_ARG,
            "a launch of a negative count of items is refused");
  is_int(launches - before, 0, "before the backend");
  message_has("negative", (const char *const[]){"test(negative)", "-3 items", NULL});

  /* The arguments are still checked: an empty launch with a wrong signature
   * is a bug at the call site even when it happens to run nothing. */
  build(&lb, "test(empty, wrong)", DLRT__K_fill_f32, "bi");
  lb.launch.items = 0;
  is_status(dlrt__launch_submit(&stream, &lb), DLRT_ERR_INVALID_ARG,
            "an empty launch with a wrong argument list is still refused");
}

int main(void) {
  snprintf(device.spec, sizeof device.spec, "counting:0");
  device.be = &counting;
  test_table();
  test_every_entry_accepted();
  test_mismatches();
  test_no_kernels();
  test_empty_launch();
  return done_testing();
}
