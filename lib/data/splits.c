/* splits.c — a data set's training and test splits, loaded together and
 * checked against each other before anything trains on them. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "data/dataset.h"
#include "util/status.h"

/* The fields in which the splits disagree, as "height 28 vs 32, ..." (the
 * training split's value first); empty when they agree. The test split may
 * have fewer classes (1 + its largest label, for IDX files), not more: the
 * model has one output per class of the training split. Windows of tokens
 * are told in their own words: the width is the context, the classes the
 * vocabulary. */
static void differences(const dlrt_dataset *train, const dlrt_dataset *test, char *out,
                        size_t size) {
  const struct {
    const char *name;
    long long a, b;
    int differs;
  } fields[] = {
      {"channels", train->channels, test->channels, train->channels != test->channels},
      {"height", train->height, test->height, train->height != test->height},
      {train->tokens ? "context" : "width", train->width, test->width,
       train->width != test->width},
      {train->tokens ? "vocabulary" : "classes", train->classes, test->classes,
       test->classes > train->classes},
  };
  size_t used = 0;
  out[0] = '\0';
  for (size_t i = 0; i < sizeof fields / sizeof fields[0] && used < size; i++)
    if (fields[i].differs)
      used += (size_t)snprintf(out + used, size - used, "%s%s %lld vs %lld", used ? ", " : "",
                               fields[i].name, fields[i].a, fields[i].b);
}

static int check(const dlrt_dataset *train, const char *train_name, const dlrt_dataset *test,
                 const char *test_name) {
  char diff[256];
  differences(train, test, diff, sizeof diff);
  if (!diff[0]) return DLRT_OK;
  if (train->tokens)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "the training and validation windows "
                           "disagree: %s (training %s; validation %s): both need windows of "
                           "the same context, and validation tokens within the training "
                           "vocabulary", diff, train_name, test_name);
  return dlrt__set_error(DLRT_ERR_INVALID_ARG, "the training and test splits disagree: %s "
                         "(training split %s; test split %s): both need images of the same "
                         "channels x height x width, and the test labels the training "
                         "split's classes", diff, train_name, test_name);
}

int dlrt_dataset_check_splits(const dlrt_dataset *train, const dlrt_dataset *test) {
  DLRT__CHECK_ARG(train && test, "dlrt_dataset_check_splits: a split is NULL");
  return check(train, train->source, test, test->source);
}

int dlrt_dataset_load_splits(const char *where, int flags, dlrt_dataset out[2]) {
  DLRT__CHECK_ARG(out, "dlrt_dataset_load_splits: out is NULL");
  char files[2][1024];
  int rc = dlrt__dataset_load_split(where, 0, flags, &out[0], files[0], sizeof files[0]);
  if (rc == DLRT_OK)
    rc = dlrt__dataset_load_split(where, 1, flags, &out[1], files[1], sizeof files[1]);
  else
    memset(&out[1], 0, sizeof out[1]);
  if (rc == DLRT_OK) rc = check(&out[0], files[0], &out[1], files[1]);
  if (rc < 0) {
    dlrt_dataset_free(&out[0]);
    dlrt_dataset_free(&out[1]);
  }
  return rc;
}
