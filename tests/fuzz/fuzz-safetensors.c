/* fuzz-safetensors.c — dlrt_safetensors_load on a safetensors file
 * (lib/data/safetensors.c, its JSON header read by lib/data/json.c).
 *
 * Input: the file itself.
 *
 * On success every tensor must be what its header says (a known dtype, a
 * name, bytes = product(shape) x element size, every byte readable) and the
 * metadata a NULL-ended list of key, value pairs without dlrt's own CRC key;
 * loading without the metadata must give the same verdict. What loads and
 * dlrt_safetensors_save accepts is saved and loaded again: the same tensors
 * and metadata.
 *
 * fuzz-sources: */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "fuzz.h"

static void check_tensors(const dlrt_host_tensor *t, int n) {
  for (int i = 0; i < n; i++) {
    size_t len = strnlen(t[i].name, sizeof t[i].name);
    FUZZ_CHECK(len > 0 && len < sizeof t[i].name, "tensor %d has a name of %zu bytes", i, len);
    FUZZ_CHECK(t[i].ndim >= 0 && t[i].ndim <= DLRT_MAX_DIMS, "tensor %d has ndim %d", i,
               t[i].ndim);
    size_t elem = dlrt_dtype_size(t[i].dtype);
    FUZZ_CHECK(elem > 0, "tensor %d has dtype %d", i, (int)t[i].dtype);
    /* The bytes are all in memory, so the product cannot overflow. */
    size_t bytes = elem;
    for (int d = 0; d < t[i].ndim; d++) {
      FUZZ_CHECK(t[i].shape[d] >= 0, "tensor %d has dimension %lld", i,
                 (long long)t[i].shape[d]);
      FUZZ_CHECK(t[i].shape[d] == 0 || bytes <= SIZE_MAX / (size_t)t[i].shape[d],
                 "tensor %d: shape overflows", i);
      bytes *= (size_t)t[i].shape[d];
    }
    FUZZ_CHECK(bytes == t[i].bytes, "tensor \"%s\": %zu bytes for a shape of %zu", t[i].name,
               t[i].bytes, bytes);
    FUZZ_CHECK(t[i].bytes == 0 || t[i].data, "tensor \"%s\" has no data", t[i].name);
    if (t[i].bytes) fuzz_touch(t[i].data, t[i].bytes);
  }
}

static size_t check_metadata(char **meta) {
  FUZZ_CHECK(meta, "the metadata is NULL after a load that asked for it");
  size_t n = 0;
  for (; meta[n]; n += 2) {
    FUZZ_CHECK(meta[n + 1], "metadata key \"%s\" has no value", meta[n]);
    FUZZ_CHECK(strcmp(meta[n], "dlrt.crc32") != 0, "the CRC key is handed back");
  }
  return n;
}

static void check_same(const dlrt_host_tensor *a, int na, char **ma,
                       const dlrt_host_tensor *b, int nb, char **mb) {
  FUZZ_CHECK(na == nb, "%d tensors saved, %d loaded back", na, nb);
  for (int i = 0; i < na; i++) {
    FUZZ_CHECK(!strcmp(a[i].name, b[i].name) && a[i].dtype == b[i].dtype &&
                   a[i].ndim == b[i].ndim && a[i].bytes == b[i].bytes &&
                   !memcmp(a[i].shape, b[i].shape, (size_t)a[i].ndim * sizeof *a[i].shape),
               "tensor %d (\"%s\") differs after a round trip", i, a[i].name);
    FUZZ_CHECK(!a[i].bytes || !memcmp(a[i].data, b[i].data, a[i].bytes),
               "the data of tensor \"%s\" differ after a round trip", a[i].name);
  }
  size_t i = 0;
  for (; ma[i] && mb[i]; i++)
    FUZZ_CHECK(!strcmp(ma[i], mb[i]), "metadata \"%s\" became \"%s\"", ma[i], mb[i]);
  FUZZ_CHECK(!ma[i] && !mb[i], "the metadata lost or gained entries in a round trip");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static fuzz_file file;
  const char *path = fuzz_file_set(&file, data, size);
  int fds = fuzz_lowest_free_fd();
  dlrt_host_tensor *t = NULL;
  char **meta = NULL;
  int n = -1, rc = dlrt_safetensors_load(path, &t, &n, &meta);
  FUZZ_CHECK(fuzz_lowest_free_fd() == fds, "dlrt_safetensors_load left a descriptor open");
  if (rc < 0) {
    FUZZ_CHECK(!t && n == 0 && !meta, "a failed load hands back tensors or metadata");
    FUZZ_CHECK(dlrt_last_error() && *dlrt_last_error(), "the load failed (%d) without a "
               "message", rc);
  } else {
    FUZZ_CHECK(n >= 0 && (n == 0 || t), "a load gives %d tensors at %p", n, (void *)t);
    check_tensors(t, n);
    check_metadata(meta);
  }

  dlrt_host_tensor *t2 = NULL;
  int n2 = -1, rc2 = dlrt_safetensors_load(path, &t2, &n2, NULL);
  FUZZ_CHECK((rc < 0) == (rc2 < 0), "with metadata the load gives %d, without %d", rc, rc2);
  if (rc2 >= 0) dlrt_safetensors_free(t2, n2, NULL);
  if (rc < 0) return 0;

  char copy[4200];
  snprintf(copy, sizeof copy, "%s/copy.safetensors", fuzz_scratch_dir());
  if (dlrt_safetensors_save(copy, t, n, (const char *const *)meta) == DLRT_OK) {
    dlrt_host_tensor *back = NULL;
    char **back_meta = NULL;
    int back_n = 0;
    rc = dlrt_safetensors_load(copy, &back, &back_n, &back_meta);
    FUZZ_CHECK(rc == DLRT_OK, "a saved file does not load: %s", dlrt_last_error());
    check_same(t, n, meta, back, back_n, back_meta);
    dlrt_safetensors_free(back, back_n, back_meta);
  }
  dlrt_safetensors_free(t, n, meta);
  return 0;
}
