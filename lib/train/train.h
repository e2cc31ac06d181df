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

#endif
