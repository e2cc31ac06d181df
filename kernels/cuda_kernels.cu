// cuda_kernels.cu — the kernels of kernels/*.h compiled by nvcc, and the table
// the CUDA backend launches them from (indexed by dlrt__kernel_id), generated
// from kernels/kernel_table.h. Each entry is first held to its kernel's
// signature: the function type the entry describes must be the kernel's
// exactly, else nvcc stops here naming the kernel.
#include <type_traits>

#include "elementwise.h"
#include "kernel_table.h"
#include "attention.h"
#include "conv.h"
#include "nn.h"
#include "norm.h"
#include "optim.h"
#include "reduce.h"
#include "shape.h"
#include "transpose.h"
#include "typed.h"

#define DLRT__CUDA_CHECK(name, ...)                                                        \
  static_assert(std::is_same<decltype(&dlrt_k_##name),                                    \
                             void (*)(DLRT__KERNEL_PARAMS(__VA_ARGS__))>::value,          \
                "kernels/kernel_table.h: the entry of dlrt_k_" #name                      \
                " does not match the kernel's parameters");
DLRT_KERNEL_TABLE(DLRT__CUDA_CHECK)
#undef DLRT__CUDA_CHECK

extern "C" {
extern const void *const dlrt__cuda_kernels[DLRT__K_COUNT];
const void *const dlrt__cuda_kernels[DLRT__K_COUNT] = {
#define DLRT__CUDA_ENTRY(name, ...) (const void *)dlrt_k_##name,
    DLRT_KERNEL_TABLE(DLRT__CUDA_ENTRY)
#undef DLRT__CUDA_ENTRY
};
}
