/* fuzz-idx.c — dlrt_dataset_load_idx on a pair of IDX files (lib/data/idx.c),
 * plain or gzip.
 *
 * Input: a 4-byte little-endian length L, then the images file, then the
 * labels file: the images file is the first L mod (rest + 1) bytes of the
 * rest, so that every input names a split. tests/fuzz/make-corpus.sh writes
 * the seeds in this shape.
 *
 * On success the data set must agree with itself and with the files: count
 * and shape, labels within the classes it reports, every image byte
 * readable, a plain file exactly its header and data.
 *
 * fuzz-sources: */
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static fuzz_file images_file, labels_file;
  if (size < 4) return 0;
  uint32_t split = (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 |
                   (uint32_t)data[3] << 24;
  data += 4, size -= 4;
  size_t images_bytes = split % (size + 1);
  const char *images = fuzz_file_set(&images_file, data, images_bytes);
  const char *labels = fuzz_file_set(&labels_file, data + images_bytes, size - images_bytes);

  int fds = fuzz_lowest_free_fd();
  dlrt_dataset d;
  int rc = dlrt_dataset_load_idx(images, labels, &d);
  FUZZ_CHECK(fuzz_lowest_free_fd() == fds, "dlrt_dataset_load_idx left a descriptor open");
  if (rc < 0) {
    const char *msg = dlrt_last_error();
    FUZZ_CHECK(msg && *msg, "dlrt_dataset_load_idx failed (%d) without a message", rc);
    return 0;
  }
  FUZZ_CHECK(d.count >= 1 && d.channels == 1 && d.height >= 1 && d.width >= 1,
             "loaded %lld images of %lld x %lld x %lld", (long long)d.count,
             (long long)d.channels, (long long)d.height, (long long)d.width);
  FUZZ_CHECK(d.classes >= 1 && d.classes <= 256 && d.image_dtype == DLRT_U8,
             "loaded %d classes of dtype %d", d.classes, (int)d.image_dtype);
  /* A plain (not gzip) pair is its headers and the data, nothing more. */
  const uint8_t *lb = data + images_bytes;
  size_t labels_bytes = size - images_bytes;
  uint64_t pixels = (uint64_t)d.count * (uint64_t)d.height * (uint64_t)d.width;
  if (!(images_bytes >= 2 && data[0] == 0x1f && data[1] == 0x8b))
    FUZZ_CHECK(16 + pixels == images_bytes, "%lld images of %lld x %lld from an images file "
               "of %zu bytes", (long long)d.count, (long long)d.height, (long long)d.width,
               images_bytes);
  if (!(labels_bytes >= 2 && lb[0] == 0x1f && lb[1] == 0x8b))
    FUZZ_CHECK(8 + (uint64_t)d.count == labels_bytes, "%lld labels from a labels file of %zu "
               "bytes", (long long)d.count, labels_bytes);
  for (int64_t i = 0; i < d.count; i++)
    FUZZ_CHECK(d.labels[i] >= 0 && d.labels[i] < d.classes, "label %d of sample %lld outside "
               "[0, %d)", d.labels[i], (long long)i, d.classes);
  fuzz_touch(d.images, (size_t)pixels);
  dlrt_dataset_free(&d);
  return 0;
}
