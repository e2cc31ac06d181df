/* cpu_native.h — native CPU versions of the hot kernels of kernels/
 * (internal to the CPU backend).
 *
 * The portable dialect's group kernels emulate DLRT_WG work-items per
 * work-group in loops, with zeroed local arrays and tree reductions: right
 * for a GPU, slow on a CPU. For the kernels a transformer spends its time in
 * (layer norm and its gradients, GELU and the other activations, column
 * sums, broadcast ops, softmax + cross-entropy, fused attention) this
 * backend runs code written for a CPU instead: rows at a time, 16-lane
 * vectors (GCC's vector extensions), polynomial exp and tanh, attention in
 * register-blocked tiles with per-thread scratch. cpu_kernels.c launches a
 * native kernel in place of the dialect's for the same kernel-table entry,
 * with the same arguments and the same contract (kernels/kernel_table.h and
 * the kernel's header say what it computes).
 *
 * The kernels are compiled once per instruction set (cpu_native_generic.c,
 * cpu_native_avx2.c, cpu_native_avx512.c, all from the same source); the
 * best one the CPU runs is chosen on first use, or the one DLRT_CPU_ISA
 * names (generic, avx2, avx512; one the CPU lacks falls back to the best;
 * "dialect" runs none of them, the dialect's kernels instead).
 * Every lane computes the same operations in the same order whatever the
 * register width, sums along rows keep 16 lanes on every target, and the
 * FMAs the kernels ask for (vf_fma) are FMAs on both the avx2 and the avx512
 * build: those two give the same bits. The generic build has no FMA (a
 * multiply and an add) and differs from them by rounding.
 *
 * Determinism: each output element is computed by one task, whose order of
 * operations depends on the shape only; tasks are split over threads in
 * contiguous runs. So results do not depend on the thread count, and no
 * kernel uses atomics. */
#ifndef DLRT_BACKENDS_CPU_NATIVE_H
#define DLRT_BACKENDS_CPU_NATIVE_H

#include <stdint.h>

#include "device/backend.h"

/* Runs a launch of the kernel natively on the stream's thread (it may
 * spread it over the pool: cpu_native_parallel); `a` are the launch's
 * arguments in the kernel's signature order. DLRT_OK or a negative status. */
typedef int (*cpu_native_fn)(const dlrt__arg *a);

typedef struct {
  const char *name; /* "generic", "avx2", "avx512" */
  cpu_native_fn fn[DLRT__K_COUNT]; /* NULL: the dialect's kernel runs */
} cpu_native_isa;

extern const cpu_native_isa cpu_native_generic;
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define CPU_NATIVE_X86 1
extern const cpu_native_isa cpu_native_avx2, cpu_native_avx512;
#else
#define CPU_NATIVE_X86 0
#endif

/* The instruction set's kernels in use (chosen on the first call). */
const cpu_native_isa *cpu_native_selected(void);
/* The kernels of instruction set `name` if this CPU runs them, else NULL
 * ("dialect": a table without kernels). */
const cpu_native_isa *cpu_native_by_name(const char *name);

/* A contiguous run [lo, hi) of a kernel's tasks, run as part `part` of the
 * launch's parts (which picks the part's scratch). */
typedef void (*cpu_native_part_fn)(void *ctx, int64_t lo, int64_t hi, int part);

/* The number of parts cpu_native_parallel cuts `tasks` tasks of about
 * `cost` elements of work each into: one per pool thread, fewer when the
 * work is too small to share (at least 1 for tasks >= 1). */
int cpu_native_parts(int64_t tasks, int64_t cost);
/* Calls fn for each of `parts` contiguous runs of [0, tasks) (parts from
 * cpu_native_parts, which sized the caller's scratch), over the pool's
 * threads; returns when all are done. */
void cpu_native_parallel(int64_t tasks, int parts, cpu_native_part_fn fn, void *ctx);

#endif
