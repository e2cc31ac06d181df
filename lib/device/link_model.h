/* link_model.h — the arithmetic of the host link model (internal): how long
 * a copy takes, and a copy engine's timeline. Pure: no device, no clock; the
 * callers (link.c, and tests/test-link-model.c) pass the times in. */
#ifndef DLRT_DEVICE_LINK_MODEL_H
#define DLRT_DEVICE_LINK_MODEL_H

#include <stdint.h>

/* The two engines of a device: host to device, device to host. */
enum { DLRT__LINK_H2D = 0, DLRT__LINK_D2H = 1, DLRT__LINK_DIRECTIONS = 2 };

/* One direction's copy engine: copies run one at a time, in the order they
 * reach it. Times are seconds on one clock (link.c: dlrt__now_s). */
typedef struct {
  double free_at;   /* when the last copy taken ends */
  uint64_t copies, bytes;
  double busy_s;    /* the sum of the copies' durations */
  double queued_s;  /* the sum of the times they waited for the engine */
} dlrt__link_engine;

/* Seconds a copy of `bytes` takes at `bytes_per_s` (> 0) plus `latency_s`. */
double dlrt__link_seconds(double bytes_per_s, double latency_s, uint64_t bytes);

/* Seconds that `copies` copies of `bytes` in all add to a measured time
 * that already holds them made at `held_bytes_per_s` (> 0) with the
 * stream's hand-offs: a chunked block's slices, profiled with the link off
 * (on a device that shares host memory, a memcpy each). On the link each
 * copy ends at max(its memcpy, the modelled copy) (link.c: its gate opens
 * at the modelled end), so what it adds is the modelled time past the held
 * one, none where the memcpy took longer, and `gate_s` a copy for the
 * link's own notice and gate. bytes_per_s 0: no link, only the gates. */
double dlrt__link_seconds_past(double bytes_per_s, double latency_s, double held_bytes_per_s,
                               double gate_s, uint64_t bytes, uint64_t copies);

/* A copy of `bytes` reaching the engine at `now` for `seconds`: it starts
 * when the engine is free (max(now, free_at)) and ends `seconds` later.
 * Returns the end, which becomes the engine's free_at; accounts for it. */
double dlrt__link_engine_take(dlrt__link_engine *e, double now, double seconds, uint64_t bytes);

/* DLRT_LINK, checked when dlrt_init starts the registry: DLRT_ERR_INVALID_ARG
 * for a spec dlrt_link_parse refuses (the devices take it as they open). */
int dlrt__link_check_env(void);

#endif
