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

#define DLRT_KERNEL_LIST(X)                                                    \
  DLRT__KERNELS_OF_TYPE(X, f32)                                                \
  DLRT__KERNELS_OF_TYPE(X, f16)                                                \
  DLRT__KERNELS_OF_TYPE(X, bf16)                                               \
  X(transpose_b32) X(transpose_b16)                                            \
  X(bias_rows) X(bias_channels) X(relu_grad) X(sum_cols) X(sum_channels)       \
  X(softmax_xent) X(im2col) X(col2im) X(maxpool) X(maxpool_grad)               \
  X(sgd_update) X(adam_update) X(broadcast_scalar) X(swap01)    \
  X(maxpool_scatter) X(sub) X(div) X(div_grad_z) X(activation)                \
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
