/* cpu_native_generic.c — the native kernels for any CPU (the compiler's
 * baseline instruction set: SSE2 on x86-64), see cpu_native.h. */
#include "config.h"

#define CPU_NATIVE_TABLE cpu_native_generic
#define CPU_NATIVE_NAME "generic"
#include "cpu_native_isa.h"
