/* clock.c — CLOCK_MONOTONIC in seconds, milliseconds and microseconds. */
#include "config.h"

#include <errno.h>
#include <time.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "util/clock.h"

static struct timespec now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts;
}

double dlrt__now_s(void) {
  struct timespec ts = now();
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double dlrt__now_ms(void) {
  struct timespec ts = now();
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

double dlrt__now_us(void) {
  struct timespec ts = now();
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

struct timespec dlrt__timespec_at(double s) {
  struct timespec ts;
  ts.tv_sec = (time_t)s;
  ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
  if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
  if (ts.tv_nsec < 0) ts.tv_nsec = 0;
  return ts;
}

void dlrt__sleep_until_s(double when) {
  if (when <= dlrt__now_s()) return;
#ifdef PR_SET_TIMERSLACK
  static _Thread_local int slack_set;
  if (!slack_set) {
    prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
    slack_set = 1;
  }
#endif
  struct timespec at = dlrt__timespec_at(when);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) == EINTR) {
  }
}
