/* copy_costs.c — what this device's copies cost past the link model's
 * time, measured for the planner (choose.c): a waited copy's hand-offs,
 * and the link model's own commands a queued copy. Moved out of choose.c
 * whole. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "exec/choose.h"
#include "util/clock.h"
#include "util/status.h"

static int cmp_seconds(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* What a copy costs beyond its modelled time: the stream's hand-offs (a
 * modelled copy's notice, the backend's copy, the gate its timer opens),
 * which on a host-memory device are thread wake-ups, about 10-20 us each
 * on the development machine. The fastest of a few 512-byte copies to the
 * device on a stream of its own, each waited for, less their modelled
 * time (the fastest: at a load of 18 on 2 cores, the median of seven once
 * took 12 ms, a descheduling, not the copies); 0 when it cannot be
 * measured. */
#define OVERHEAD_COPIES 7
double dlrt__copy_overhead_s(dlrt_device_t *dev) {
  const size_t bytes = 512;
  dlrt_stream_t *s = NULL;
  dlrt_buffer_t *b = NULL;
  void *host = NULL;
  double t[OVERHEAD_COPIES + 1], model = dlrt_link_seconds(dev, bytes), out = 0;
  int rc = dlrt_stream_create(dev, &s);
  if (rc == DLRT_OK) rc = dlrt_buffer_alloc(dev, bytes, s, &b);
  if (rc == DLRT_OK) rc = dlrt_host_alloc(dev, bytes, &host);
  if (rc == DLRT_OK) memset(host, 0, bytes);
  for (int i = 0; i <= OVERHEAD_COPIES && rc == DLRT_OK; i++) { /* copy 0 warms up */
    double t0 = dlrt__now_s();
    if ((rc = dlrt_copy_h2d(b, 0, host, bytes, s)) == DLRT_OK) rc = dlrt_stream_synchronize(s);
    t[i] = dlrt__now_s() - t0 - model;
  }
  if (rc == DLRT_OK) {
    qsort(t + 1, OVERHEAD_COPIES, sizeof *t, cmp_seconds);
    out = t[1] > 0 ? t[1] : 0;
  }
  if (s) dlrt_stream_synchronize(s);
  dlrt_host_free(host);
  dlrt_buffer_free(b);
  dlrt_stream_destroy(s);
  dlrt_clear_error(); /* best effort: without it the copies are priced on the link alone */
  return out;
}

/* What the link model adds to a copy past its modelled time: its notice
 * and gate (link.c), two more commands on the stream, as a block's slices
 * meet them: GATE_RUN 512-byte copies queued back to back and waited for
 * once, with a link on (1TB/s: modelled shorter than any memcpy, so that
 * no gate waits) and then off, a copy's share of the difference; the
 * median of GATE_PAIRS such pairs (0 or more). Queued, as the slices are: a
 * copy waited for alone also pays the stream thread's wake-up for each
 * command (some 25 us a copy more at a load of 8 here, which a run of
 * queued copies does not pay). In pairs, so that both sides meet the same
 * load. Not the gate's wait waking late where a copy is modelled longer
 * than its memcpy: under 2 ms a copy at a load of 10 that took 0.4 to 2.4
 * ms a copy from one measure to the next. Leaves the link as `spec`; 0
 * when it cannot be measured. */
#define GATE_PAIRS 15
#define GATE_RUN 16
double dlrt__link_gate_s(dlrt_device_t *dev, const char *spec) {
  const size_t bytes = 512;
  dlrt_stream_t *s = NULL;
  dlrt_buffer_t *b = NULL;
  void *host = NULL;
  double d[GATE_PAIRS], out = 0;
  int rc = dlrt_stream_create(dev, &s);
  if (rc == DLRT_OK) rc = dlrt_buffer_alloc(dev, bytes, s, &b);
  if (rc == DLRT_OK) rc = dlrt_host_alloc(dev, bytes, &host);
  if (rc == DLRT_OK) memset(host, 0, bytes);
  int n = 0;
  for (int i = 0; i <= GATE_PAIRS && rc == DLRT_OK; i++) { /* pair 0 warms up */
    double t[2];
    for (int on = 1; on >= 0 && rc == DLRT_OK; on--) {
      if ((rc = dlrt_link_set(dev, on ? "1TB/s" : "none")) < 0) break;
      double model = dlrt_link_seconds(dev, bytes), t0 = dlrt__now_s();
      for (int c = 0; c < GATE_RUN && rc == DLRT_OK; c++) rc = dlrt_copy_h2d(b, 0, host, bytes, s);
      if (rc == DLRT_OK) rc = dlrt_stream_synchronize(s);
      t[on] = (dlrt__now_s() - t0) / GATE_RUN - model;
    }
    if (rc == DLRT_OK && i > 0) d[n++] = t[1] - t[0];
  }
  if (n == GATE_PAIRS) {
    qsort(d, (size_t)n, sizeof *d, cmp_seconds);
    out = d[n / 2] > 0 ? d[n / 2] : 0;
  }
  if (s) dlrt_stream_synchronize(s);
  dlrt_host_free(host);
  dlrt_buffer_free(b);
  dlrt_stream_destroy(s);
  dlrt_link_set(dev, spec);
  dlrt_clear_error(); /* best effort: without it the gates are priced at 0 */
  return out;
}
