/* cpu_native_isa.h — the native kernels and their table, compiled once per
 * instruction set: cpu_native_generic.c, cpu_native_avx2.c and
 * cpu_native_avx512.c set their target (a pragma, so that every function
 * below is built for it), name the table (CPU_NATIVE_TABLE, CPU_NATIVE_NAME)
 * and include this file. Everything here is static but the table.
 *
 * Nothing is contracted into an FMA behind the code's back (ISO C's
 * default, kept explicit here): where the kernels want one they say so
 * (vf_fma), so the avx2 and avx512 builds compute the same operations and
 * round alike whatever the compiler's flags. */
#pragma GCC optimize("fp-contract=off")

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_native.h"
#include "cpu_pool.h"
#include "cpu_vec.h"
#include "nn.h" /* the exact GELU's kernels (kind 2 runs them), GELU's constants, dialect.h */
#include "cpu_vec16.h"
#include "util/status.h"

/* Argument k of a launch as an array of T. */
#define NA_BUF(k, T) ((T *)(void *)((char *)a[k].mem.host + a[k].offset))

#include "cpu_native_norm.h"
#include "cpu_native_nn.h"
#include "cpu_native_attention.h"
#include "cpu_native_decode.h"
#include "cpu_native_optim.h"

const cpu_native_isa CPU_NATIVE_TABLE = {
    .name = CPU_NATIVE_NAME,
    .fn = {
#define NATIVE_NORM(name, SUF) [DLRT__K_##name##_##SUF] = native_##name##_##SUF,
#define NATIVE_NORMS(SUF)                                                                   \
  NATIVE_NORM(norm_rows, SUF) NATIVE_NORM(norm_rows_grad, SUF) NATIVE_NORM(norm_affine_grad, SUF)
        NATIVE_NORMS(f32) NATIVE_NORMS(f16) NATIVE_NORMS(bf16) NATIVE_NORMS(f16_f32)
        NATIVE_NORMS(bf16_f32)
#define NATIVE_EW(SUF)                                                                      \
  NATIVE_NORM(activation, SUF) NATIVE_NORM(activation_grad, SUF) NATIVE_NORM(bcast, SUF)    \
  NATIVE_NORM(bcast_grad_b, SUF) NATIVE_NORM(sum_cols, SUF)
        NATIVE_EW(f32) NATIVE_EW(f16) NATIVE_EW(bf16)
#undef NATIVE_EW
#undef NATIVE_NORMS
#undef NATIVE_NORM
        [DLRT__K_softmax_xent] = native_softmax_xent,
        [DLRT__K_softmax] = native_softmax,
        [DLRT__K_softmax_grad] = native_softmax_grad,
        [DLRT__K_embedding_grad] = native_embedding_grad,
        [DLRT__K_embedding_grad_acc] = native_embedding_grad_acc,
        [DLRT__K_adam_update] = native_adam_update,
        [DLRT__K_attention_f32] = native_attention_f32,
        [DLRT__K_attention_f16] = native_attention_f16,
        [DLRT__K_attention_bf16] = native_attention_bf16,
        [DLRT__K_attention_grad_q_f32] = native_attention_grad_q_f32,
        [DLRT__K_attention_grad_q_f16] = native_attention_grad_q_f16,
        [DLRT__K_attention_grad_q_bf16] = native_attention_grad_q_bf16,
        [DLRT__K_attention_grad_kv_f32] = native_attention_grad_kv_f32,
        [DLRT__K_attention_grad_kv_f16] = native_attention_grad_kv_f16,
        [DLRT__K_attention_grad_kv_bf16] = native_attention_grad_kv_bf16,
        [DLRT__K_attention_decode] = native_attention_decode,
    }};
