/* param_ahead.c — how far ahead streamed parameters are fetched, chosen
 * from a training step's measured node times and the device's link model
 * (dlrt_exec_offload_params with ahead 0; param_stream.c measures and
 * calls this).
 *
 * A look-ahead of A queues the fetches position k needs when position k - A
 * begins; the copy engine takes them one after the other; node k starts
 * when node k - 1 has ended and its fetches are in. Replaying a step on
 * that model for each A gives its time; the smallest A within 1% of the
 * best is chosen (each more node of look-ahead holds more parameters on
 * the device), among those whose parameters in reach fit the cap. */
#include "config.h"

#include <stdlib.h>

#include "exec/param_stream.h"
#include "util/status.h"

/* The step's time on the model with look-ahead `ahead` (fetch_ms: the
 * copies position k needs, ms; node_ms: its kernels'). */
static double replay(int n, const double *node_ms, const double *fetch_ms, int ahead,
                     double *start) {
  double copy_free = 0, end = 0;
  for (int k = 0; k < n; k++) {
    double issued = k - ahead >= 0 ? start[k - ahead] : 0;
    double fetched = fetch_ms[k] > 0 ? (copy_free > issued ? copy_free : issued) + fetch_ms[k]
                                     : 0;
    if (fetch_ms[k] > 0) copy_free = fetched;
    start[k] = end > fetched ? end : fetched;
    end = start[k] + node_ms[k];
  }
  return end;
}

int dlrt__choose_ahead(int n, const double *node_ms, const double *fetch_ms,
                       const uint64_t *reach_bytes, uint64_t cap, int max_ahead,
                       double *predicted_ms) {
  double *start = malloc(sizeof(double) * (size_t)(n ? n : 1));
  double *step = malloc(sizeof(double) * (size_t)(max_ahead + 1));
  if (!start || !step) {
    free(start), free(step);
    return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  }
  double best = -1;
  int last = 1;
  for (int a = 1; a <= max_ahead; a++) {
    if (a > 1 && cap && reach_bytes[a - 1] > cap) break; /* more would not fit */
    step[a] = replay(n, node_ms, fetch_ms + (size_t)(a - 1) * (size_t)n, a, start);
    if (best < 0 || step[a] < best) best = step[a];
    last = a;
  }
  int chosen = last;
  for (int a = last; a >= 1; a--)
    if (step[a] <= best * 1.01) chosen = a;
  if (predicted_ms) *predicted_ms = step[chosen];
  free(start), free(step);
  return chosen;
}
