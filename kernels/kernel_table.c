/* kernel_table.c — the kernel table of kernel_table.h as data: each kernel's
 * name and the kinds of its arguments, indexed by dlrt__kernel_id. */
#include "kernel_table.h"

const dlrt__kernel_info dlrt__kernel_table[DLRT__K_COUNT] = {
#define DLRT__INFO(name, ...)                                                             \
  [DLRT__K_##name] = {"dlrt_k_" #name, DLRT__KNARGS(__VA_ARGS__),                          \
                      {DLRT__KMAP(DLRT__KIND_AT, __VA_ARGS__)}},
    DLRT_KERNEL_TABLE(DLRT__INFO)
#undef DLRT__INFO
};

/* The id arithmetic of lib/device/compute.c and lib/exec/exec_ops.c. */
_Static_assert(DLRT__K_fill_bf16 - DLRT__K_fill_f16 == DLRT__K_fill_f16 - DLRT__K_fill_f32,
               "DLRT__KERNELS_OF_TYPE families are not evenly spaced");
_Static_assert(DLRT__K_cast_f16_f32 == DLRT__K_cast_f32_f32 + 1 &&
               DLRT__K_cast_bf16_f32 == DLRT__K_cast_f32_f32 + 2,
               "cast kernels are not in f32, f16, bf16 order");
_Static_assert(DLRT__K_sum_parts_f16 == DLRT__K_sum_parts_f32 + 1 &&
               DLRT__K_sum_parts_bf16 == DLRT__K_sum_parts_f32 + 2,
               "DLRT__TYPED kernels are not in dlrt_dtype order");
