// cuda_kernels.cu — the kernels of kernels/*.h compiled by nvcc, and the table
// the CUDA backend launches them from (indexed by dlrt__kernel_id).
#include "elementwise.h"
#include "kernel_list.h"
#include "conv.h"
#include "nn.h"
#include "norm.h"
#include "optim.h"
#include "reduce.h"
#include "shape.h"
#include "transpose.h"
#include "typed.h"

extern "C" {
extern const void *const dlrt__cuda_kernels[DLRT__K_COUNT];
const void *const dlrt__cuda_kernels[DLRT__K_COUNT] = {
#define DLRT__CUDA_ENTRY(name) (const void *)dlrt_k_##name,
    DLRT_KERNEL_LIST(DLRT__CUDA_ENTRY)
#undef DLRT__CUDA_ENTRY
};
}
