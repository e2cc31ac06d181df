/* clock.c — CLOCK_MONOTONIC in seconds, milliseconds and microseconds. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
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

/* A timed sleep ends late: 13-28 us on average on the development machine
 * (a 2-core VM, timer slack 1 us; one 1 us sleep in 200 took 2.5 ms),
 * whatever its length: the kernel's timer and the wake-up. A modelled copy
 * of 11 KiB at 16 GB/s lasts 0.7 us, so each copy the link model timed on
 * a stream cost some 20 times its model (the cnn's slices at 25% of its
 * peak: 141 copies, 1.7-3.2 ms a 31 ms step). The sleep ends SPIN_S early and
 * the rest is waited for on the clock, at most SPIN_S of a core: 0.1 us
 * late (the median, tests/test-clock). Not yielding: under a load of 7 a
 * yield in that loop gave the core away for a time slice, one wait in ten
 * ending 1.6 ms late. DLRT_SLEEP_SPIN=0 sleeps whole, as before, for
 * comparison. */
#define SPIN_S 60e-6

static int spin_wanted(void) {
  static int wanted = -1; /* -1: not read yet; the environment's answer is the same each time */
  int w = __atomic_load_n(&wanted, __ATOMIC_RELAXED);
  if (w < 0) {
    const char *env = getenv("DLRT_SLEEP_SPIN");
    w = !(env && strcmp(env, "0") == 0);
    __atomic_store_n(&wanted, w, __ATOMIC_RELAXED);
  }
  return w;
}

void dlrt__sleep_until_s(double when) {
  double left = when - dlrt__now_s();
  if (left <= 0) return;
  int spin = spin_wanted();
  if (!spin || left > SPIN_S) {
#ifdef PR_SET_TIMERSLACK
    static _Thread_local int slack_set;
    if (!slack_set) {
      prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
      slack_set = 1;
    }
#endif
    struct timespec at = dlrt__timespec_at(spin ? when - SPIN_S : when);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) == EINTR) {
    }
  }
  while (dlrt__now_s() < when) {
  }
}
