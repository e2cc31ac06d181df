/* kernel_list.h — every kernel of the kernel headers in kernels/, as an X-macro list, so each
 * backend builds its table (C functions, OpenCL kernel names, CUDA entry
 * points) from one place. X(name) names the kernel dlrt_k_<name>. */
#ifndef DLRT_KERNELS_KERNEL_LIST_H
#define DLRT_KERNELS_KERNEL_LIST_H

#define DLRT__KERNELS_OF_TYPE(X, T)                                            \
  X(fill_##T) X(scale_##T) X(axpy_##T) X(add_##T) X(mul_##T) X(relu_##T)     \
  X(reduce_sum_##T) X(reduce_max_##T) X(reduce_final_sum_##T)                \
  X(reduce_final_max_##T)                                                     \
  X(cast_f32_##T) X(cast_f16_##T) X(cast_bf16_##T)

/* The kernels of typed.h, one per storage type in dlrt_dtype order (F32,
 * F16, BF16): the id of name's kernel for dtype d is DLRT__K_<name>_f32 + d. */
#define DLRT__TYPED(X, name) X(name##_f32) X(name##_f16) X(name##_bf16)

#define DLRT_KERNEL_LIST(X)                                                    \
  DLRT__KERNELS_OF_TYPE(X, f32)                                                \
  DLRT__KERNELS_OF_TYPE(X, f16)                                                \
  DLRT__KERNELS_OF_TYPE(X, bf16)                                               \
  X(transpose_b32) X(transpose_b16) X(gather_b32) X(gather_b16)               \
  DLRT__TYPED(X, bias_rows) DLRT__TYPED(X, bias_channels)                      \
  DLRT__TYPED(X, relu_grad) DLRT__TYPED(X, sum_cols)                           \
  DLRT__TYPED(X, sum_channels) DLRT__TYPED(X, im2col) DLRT__TYPED(X, col2im)   \
  DLRT__TYPED(X, swap01) DLRT__TYPED(X, maxpool) DLRT__TYPED(X, maxpool_grad)  \
  DLRT__TYPED(X, maxpool_scatter) DLRT__TYPED(X, sum_planes)                   \
  DLRT__TYPED(X, sum_parts)                                                    \
  X(softmax_xent) X(sgd_update) X(adam_update) X(broadcast_scalar) X(sub)      \
  X(div) X(div_grad_z) X(activation)                                           \
  X(activation_grad) X(softmax) X(softmax_grad) X(avgpool) X(avgpool_grad)     \
  X(dropout) X(norm_rows) X(norm_rows_grad) X(norm_affine_grad)              \
  X(norm_rows_eval) X(bn_running) X(axis_copy) X(axis_sum) X(axis_expand)     \
  X(bcast) X(bcast_grad_b) X(embedding) X(embedding_grad)

typedef enum {
#define DLRT__KERNEL_ID(name) DLRT__K_##name,
  DLRT_KERNEL_LIST(DLRT__KERNEL_ID)
#undef DLRT__KERNEL_ID
  DLRT__K_COUNT
} dlrt__kernel_id;

#endif
