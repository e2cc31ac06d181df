/* clock.h — the library's one clock for durations: CLOCK_MONOTONIC (never
 * set back, unlike the wall clock), from an arbitrary start, in the unit
 * each caller counts in. */
#ifndef DLRT_UTIL_CLOCK_H
#define DLRT_UTIL_CLOCK_H

#include <time.h>

double dlrt__now_s(void);
double dlrt__now_ms(void);
double dlrt__now_us(void);

/* A time in dlrt__now_s's seconds as a timespec (for CLOCK_MONOTONIC waits). */
struct timespec dlrt__timespec_at(double s);
/* Sleeps until `when` (dlrt__now_s's seconds); at once when it has passed.
 * The first call on a thread asks Linux for 1 us of timer slack instead of
 * the 50 us an ordinary thread's timers may end late by; the last 60 us
 * are waited for on the clock (yielding), since a timed sleep still ends
 * 10-30 us late (clock.c). */
void dlrt__sleep_until_s(double when);

#endif
