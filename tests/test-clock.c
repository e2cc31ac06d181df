/*
 * test-clock.c — dlrt__sleep_until_s (lib/util/clock.c, internal), the
 * wait behind every copy the link model times on a stream:
 *  - it never returns before its time, and at once for a time passed;
 *  - it ends on time: the median of 101 waits of 2 us, 20 us and 200 us
 *    each ends under 5 us late (a plain timed sleep: 12-23 us late on the
 *    development machine, which made each small modelled copy cost some 20
 *    times its model). A median, so a loaded machine's descheduling of a
 *    few waits cannot make the point fail.
 * Points: done_testing.
 */
#include <stdio.h>
#include <stdlib.h>

#include "tap.h"
#include "util/clock.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

enum { WAITS = 101 };

int main(void) {
  unsetenv("DLRT_SLEEP_SPIN");
  double t0 = dlrt__now_s();
  dlrt__sleep_until_s(t0 - 1.0);
  ok(dlrt__now_s() - t0 < 0.5, "a time passed returns at once");
  const double waits_us[] = {2, 20, 200};
  for (int w = 0; w < 3; w++) {
    double late[WAITS], earliest = 1;
    for (int i = 0; i < WAITS; i++) {
      double when = dlrt__now_s() + waits_us[w] * 1e-6;
      dlrt__sleep_until_s(when);
      late[i] = (dlrt__now_s() - when) * 1e6;
      if (late[i] < earliest) earliest = late[i];
    }
    qsort(late, WAITS, sizeof *late, cmp_double);
    ok(earliest >= 0, "waits of %g us never end early (the earliest %.2f us after)",
       waits_us[w], earliest);
    ok(late[WAITS / 2] < 5.0, "waits of %g us end %.2f us late (the median of %d; 90%%: %.2f)",
       waits_us[w], late[WAITS / 2], WAITS, late[WAITS * 9 / 10]);
  }
  return done_testing();
}
