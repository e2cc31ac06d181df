/* train.h — what the trainer and the memory planner share (internal). */
#ifndef DLRT_TRAIN_TRAIN_H
#define DLRT_TRAIN_TRAIN_H

#include "dlrt.h"

/* Builds a classifier's training graph into g: inputs "images" (batch x
 * channels x height x width) and "labels", the model, a kept logits tensor,
 * the cross-entropy loss, the backward pass and the optimizer's updates. */
int dlrt__build_classifier(dlrt_graph_t *g, const dlrt_trainer_config *cfg, int64_t channels,
                           int64_t height, int64_t width, int64_t classes,
                           dlrt_tensor_t **images, dlrt_tensor_t **labels, dlrt_tensor_t **logits,
                           dlrt_tensor_t **loss);

/* Device bytes of one loader for a classifier's batches: per prefetch slot
 * (at least one) a batch of f32 images and of i32 labels, each in the
 * allocator's 512-byte granules. */
static inline uint64_t dlrt__loader_device_bytes(int64_t batch, int64_t pixels, int prefetch) {
  uint64_t slots = (uint64_t)(prefetch > 0 ? prefetch : 1);
  uint64_t images = ((uint64_t)(batch * pixels) * 4 + 511) / 512 * 512;
  uint64_t labels = ((uint64_t)batch * 4 + 511) / 512 * 512;
  return slots * (images + labels);
}

#endif
