/* fuzz-model.c — dlrt_model_build on a model file (lib/train/model.c), then
 * what dltrain builds on it before a device is involved: the loss, the
 * backward pass and the optimizer's updates (lib/graph). No device: the
 * graph is only built, never run.
 *
 * Input: the model file itself, for 4 images of 1 x 28 x 28 and 10 classes
 * (Fashion-MNIST's shape).
 *
 * A model that builds must give logits of 4 x 10 and build the same in fp16
 * (the precision changes types, never whether a model is valid); a model
 * file that fails must say why, naming the file.
 *
 * fuzz-sources: */
#include <stdio.h>
#include <string.h>

#include "dlrt.h"
#include "fuzz.h"

enum { BATCH = 4, CLASSES = 10 };

/* 0, or the failed call's status with its message in `why`; *by_model says
 * whether dlrt_model_build was the call that failed. */
static int build(const char *path, dlrt_dtype precision, char *why, size_t why_size,
                 int *by_model) {
  dlrt_graph_t *g = NULL;
  int rc = dlrt_graph_create(&g);
  FUZZ_CHECK(rc == DLRT_OK, "dlrt_graph_create: %s", dlrt_last_error());
  const int64_t image_shape[4] = {BATCH, 1, 28, 28}, label_shape[1] = {BATCH};
  dlrt_tensor_t *logits = NULL;
  rc = dlrt_graph_set_precision(g, precision);
  dlrt_tensor_t *images = dlrt_input(g, "images", precision, 4, image_shape);
  dlrt_tensor_t *labels = dlrt_input(g, "labels", DLRT_I32, 1, label_shape);
  FUZZ_CHECK(rc == DLRT_OK && images && labels, "inputs: %s", dlrt_last_error());
  rc = dlrt_model_build(g, path, images, CLASSES, &logits);
  *by_model = rc < 0;
  if (rc == DLRT_OK) {
    int64_t shape[DLRT_MAX_DIMS];
    int nd = dlrt_tensor_shape(logits, shape);
    FUZZ_CHECK(nd == 2 && shape[0] == BATCH && shape[1] == CLASSES,
               "the logits have %d dimensions (%lld x %lld)", nd, (long long)shape[0],
               (long long)(nd > 1 ? shape[1] : 0));
    dlrt_tensor_t *loss = dlrt_cross_entropy(g, dlrt_keep(g, logits), labels, 0.1f);
    rc = dlrt_graph_status(g);
    if (rc == DLRT_OK) rc = dlrt_graph_backward(g, loss);
    dlrt_optimizer opt = dlrt_optimizer_defaults(DLRT_OPT_ADAM);
    if (rc == DLRT_OK) rc = dlrt_graph_optimize(g, &opt);
  }
  if (rc < 0) snprintf(why, why_size, "%s", dlrt_last_error());
  dlrt_graph_destroy(g);
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static fuzz_file file;
  const char *path = fuzz_file_set(&file, data, size);
  char why[1024];
  int by_model, rc = build(path, DLRT_F32, why, sizeof why, &by_model);
  if (rc < 0) {
    FUZZ_CHECK(!by_model || strstr(why, path), "the error does not name the file: \"%s\"",
               why);
    return 0;
  }
  rc = build(path, DLRT_F16, why, sizeof why, &by_model);
  FUZZ_CHECK(rc == DLRT_OK, "the model builds in fp32 but not in fp16: %s", why);
  return 0;
}
