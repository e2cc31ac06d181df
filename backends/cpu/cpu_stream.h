/* cpu_stream.h — in-order streams and events for host-executed backends: each
 * stream is a worker thread draining a FIFO of commands (internal). */
#ifndef DLRT_BACKENDS_CPU_STREAM_H
#define DLRT_BACKENDS_CPU_STREAM_H

#include <stddef.h>

typedef struct cpu_stream cpu_stream;
typedef struct cpu_event cpu_event;

/* A command: runs on the stream's thread; returns DLRT_OK or <0, and the
 * first failure is reported by the next synchronize. `payload` is a copy. */
typedef int (*cpu_command_fn)(void *payload);

int cpu_stream_create(cpu_stream **out);
void cpu_stream_destroy(cpu_stream *s);
int cpu_stream_synchronize(cpu_stream *s);
int cpu_stream_enqueue(cpu_stream *s, cpu_command_fn fn, const void *payload, size_t size);

int cpu_event_create(cpu_event **out);
void cpu_event_destroy(cpu_event *e);
int cpu_event_record(cpu_event *e, cpu_stream *s);
int cpu_stream_wait_event(cpu_stream *s, cpu_event *e);
int cpu_event_synchronize(cpu_event *e);
int cpu_event_query(cpu_event *e);
int cpu_event_elapsed_ms(cpu_event *start, cpu_event *end, float *ms);

#endif
