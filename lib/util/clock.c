/* clock.c — CLOCK_MONOTONIC in seconds, milliseconds and microseconds. */
#include "config.h"

#include <time.h>

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
