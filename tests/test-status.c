/*
 * test-status.c — status codes, their names and messages, and the
 * thread-local detail message (dlrt_last_error).
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "dlrt.h"
#include "tap.h"

typedef struct {
  const char *name; /* "DLRT_ERR_OOM" */
  int value;
  const char *message;
} status_entry;

/* The table as the header defines it, so that a code added there is checked
 * here without editing this file. */
static const status_entry status_table[] = {
#define STATUS_ENTRY(name, value, msg) {"DLRT_" #name, value, msg},
    DLRT_STATUS_MAP(STATUS_ENTRY)
#undef STATUS_ENTRY
};
enum { STATUS_COUNT = sizeof status_table / sizeof status_table[0] };

/* Points in each part, so that plan() is exact. */
enum {
  POINTS_PER_CODE = 2,
  POINTS_TABLE_SHAPE = 1,
  POINTS_UNKNOWN = 6,
  POINTS_THREAD_LOCAL = 11,
};

static void test_every_code(void) {
  for (int i = 0; i < STATUS_COUNT; i++) {
    const status_entry *e = &status_table[i];
    is_str(dlrt_strerror(e->value), e->message, "dlrt_strerror(%s)", e->name);
    is_str(dlrt_err_name(e->value), e->name, "dlrt_err_name(%d)", e->value);
  }
}

/* OK is 0, every error negative, no value used twice: callers test `< 0`. */
static int lowest_code(void) {
  int lowest = 0, well_formed = 1;
  for (int i = 0; i < STATUS_COUNT; i++) {
    const status_entry *e = &status_table[i];
    if (e->value < lowest)
      lowest = e->value;
    if ((e->value == 0) != (strcmp(e->name, "DLRT_OK") == 0) || e->value > 0)
      well_formed = 0;
    for (int j = 0; j < i; j++)
      if (status_table[j].value == e->value) {
        diag("%s and %s share the value %d", status_table[j].name, e->name, e->value);
        well_formed = 0;
      }
  }
  ok(well_formed, "DLRT_OK is 0 and the %d error codes are distinct and negative",
     STATUS_COUNT - 1);
  return lowest;
}

static void test_unknown_codes(int lowest) {
  const int unknown[] = {12345, lowest - 1, 1};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    is_str(dlrt_strerror(unknown[i]), "unknown status", "dlrt_strerror(%d)",
           unknown[i]);
    is_str(dlrt_err_name(unknown[i]), "DLRT_UNKNOWN", "dlrt_err_name(%d)", unknown[i]);
  }
}

/* What a second thread saw, handed back to the main thread, which alone
 * prints TAP points. */
typedef struct {
  char error_at_start[256];
  int status;
  char error_after_failure[256];
  char error_after_clear[256];
} thread_report;

static void copy_text(char *dst, size_t size, const char *src) {
  snprintf(dst, size, "%s", src ? src : "(NULL)");
}

static void *fail_on_other_thread(void *arg) {
  thread_report *report = arg;
  copy_text(report->error_at_start, sizeof report->error_at_start, dlrt_last_error());
  dlrt_device_t *dev = NULL;
  report->status = dlrt_device_open("cpu:x", &dev);
  copy_text(report->error_after_failure, sizeof report->error_after_failure,
            dlrt_last_error());
  dlrt_clear_error();
  copy_text(report->error_after_clear, sizeof report->error_after_clear,
            dlrt_last_error());
  return NULL;
}

static void test_thread_local_error(void) {
  dlrt_clear_error();
  is_str(dlrt_last_error(), "", "dlrt_last_error() is \"\" after dlrt_clear_error()");

  dlrt_device_t *dev = NULL;
  is_status(dlrt_device_open("gpu", &dev), DLRT_ERR_BAD_SPEC,
            "dlrt_device_open(\"gpu\") fails, setting this thread's error");
  char main_error[256];
  copy_text(main_error, sizeof main_error, dlrt_last_error());
  diag("main thread: %s", main_error);
  ok(main_error[0] != '\0', "the failure left a detail message");
  ok(strstr(main_error, "gpu") != NULL, "the message names the spec \"gpu\"");

  thread_report report;
  memset(&report, 0, sizeof report);
  pthread_t thread;
  if (pthread_create(&thread, NULL, fail_on_other_thread, &report) != 0)
    bail_out("pthread_create failed");
  pthread_join(thread, NULL);
  diag("other thread: %s", report.error_after_failure);

  is_str(report.error_at_start, "",
         "a new thread does not see the main thread's error");
  is_status(report.status, DLRT_ERR_BAD_SPEC,
            "dlrt_device_open(\"cpu:x\") on the other thread");
  ok(strstr(report.error_after_failure, "cpu:x") != NULL,
     "the other thread sees its own message, naming \"cpu:x\"");
  is_str(report.error_after_clear, "",
         "dlrt_clear_error() on the other thread clears its message");
  is_str(dlrt_last_error(), main_error,
         "the main thread's message survived the other thread's failure and "
         "clear");

  dlrt_clear_error();
  is_str(dlrt_last_error(), "", "dlrt_clear_error() on the main thread");
  is_status(dlrt_device_open("cpu", NULL), DLRT_ERR_INVALID_ARG,
            "dlrt_device_open with a NULL out pointer");
}

int main(void) {
  plan(STATUS_COUNT * POINTS_PER_CODE + POINTS_TABLE_SHAPE + POINTS_UNKNOWN +
       POINTS_THREAD_LOCAL);
  test_every_code();
  test_unknown_codes(lowest_code());
  test_thread_local_error();
  dlrt_shutdown();
  return done_testing();
}
