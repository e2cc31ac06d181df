/* cpu_native_avx512.c — the native kernels for x86-64 with AVX-512 (F, VL,
 * BW, DQ; chosen at run time where the CPU has them), see cpu_native.h. */
#include "config.h"

#include "cpu_native.h"

#if CPU_NATIVE_X86
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,f16c")
#define CPU_NATIVE_TABLE cpu_native_avx512
#define CPU_NATIVE_NAME "avx512"
#include "cpu_native_isa.h"
#endif
