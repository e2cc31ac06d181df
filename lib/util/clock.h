/* clock.h — the library's one clock for durations: CLOCK_MONOTONIC (never
 * set back, unlike the wall clock), from an arbitrary start, in the unit
 * each caller counts in. */
#ifndef DLRT_UTIL_CLOCK_H
#define DLRT_UTIL_CLOCK_H

double dlrt__now_s(void);
double dlrt__now_ms(void);
double dlrt__now_us(void);

#endif
