/*
 * dlrt.h — the public API of dlrt, a runtime for training neural networks on
 * heterogeneous machines (CUDA, OpenCL, CPU).
 *
 * Conventions
 *  - Every call that can fail returns int: DLRT_OK (0) or a negative dlrt_status.
 *    dlrt_strerror() names the code; dlrt_last_error() gives a thread-local detail
 *    message for the last failure on this thread (what went wrong and how to fix it).
 *  - No call aborts or exits the process.
 *  - Devices are owned by the library and live until dlrt_shutdown(); buffers,
 *    streams and events are owned by the caller and released with their _free /
 *    _destroy calls.
 *  - Sizes and offsets are in bytes unless a name says otherwise. Matrices are
 *    row-major.
 *  - Thread safety: every call may be made from any thread. One stream should be
 *    fed by one thread at a time (as with CUDA streams).
 */
#ifndef DLRT_H
#define DLRT_H

/* The API in six parts, each including the ones it builds on. */
#include "dlrt/core.h"  /* devices, streams, memory, copies, compute */
#include "dlrt/data.h"  /* data sets, the pipeline, safetensors */
#include "dlrt/graph.h" /* static graphs and their executors */
#include "dlrt/train.h" /* models, training */
#include "dlrt/parallel.h" /* data, pipeline and tensor parallelism, ZeRO */
#include "dlrt/plan.h" /* memory planning, --simulate, splits */

#endif /* DLRT_H */
