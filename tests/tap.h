/*
 * tap.h — a small TAP (Test Anything Protocol, version 13) writer for the dlrt
 * test programs, read by automake's tap-driver.sh.
 *
 * A test program either announces its plan first (plan(n)) or, when the count
 * depends on the devices present, ends with done_testing(), which prints the
 * plan last. Either way main() ends with `return done_testing();`: it exits 0
 * when every point passed (skips count as passed) and 1 otherwise.
 *
 * The assertions are macros so that a failure names the file and line. Each
 * returns 1 when the point passed and 0 when it failed, so a caller can stop
 * a sequence whose later steps depend on an earlier one. Call them from the
 * main thread only: points are numbered in the order they are printed.
 */
#ifndef DLRT_TESTS_TAP_H
#define DLRT_TESTS_TAP_H

#include <stddef.h>
#include <stdint.h>

#include "dlrt.h"

#if defined(__GNUC__)
#define TAP_PRINTF(fmt_index, first_arg)                                               \
  __attribute__((format(printf, fmt_index, first_arg)))
#else
#define TAP_PRINTF(fmt_index, first_arg)
#endif

/* Announces that `count` points follow. Call at most once, before any point. */
void plan(int count);
/* Prints the plan if plan() was not called, checks the count against it if it
 * was, and returns the process exit status (0: all passed, 1: not). */
int done_testing(void);

/* `# message` lines, ignored by the driver but kept in the log. */
void diag(const char *fmt, ...) TAP_PRINTF(1, 2);
/* `count` points reported as `ok N # SKIP reason`. */
void skip(int count, const char *fmt, ...) TAP_PRINTF(2, 3);
/* A fresh folder for the test's files, $TMPDIR/NAME-XXXXXX (else /tmp), in
 * buf; bails out when it cannot be made. */
const char *tap_tempdir(const char *name, char *buf, size_t size);
/* dir/rel in one of 8 rotating buffers (so a few may be held at once). */
const char *tap_join(const char *dir, const char *rel);
/* Writes `len` bytes (or a string) as the whole of `path`; bails out when it
 * cannot. */
void tap_write_file(const char *path, const void *bytes, size_t len);
void tap_write_text(const char *path, const char *text);
/* The whole of `path` in malloc'd memory (*len bytes), or NULL. */
unsigned char *tap_read_file(const char *path, size_t *len);
/* Removes a folder and everything in it (what tap_tempdir made). */
void tap_remove_tree(const char *path);
/* Aborts the whole test program (the driver reports it as an error). */
_Noreturn void bail_out(const char *fmt, ...) TAP_PRINTF(1, 2);

#define ok(cond, ...) tap_ok(__FILE__, __LINE__, (cond) ? 1 : 0, __VA_ARGS__)
#define is_int(got, want, ...)                                                         \
  tap_is_int(__FILE__, __LINE__, (long long)(got), (long long)(want), __VA_ARGS__)
#define is_size(got, want, ...)                                                        \
  tap_is_u64(__FILE__, __LINE__, (uint64_t)(got), (uint64_t)(want), __VA_ARGS__)
#define is_u64(got, want, ...)                                                         \
  tap_is_u64(__FILE__, __LINE__, (uint64_t)(got), (uint64_t)(want), __VA_ARGS__)
#define is_str(got, want, ...)                                                         \
  tap_is_str(__FILE__, __LINE__, (got), (want), __VA_ARGS__)
/* A dlrt status compared by name: `got DLRT_ERR_OOM (-2), want ...` plus the
 * thread's dlrt_last_error(). */
#define is_status(got, want, ...)                                                      \
  tap_is_status(__FILE__, __LINE__, (got), (want), __VA_ARGS__)
/* `bytes` of memory compared exactly; a failure names the first differing byte. */
#define is_mem(got, want, bytes, ...)                                                  \
  tap_is_mem(__FILE__, __LINE__, (got), (want), (bytes), __VA_ARGS__)
/* One point: passes when `status` is DLRT_OK, otherwise shows
 * dlrt_strerror(status) and dlrt_last_error(). */
#define tap_check(status, ...) tap_check_at(__FILE__, __LINE__, (status), __VA_ARGS__)
/* For a compute call a device may lack. DLRT_OK: no point, returns 1 (the
 * caller then checks the result). DLRT_ERR_UNSUPPORTED: one SKIP point giving
 * the library's reason, returns 0 — a missing kernel is never a pass (a failed
 * point on a device of a backend $DLRT_TEST_REQUIRE names, inside
 * tap_for_each_device). Any other status: one failed point, returns 0. */
#define tap_check_op(status, ...)                                                      \
  tap_check_op_at(__FILE__, __LINE__, (status), __VA_ARGS__)

int tap_ok(const char *file, int line, int passed, const char *fmt, ...)
    TAP_PRINTF(4, 5);
int tap_is_int(const char *file, int line, long long got, long long want,
               const char *fmt, ...) TAP_PRINTF(5, 6);
int tap_is_u64(const char *file, int line, uint64_t got, uint64_t want, const char *fmt,
               ...) TAP_PRINTF(5, 6);
int tap_is_str(const char *file, int line, const char *got, const char *want,
               const char *fmt, ...) TAP_PRINTF(5, 6);
int tap_is_status(const char *file, int line, int got, int want, const char *fmt, ...)
    TAP_PRINTF(5, 6);
int tap_is_mem(const char *file, int line, const void *got, const void *want,
               size_t bytes, const char *fmt, ...) TAP_PRINTF(6, 7);
int tap_check_at(const char *file, int line, int status, const char *fmt, ...)
    TAP_PRINTF(4, 5);
int tap_check_op_at(const char *file, int line, int status, const char *fmt, ...)
    TAP_PRINTF(4, 5);

/* Shared test data: byte i of a stream numbered `seed`. Well mixed, so a copy
 * that lands at a wrong offset (by any amount) or mixes up two sources does
 * not match by accident, as a short-period pattern such as i % 256 would. */
uint8_t pattern_byte(size_t i, uint32_t seed);
void fill_pattern(void *dst, size_t bytes, uint32_t seed);

/* A new buffer on `dev` holding `bytes` of `host` (blocking copy), or NULL
 * with the reason in dlrt_last_error(). */
dlrt_buffer_t *upload_buffer(dlrt_device_t *dev, const void *host, size_t bytes);

/* Every device present, for a test whose points run on each. A test that
 * names its devices itself ("cpu", "opencl:0") never runs on the ones it did
 * not think of (CUDA on a GPU machine), so the list comes from the library.
 *
 * tap_for_each_device() visits the cpu first (the reference the others are
 * compared with), then each OpenCL device, then each CUDA device, then those
 * of any other compiled backend. For each device it prints one point, that
 * the device opens (its name and driver in the description), and when it
 * does calls fn with the device, its spec ("opencl:0") and ctx. A backend
 * with no device prints one SKIP point saying why: not compiled into this
 * build, or compiled but it found no device (no driver, platform or device,
 * or $DLRT_BACKEND leaves it out). So a test's point count is (1 + its points
 * per device) x devices + backends without one, and tests end with
 * done_testing(). Returns the number of devices fn ran on.
 *
 * $DLRT_TEST_REQUIRE=cuda (backends, comma-separated, any case) turns those
 * SKIPs into failed points for the backends it names: a check on a GPU
 * machine (tests/gpu-check.sh) must not pass with the GPU's backend unbuilt,
 * its driver not found or its devices left out. While fn runs on a device of
 * such a backend, tap_check_op's DLRT_ERR_UNSUPPORTED is a failed point too
 * (a kernel that backend lacks). A name there that is no backend of dlrt
 * fails a point, so a typo cannot require nothing. */
typedef void tap_device_fn(dlrt_device_t *dev, const char *spec, void *ctx);
int tap_for_each_device(tap_device_fn *fn, void *ctx);
/* 1 when dev is a device of the cpu backend (the first one visited). */
int tap_device_is_cpu(dlrt_device_t *dev);

#endif /* DLRT_TESTS_TAP_H */
