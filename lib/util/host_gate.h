/* host_gate.h — a gate that a host thread waits at until another thread
 * opens it (internal): what the CPU and CUDA backends hold a stream with for
 * the link model (backend.h's gate_create, stream_wait_gate, gate_open).
 *
 * Made with two references, the waiter's and the opener's, so that the two
 * may come in either order and neither frees the gate under the other: the
 * wait gives its reference back when it has passed (dlrt__host_gate_wait) or
 * could not be queued (dlrt__host_gate_drop), the opener when it opens. */
#ifndef DLRT_UTIL_HOST_GATE_H
#define DLRT_UTIL_HOST_GATE_H

typedef struct dlrt__host_gate dlrt__host_gate;

/* A shut gate; DLRT_ERR_OOM. */
int dlrt__host_gate_create(dlrt__host_gate **out);
/* Blocks until the gate is open, then gives the waiter's reference back. */
void dlrt__host_gate_wait(dlrt__host_gate *g);
/* Gives the waiter's reference back without waiting (its wait never queued). */
void dlrt__host_gate_drop(dlrt__host_gate *g);
/* Opens the gate and gives the opener's reference back. */
void dlrt__host_gate_open(dlrt__host_gate *g);
/* The same for a gate that opens at `when` (seconds on dlrt__now_s's clock):
 * the waiter sleeps until then itself, so that no other thread has to wake
 * at the time and then wake it (each wake-up costs tens of microseconds on
 * a loaded machine). */
void dlrt__host_gate_open_at(dlrt__host_gate *g, double when);

#endif
