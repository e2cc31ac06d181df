/* cpu_native_avx2.c — the native kernels for x86-64 with AVX2 and FMA
 * (chosen at run time where the CPU has them), see cpu_native.h. */
#include "config.h"

#include "cpu_native.h"

#if CPU_NATIVE_X86
#pragma GCC target("avx2,fma,f16c")
#define CPU_NATIVE_TABLE cpu_native_avx2
#define CPU_NATIVE_NAME "avx2"
#include "cpu_native_isa.h"
#endif
