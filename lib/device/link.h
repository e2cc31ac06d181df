/* link.h — the host link model on a device (internal; the public side is
 * dlrt_link_* in core.h, the arithmetic link_model.h).
 *
 * A modelled copy is queued as three commands on its stream: a notice, the
 * backend's own copy, and a gate. When the stream reaches the notice, the
 * copy has waited for the stream's earlier work: its direction's engine
 * takes it from then (or from when the engine is free) for bytes / rate +
 * latency, and the link's timer thread opens the gate at that end. The
 * stream's later work waits at the gate; other streams, and the host that
 * queued the copy, go on. */
#ifndef DLRT_DEVICE_LINK_H
#define DLRT_DEVICE_LINK_H

#include <stdint.h>

#include "device/device.h"
#include "device/link_model.h"

/* Before a copy of `bytes` between host memory and `s`'s device is queued on
 * s, in direction `dir` (DLRT__LINK_H2D or _D2H): queues the notice. *gate
 * is NULL when the device has no model (nothing queued), else to be passed
 * to dlrt__link_end once the copy is queued, whether that failed or not. */
int dlrt__link_begin(dlrt_stream_t *s, int dir, uint64_t bytes, void **gate);
/* Queues the gate after the copy; returns copy_rc when that failed, else the
 * gate's status. */
int dlrt__link_end(dlrt_stream_t *s, void *gate, int copy_rc);

/* A copy between two devices, which the host waits for: takes `bytes` on
 * src's device-to-host engine and dst's host-to-device engine at once (the
 * two sides pipeline), and returns when the later of the two ends, on the
 * host clock (dlrt__now_s), or 0 when neither device has a model. */
double dlrt__link_between(dlrt_device_t *src, dlrt_device_t *dst, uint64_t bytes);
/* Sleeps until `end` (dlrt__now_s's clock); at once when end is 0 or past. */
void dlrt__link_sleep_until(double end);

/* DLRT_LINK (checked at dlrt_init, link_model.h), applied to each device as
 * it opens: its default stream made, the device not yet published (a
 * preset's measurement runs on that stream). */
int dlrt__link_open_env(dlrt_device_t *dev);
/* Frees the device's model at close (its streams are idle); the timer
 * thread stops with the last model. */
void dlrt__link_close(dlrt_device_t *dev);

#endif
