/* fuzz-records.c — dlrt_dataset_open_records on a record file (.dlrec,
 * lib/data/records.c), read and mapped.
 *
 * Input: the file itself.
 *
 * Both ways must agree: the same verdict, and on success the same samples;
 * every label within the classes, every image byte readable (a mapping
 * shorter than the header claims would fault). A set that opens is saved
 * with dlrt_dataset_save_records and opened again: the same samples.
 *
 * fuzz-sources: */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "fuzz.h"

static size_t images_bytes(const dlrt_dataset *d) {
  return (size_t)(d->count * d->channels * d->height * d->width) *
         dlrt_dtype_size(d->image_dtype);
}

static void check_set(const dlrt_dataset *d, const char *how) {
  FUZZ_CHECK(d->count >= 1 && d->channels >= 1 && d->height >= 1 && d->width >= 1,
             "%s: %lld samples of %lld x %lld x %lld", how, (long long)d->count,
             (long long)d->channels, (long long)d->height, (long long)d->width);
  FUZZ_CHECK(d->image_dtype == DLRT_U8 || d->image_dtype == DLRT_F32, "%s: image dtype %d",
             how, (int)d->image_dtype);
  for (int64_t i = 0; i < d->count; i++)
    FUZZ_CHECK(d->labels[i] >= 0 && d->labels[i] < d->classes, "%s: label %d of sample %lld "
               "outside [0, %d)", how, d->labels[i], (long long)i, d->classes);
  fuzz_touch(d->images, images_bytes(d));
}

static void check_same(const dlrt_dataset *a, const dlrt_dataset *b, const char *how) {
  FUZZ_CHECK(a->count == b->count && a->channels == b->channels && a->height == b->height &&
                 a->width == b->width && a->classes == b->classes &&
                 a->image_dtype == b->image_dtype,
             "%s: the shapes differ", how);
  FUZZ_CHECK(!memcmp(a->images, b->images, images_bytes(a)), "%s: the images differ", how);
  FUZZ_CHECK(!memcmp(a->labels, b->labels, (size_t)a->count * sizeof *a->labels),
             "%s: the labels differ", how);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static fuzz_file file;
  const char *path = fuzz_file_set(&file, data, size);
  int fds = fuzz_lowest_free_fd();
  dlrt_dataset read, mapped;
  int rc_read = dlrt_dataset_open_records(path, 0, &read);
  FUZZ_CHECK(rc_read == 0 || (dlrt_last_error() && *dlrt_last_error()),
             "dlrt_dataset_open_records failed (%d) without a message", rc_read);
  int rc_mapped = dlrt_dataset_open_records(path, DLRT_DATASET_MMAP, &mapped);
  FUZZ_CHECK(fuzz_lowest_free_fd() == fds, "dlrt_dataset_open_records left a descriptor open");
  FUZZ_CHECK(rc_read == rc_mapped, "read gives %d, mapped gives %d", rc_read, rc_mapped);
  if (rc_read < 0) return 0;

  check_set(&read, "read");
  check_set(&mapped, "mapped");
  check_same(&read, &mapped, "read and mapped");

  char copy[4200];
  snprintf(copy, sizeof copy, "%s/copy.dlrec", fuzz_scratch_dir());
  int rc = dlrt_dataset_save_records(copy, &read);
  FUZZ_CHECK(rc == 0, "a set that opens cannot be saved: %s", dlrt_last_error());
  dlrt_dataset again;
  rc = dlrt_dataset_open_records(copy, 0, &again);
  FUZZ_CHECK(rc == 0, "a saved set cannot be opened: %s", dlrt_last_error());
  check_same(&read, &again, "saved and opened again");
  dlrt_dataset_free(&again);
  dlrt_dataset_free(&mapped);
  dlrt_dataset_free(&read);
  return 0;
}
