/* fuzz.h — what the fuzz harnesses of tests/fuzz/ share (fuzz.c).
 *
 * Each harness (fuzz-TARGET.c) defines LLVMFuzzerTestOneInput, libFuzzer's
 * entry point, and calls one parser of dlrt on the input. The same file is
 * built two ways:
 *   - by tests/fuzz/run.sh (make fuzz) with clang -fsanitize=fuzzer, against
 *     the library's sources built with the same sanitizers;
 *   - by make check, with replay.c as main(), linked to libdlrt: it runs the
 *     harness once on each file of the seed corpus (tests/test-fuzz-corpus.sh).
 * A harness reports a finding by aborting (fuzz_fail): libFuzzer saves the
 * input, the replay fails.
 *
 * A harness names the sources it needs besides the library in one line that
 * run.sh reads, as in
 *   fuzz-sources: tools/dltrain-options.c tools/tool-common.c
 * and its input shape in its header comment. */
#ifndef DLRT_TESTS_FUZZ_H
#define DLRT_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define FUZZ_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#define FUZZ_NORETURN __attribute__((noreturn))
#else
#define FUZZ_PRINTF(fmt_index, first_arg)
#define FUZZ_NORETURN
#endif

/* libFuzzer's entry point, defined by each harness. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A finding: prints "fuzz: finding: WHAT" on stderr and aborts. */
FUZZ_NORETURN void fuzz_fail(const char *fmt, ...) FUZZ_PRINTF(1, 2);
#define FUZZ_CHECK(cond, ...)                                                                 \
  do {                                                                                        \
    if (!(cond)) fuzz_fail(__VA_ARGS__);                                                      \
  } while (0)

/* ---------------------------------------------------------------- files */

/* A file that holds one input at a time, for parsers that take a path: a
 * memfd opened again through /proc/self/fd (an unnamed regular file in
 * memory), else a file in the scratch folder. Created on first use and kept
 * for the life of the process. */
typedef struct {
  int fd;
  char path[64 + 4096];
} fuzz_file;

/* Replaces the file's contents with data[0..size) and returns its path. */
const char *fuzz_file_set(fuzz_file *f, const void *data, size_t size);

/* A folder of this process for files a harness writes (round trips), under
 * $TMPDIR (else /dev/shm, else /tmp), emptied and removed at exit. */
const char *fuzz_scratch_dir(void);

/* Sums every byte of p[0..n): reads them all, so that ASan (or a SIGBUS on a
 * short mapping) sees a buffer shorter than the parser claims. */
uint64_t fuzz_touch(const void *p, size_t n);

/* The lowest free file descriptor: equal before and after a parser call, or
 * the parser leaked (or closed) a descriptor. */
int fuzz_lowest_free_fd(void);

/* ---------------------------------------------------------------- argv */

/* A command line cut from the input: argv[0] the tool's name, then the
 * pieces of the input between NUL bytes or newlines (empty ones kept), at
 * most FUZZ_MAX_ARGS. Owns its strings; argv[argc] is NULL. */
enum { FUZZ_MAX_ARGS = 256 };
typedef struct {
  int argc;
  char *argv[FUZZ_MAX_ARGS + 2];
  char *text; /* the copy the arguments point into */
  size_t text_size;
  char *given[FUZZ_MAX_ARGS + 2]; /* argv as split, and text as it was: */
  char *given_text;               /* what fuzz_args_intact compares with */
} fuzz_args;

/* Fills *a from data[0..size) and resets getopt (optind = 0, which makes
 * glibc's getopt start afresh), so that a parser built on getopt_long can
 * be called once per input. 0, or -1 when out of memory. */
int fuzz_args_split(fuzz_args *a, const char *argv0, const uint8_t *data, size_t size);
void fuzz_args_free(fuzz_args *a);

/* 1 when argv and its strings are as fuzz_args_split left them (a parser
 * promises to leave argv as it was: getopt permutes only its own copy). */
int fuzz_args_intact(const fuzz_args *a);

/* 1 when p points into one of the arguments (a parser's "points into argv"). */
int fuzz_args_holds(const fuzz_args *a, const char *p);

/* 1 when both are NULL or both are equal strings. */
int fuzz_same_string(const char *x, const char *y);

#endif
