/* idx.c — MNIST-family data sets: IDX files (plain or gzip) read into host
 * memory, and a generated stand-in of the same shape for machines without
 * the files.
 *
 * IDX layout (all integers big-endian):
 *   magic  u32   0x00000800 | ndims; 0x08 says the data are unsigned bytes
 *   dims   u32 x ndims
 *   data   u8  x product(dims), nothing after it
 * Images are 0x00000803 (count, rows, cols), labels 0x00000801 (count). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "data/dataset.h"
#include "util/file.h"
#include "util/status.h"

#define IDX_MAGIC_LABELS 0x00000801u /* unsigned bytes, 1 dimension */
#define IDX_MAGIC_IMAGES 0x00000803u /* unsigned bytes, 3 dimensions */
#define IDX_MAX_DIMS 3
/* A header announcing more than this is taken as corrupt (a real MNIST
 * training set is 47 MB). */
#define IDX_MAX_BYTES ((uint64_t)1 << 31)
/* gzread takes an unsigned and returns an int: read in pieces below INT_MAX. */
#define IDX_READ_CHUNK ((size_t)1 << 30)
/* The data buffer starts at this size and doubles as bytes arrive, so that a
 * corrupt header announcing 2 GB of a 100-byte file does not allocate 2 GB. */
#define IDX_FIRST_ALLOC ((size_t)16 << 20)

#define PATH_CAP 4096

/* One IDX file being read. */
typedef struct {
  const char *path;
  const char *what;     /* "images" or "labels" */
  uint32_t want_magic;
  int ndims;            /* from want_magic */
  uint32_t dims[IDX_MAX_DIMS];
  uint8_t *data;        /* product(dims) bytes, owned */
  size_t bytes;
} idx_file;

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* zlib's message for the last failure on `gz`, without the "<fd:N>: " it
 * prefixes (the file was opened by descriptor), or the system's. */
static const char *gz_reason(gzFile gz) {
  int err = Z_OK;
  const char *msg = gzerror(gz, &err);
  if (err == Z_ERRNO) return strerror(errno);
  if (!msg || !*msg) return "unknown zlib error";
  const char *colon = strncmp(msg, "<fd:", 4) == 0 ? strstr(msg, ">: ") : NULL;
  return colon ? colon + 3 : msg;
}

/* Reads up to `n` bytes; *got says how many arrived (fewer at end of file).
 * DLRT_ERR_IO when zlib or the system reports an error. */
static int read_some(gzFile gz, const char *path, void *buf, size_t n, size_t *got) {
  *got = 0;
  while (*got < n) {
    size_t want = n - *got < IDX_READ_CHUNK ? n - *got : IDX_READ_CHUNK;
    int r = gzread(gz, (char *)buf + *got, (unsigned)want);
    if (r < 0)
      return dlrt__set_error(DLRT_ERR_IO, "%s: cannot read: %s; the file is damaged, fetch "
                             "it again", path, gz_reason(gz));
    if (r == 0) break;
    *got += (size_t)r;
  }
  return DLRT_OK;
}

/* After a short read: the file ended early. zlib says "unexpected end of file"
 * when a gzip stream was cut off, which is worth passing on. */
static int truncated(gzFile gz, const char *path, const char *part, size_t want,
                     size_t got) {
  int err = Z_OK;
  gzerror(gz, &err);
  return dlrt__set_error(DLRT_ERR_IO, "%s: truncated: expected %zu bytes of %s, got %zu%s%s%s"
                         "; the download was probably cut short, fetch the file again",
                         path, want, part, got, err != Z_OK ? " (" : "",
                         err != Z_OK ? gz_reason(gz) : "", err != Z_OK ? ")" : "");
}

/* Opens `f->path` for gzread, which passes a plain file through unchanged.
 * DLRT_ERR_NOT_FOUND when it does not exist; a folder, FIFO or device is
 * refused at once (dlrt__open_regular). */
static int open_idx(const idx_file *f, gzFile *out) {
  char what[64];
  snprintf(what, sizeof what, "the IDX %s file", f->what);
  int fd, rc = dlrt__open_regular(f->path, what, &fd, NULL);
  if (rc < 0) return rc;
  gzFile gz = gzdopen(fd, "rb");
  if (!gz) {
    close(fd);
    return dlrt__set_error(DLRT_ERR_OOM, "%s: out of host memory opening the file", f->path);
  }
  gzbuffer(gz, 256 * 1024);
  *out = gz;
  return DLRT_OK;
}

/* Header: magic and dimensions, checked against what `f` expects. */
static int read_header(gzFile gz, idx_file *f, size_t *data_bytes) {
  const char *kind_name = f->what;
  const size_t header = 4 + 4 * (size_t)f->ndims;
  unsigned char buf[4 + 4 * IDX_MAX_DIMS];
  size_t got = 0;
  int rc = read_some(gz, f->path, buf, 4, &got);
  if (rc < 0) return rc;
  if (got < 4) return truncated(gz, f->path, "IDX header", header, got);

  uint32_t magic = be32(buf);
  if (magic != f->want_magic) {
    uint32_t other = f->want_magic == IDX_MAGIC_IMAGES ? IDX_MAGIC_LABELS : IDX_MAGIC_IMAGES;
    if (magic == other)
      return dlrt__set_error(DLRT_ERR_IO, "%s: an IDX %s file (magic 0x%08x) where an IDX "
                             "%s file (magic 0x%08x) was expected: are the images and "
                             "labels files swapped?", f->path,
                             f->want_magic == IDX_MAGIC_IMAGES ? "labels" : "images", magic,
                             kind_name, f->want_magic);
    if ((magic >> 16) == 0x1f8b)
      return dlrt__set_error(DLRT_ERR_IO, "%s: magic number 0x%08x is a gzip header inside "
                             "the gzip stream: the file was compressed twice; gunzip it "
                             "once", f->path, magic);
    return dlrt__set_error(DLRT_ERR_IO, "%s: magic number 0x%08x, expected 0x%08x (IDX %s: "
                           "unsigned bytes, %d dimension%s): is this an IDX %s file?",
                           f->path, magic, f->want_magic, kind_name, f->ndims,
                           f->ndims == 1 ? "" : "s", kind_name);
  }

  rc = read_some(gz, f->path, buf + 4, header - 4, &got);
  if (rc < 0) return rc;
  if (got < header - 4) return truncated(gz, f->path, "IDX header", header, 4 + got);

  char shape[64] = "";
  int len = 0;
  uint64_t total = 1;
  int plausible = 1;
  for (int i = 0; i < f->ndims; i++) {
    f->dims[i] = be32(buf + 4 + 4 * i);
    len += snprintf(shape + len, sizeof shape - (size_t)len, "%s%u", i ? " x " : "",
                    f->dims[i]);
    if (f->dims[i] == 0 || total > IDX_MAX_BYTES / f->dims[i])
      plausible = 0;
    else
      total *= f->dims[i];
  }
  if (!plausible)
    return dlrt__set_error(DLRT_ERR_IO, "%s: implausible IDX %s dimensions %s: each must be "
                           "at least 1 and the data at most 2^31 bytes; the header is "
                           "corrupt", f->path, kind_name, shape);
  *data_bytes = (size_t)total;
  return DLRT_OK;
}

/* The data after the header: exactly `bytes`, then end of file. */
static int read_data(gzFile gz, idx_file *f, size_t bytes) {
  size_t cap = bytes < IDX_FIRST_ALLOC ? bytes : IDX_FIRST_ALLOC;
  uint8_t *data = malloc(cap);
  if (!data)
    return dlrt__set_error(DLRT_ERR_OOM, "%s: out of host memory for %zu bytes", f->path, cap);
  size_t have = 0;
  int rc = DLRT_OK;
  while (have < bytes) {
    if (have == cap) {
      size_t next = cap <= bytes / 2 ? cap * 2 : bytes;
      uint8_t *grown = realloc(data, next);
      if (!grown) {
        rc = dlrt__set_error(DLRT_ERR_OOM, "%s: out of host memory for %zu bytes", f->path,
                             next);
        goto fail;
      }
      data = grown;
      cap = next;
    }
    size_t want = cap - have, got = 0;
    rc = read_some(gz, f->path, data + have, want, &got);
    if (rc < 0) goto fail;
    have += got;
    if (got < want) break; /* end of file */
  }
  if (have < bytes) {
    rc = truncated(gz, f->path, "data after the header", bytes, have);
    goto fail;
  }

  /* Nothing may follow: extra bytes mean the header and the data disagree. */
  unsigned char scratch[64 * 1024];
  uint64_t extra = 0;
  for (;;) {
    size_t got = 0;
    rc = read_some(gz, f->path, scratch, sizeof scratch, &got);
    if (rc < 0) goto fail;
    if (got == 0) break;
    extra += got;
  }
  if (extra > 0) {
    rc = dlrt__set_error(DLRT_ERR_IO, "%s: %llu extra bytes after the %zu bytes of data its "
                         "header announces: the file is corrupt, or not an IDX %s file",
                         f->path, (unsigned long long)extra, bytes, f->what);
    goto fail;
  }
  /* A gzip stream cut inside its trailer delivers all the data, then stops. */
  int err = Z_OK;
  gzerror(gz, &err);
  if (err != Z_OK) {
    rc = dlrt__set_error(DLRT_ERR_IO, "%s: the gzip stream is damaged after the data (%s); "
                         "fetch the file again", f->path, gz_reason(gz));
    goto fail;
  }
  f->data = data;
  f->bytes = bytes;
  return DLRT_OK;

fail:
  free(data);
  return rc;
}

static int read_idx(idx_file *f) {
  f->ndims = (int)(f->want_magic & 0xff);
  gzFile gz = NULL;
  int rc = open_idx(f, &gz);
  if (rc < 0) return rc;
  size_t bytes = 0;
  rc = read_header(gz, f, &bytes);
  if (rc == DLRT_OK) rc = read_data(gz, f, bytes);
  gzclose_r(gz);
  return rc;
}

/* Both files, checked against each other; *out is filled only on success. */
static int load_pair(const char *images_path, const char *labels_path, dlrt_dataset *out) {
  idx_file im = {.path = images_path, .what = "images", .want_magic = IDX_MAGIC_IMAGES};
  idx_file lb = {.path = labels_path, .what = "labels", .want_magic = IDX_MAGIC_LABELS};
  int rc = read_idx(&im);
  if (rc < 0) return rc;
  rc = read_idx(&lb);
  if (rc < 0) goto fail;
  if (im.dims[0] != lb.dims[0]) {
    rc = dlrt__set_error(DLRT_ERR_IO, "%s holds %u images but %s holds %u labels: the "
                         "files belong to different sets (or splits)", images_path,
                         im.dims[0], labels_path, lb.dims[0]);
    goto fail;
  }
  int32_t *labels = malloc(lb.bytes * sizeof *labels);
  if (!labels) {
    rc = dlrt__set_error(DLRT_ERR_OOM, "%s: out of host memory for %zu labels", labels_path,
                         lb.bytes);
    goto fail;
  }
  uint8_t top = 0;
  for (size_t i = 0; i < lb.bytes; i++) {
    labels[i] = lb.data[i];
    if (lb.data[i] > top) top = lb.data[i];
  }
  free(lb.data);

  out->count = im.dims[0];
  out->channels = 1;
  out->height = im.dims[1];
  out->width = im.dims[2];
  out->classes = 1 + top;
  out->image_dtype = DLRT_U8;
  out->images = im.data;
  out->labels = labels;
  snprintf(out->source, sizeof out->source, "%s, %s", images_path, labels_path);
  return DLRT_OK;

fail:
  free(im.data);
  free(lb.data);
  return rc;
}

int dlrt_dataset_load_idx(const char *images_path, const char *labels_path,
                          dlrt_dataset *out) {
  DLRT__CHECK_ARG(out, "dlrt_dataset_load_idx: out is NULL");
  memset(out, 0, sizeof *out);
  DLRT__CHECK_ARG(images_path && labels_path, "dlrt_dataset_load_idx: a path is NULL");
  return load_pair(images_path, labels_path, out);
}

/* ---------------------------------------------------------------- folders */

/* "<folder>/<name><suffix>", without doubling a trailing slash. */
static int join(char *dst, const char *folder, const char *name, const char *suffix) {
  size_t n = strlen(folder);
  while (n > 1 && folder[n - 1] == '/') n--;
  int len = snprintf(dst, PATH_CAP, "%.*s/%s%s", (int)n, folder, name, suffix);
  if (len < 0 || len >= PATH_CAP)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "folder name too long (%zu characters): "
                           "%.200s...", strlen(folder), folder);
  return DLRT_OK;
}

/* The first of "<name>.gz", "<name>" in `folder` that exists (readable or
 * not: open_idx then says what is wrong with it). */
static int find_file(const char *where, const char *folder, const char *name,
                     const char *images, const char *labels, char *path) {
  static const char *const suffixes[] = {".gz", ""};
  char tried[2][PATH_CAP];
  for (int i = 0; i < 2; i++) {
    int rc = join(path, folder, name, suffixes[i]);
    if (rc < 0) return rc;
    struct stat st;
    if (stat(path, &st) == 0 || (errno != ENOENT && errno != ENOTDIR)) return DLRT_OK;
    snprintf(tried[i], PATH_CAP, "%s", path);
  }
  struct stat st;
  const char *folder_state = stat(folder, &st) != 0 ? ", which does not exist"
                             : !S_ISDIR(st.st_mode) ? ", which is not a folder" : "";
  if (strcmp(where, "fashion-mnist") == 0)
    return dlrt__set_error(DLRT_ERR_NOT_FOUND, "fashion-mnist: no %s in %s%s (tried %s and "
                           "%s): install Debian's dataset-fashion-mnist package (apt install "
                           "dataset-fashion-mnist), or pass a folder holding the IDX files",
                           name, folder, folder_state, tried[0], tried[1]);
  return dlrt__set_error(DLRT_ERR_NOT_FOUND, "no %s in %s%s (tried %s and %s): pass a folder "
                         "holding the MNIST-family IDX files %s and %s, plain or .gz", name,
                         folder, folder_state, tried[0], tried[1], images, labels);
}

int dlrt_dataset_load(const char *where, int test, dlrt_dataset *out) {
  return dlrt_dataset_load_flags(where, test, 0, out);
}

/* A record file given alone holds both splits: its last tenth (at least one
 * record) is the test split, the rest the training split, as Keras's
 * validation_split takes the last samples. The arrays stay where they are
 * (mapped or read); the test split's move to the front. */
static int split_records(dlrt_dataset *d, int test) {
  if (d->count < 2) {
    int rc = dlrt__set_error(DLRT_ERR_IO, "%s: %lld record%s: a record file given alone needs "
                             "two or more (its last tenth is the test split)", d->source,
                             (long long)d->count, d->count == 1 ? "" : "s");
    dlrt_dataset_free(d);
    return rc;
  }
  int64_t held = d->count / 10 > 0 ? d->count / 10 : 1, first = d->count - held;
  if (!test) {
    d->count = first;
    return DLRT_OK;
  }
  size_t sample = (size_t)(d->channels * d->height * d->width) * dlrt_dtype_size(d->image_dtype);
  if (d->mapping) d->images += (size_t)first * sample;
  else memmove(d->images, d->images + (size_t)first * sample, (size_t)held * sample);
  memmove(d->labels, d->labels + first, (size_t)held * sizeof *d->labels);
  d->count = held;
  return DLRT_OK;
}

int dlrt__dataset_load_split(const char *where, int test, int flags, dlrt_dataset *out,
                             char *files, size_t files_size) {
  DLRT__CHECK_ARG(out, "dlrt_dataset_load: out is NULL");
  memset(out, 0, sizeof *out);
  DLRT__CHECK_ARG(where && *where, "dlrt_dataset_load: give \"fashion-mnist\" or a folder");
  DLRT__CHECK_ARG((flags & ~DLRT_DATASET_MMAP) == 0, "dlrt_dataset_load: unknown flags 0x%x",
                  (unsigned)flags);
  if (files_size) files[0] = '\0';
  const char *folder = strcmp(where, "fashion-mnist") == 0 ? DLRT_FASHION_MNIST_DIR : where;
  struct stat st;
  if (stat(folder, &st) == 0 && S_ISREG(st.st_mode)) {
    if (files_size) snprintf(files, files_size, "%s", folder);
    int rc = dlrt_dataset_open_records(folder, flags, out);
    return rc < 0 ? rc : split_records(out, test);
  }
  char records[PATH_CAP];
  int rc = join(records, folder, test ? "test" : "train", ".dlrec");
  if (rc < 0) return rc;
  if (stat(records, &st) == 0 || (errno != ENOENT && errno != ENOTDIR)) {
    if (files_size) snprintf(files, files_size, "%s", records);
    return dlrt_dataset_open_records(records, flags, out);
  }
  const char *images = test ? "t10k-images-idx3-ubyte" : "train-images-idx3-ubyte";
  const char *labels = test ? "t10k-labels-idx1-ubyte" : "train-labels-idx1-ubyte";

  char images_path[PATH_CAP], labels_path[PATH_CAP];
  rc = find_file(where, folder, images, images, labels, images_path);
  if (rc < 0) return rc;
  rc = find_file(where, folder, labels, images, labels, labels_path);
  if (rc < 0) return rc;
  rc = load_pair(images_path, labels_path, out);
  if (rc < 0) return rc;
  if (files_size) snprintf(files, files_size, "%s", out->source);
  snprintf(out->source, sizeof out->source, "%s", folder);
  return DLRT_OK;
}

int dlrt_dataset_load_flags(const char *where, int test, int flags, dlrt_dataset *out) {
  return dlrt__dataset_load_split(where, test, flags, out, NULL, 0);
}

void dlrt_dataset_free(dlrt_dataset *d) {
  if (!d) return;
  if (d->mapping)
    dlrt__dataset_unmap(d);
  else
    free(d->images);
  free(d->labels);
  memset(d, 0, sizeof *d);
}

/* ---------------------------------------------------------------- generated */

/* Each class c draws a bar through the centre, at one of 8 angles (c + c/32)
 * mod 8, and a blob at one of 36 places on a 6 x 6 grid (c mod 32, spread
 * out): no two of 255 classes share both, and up to 32 classes all differ in
 * the blob. The patterns depend on the class alone, so sets made with two
 * seeds (training and test) agree on what each class is. Each sample moves the
 * pattern by up to a pixel either way, scales its brightness and adds noise
 * to every pixel. Integer arithmetic only, so the bytes are the same on every
 * machine for a given seed. */

#define GEN_SIDE 28

/* cos and sin of k * 22.5 degrees, times 1024. */
static const int gen_dir[8][2] = {
    {1024, 0}, {946, 392}, {724, 724}, {392, 946},
    {0, 1024}, {-392, 946}, {-724, 724}, {-946, 392},
};

static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Coverage 0..256: 256 up to `full`, falling linearly to 0 at `zero`. */
static int ramp(int64_t v, int64_t full, int64_t zero) {
  if (v <= full) return 256;
  if (v >= zero) return 0;
  return (int)((zero - v) * 256 / (zero - full));
}

static void gen_image(uint8_t *img, int c, uint64_t *rng) {
  /* Coordinates are in half pixels from the image centre: pixel x is at
   * 2x + 1 - 28, so -27..27. */
  const int *dir = gen_dir[(c + c / 32) % 8];
  int slot = (c % 32) * 13 % 36;
  int bx = -20 + 8 * (slot % 6), by = -20 + 8 * (slot / 6);
  uint64_t r = splitmix64(rng);
  int jx = (int)(r % 5) - 2, jy = (int)(r / 5 % 5) - 2; /* +-1 pixel */
  int peak = 160 + (int)((r >> 32) % 96);               /* 160..255 */
  uint64_t noise = 0;
  for (int y = 0; y < GEN_SIDE; y++) {
    for (int x = 0; x < GEN_SIDE; x++) {
      int px = 2 * x + 1 - GEN_SIDE - jx, py = 2 * y + 1 - GEN_SIDE - jy;
      /* Bar: 2 pixels thick, 16 long, with a 1-pixel soft edge (x 1024). */
      int64_t along = llabs((int64_t)px * dir[0] + (int64_t)py * dir[1]);
      int64_t across = llabs((int64_t)px * dir[1] - (int64_t)py * dir[0]);
      int bar = ramp(across, 2 * 1024, 4 * 1024);
      int ends = ramp(along, 16 * 1024, 18 * 1024);
      if (ends < bar) bar = ends;
      /* Blob: radius 2 pixels, soft to 3 (squared half pixels). */
      int64_t dx = px - bx, dy = py - by;
      int blob = ramp(dx * dx + dy * dy, 16, 36);
      int cover = bar > blob ? bar : blob;
      if ((x & 3) == 0) noise = splitmix64(rng);
      int n = (int)(noise & 0xffff) % 81 - 40; /* -40..40 */
      noise >>= 16;
      int v = cover * peak / 256 + n;
      img[y * GEN_SIDE + x] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
  }
}

int dlrt_dataset_generate(int64_t count, int classes, uint64_t seed, dlrt_dataset *out) {
  DLRT__CHECK_ARG(out, "dlrt_dataset_generate: out is NULL");
  memset(out, 0, sizeof *out);
  DLRT__CHECK_ARG(classes >= 2 && classes <= 255,
                  "dlrt_dataset_generate: %d classes; give 2 to 255", classes);
  DLRT__CHECK_ARG(count >= classes && (uint64_t)count <= SIZE_MAX / (GEN_SIDE * GEN_SIDE),
                  "dlrt_dataset_generate: count %lld; give at least one sample per class "
                  "(%d)", (long long)count, classes);
  size_t n = (size_t)count;
  uint8_t *images = malloc(n * GEN_SIDE * GEN_SIDE);
  int32_t *labels = malloc(n * sizeof *labels);
  if (!images || !labels) {
    free(images);
    free(labels);
    return dlrt__set_error(DLRT_ERR_OOM, "dlrt_dataset_generate: out of host memory for "
                           "%lld images", (long long)count);
  }
  /* Balanced labels (counts differ by at most one), in a seeded order. */
  uint64_t rng = seed;
  for (size_t i = 0; i < n; i++) labels[i] = (int32_t)(i % (size_t)classes);
  for (size_t i = n - 1; i > 0; i--) {
    size_t j = (size_t)(splitmix64(&rng) % (i + 1));
    int32_t t = labels[i];
    labels[i] = labels[j];
    labels[j] = t;
  }
  for (size_t i = 0; i < n; i++)
    gen_image(images + i * GEN_SIDE * GEN_SIDE, labels[i], &rng);

  out->count = count;
  out->channels = 1;
  out->image_dtype = DLRT_U8;
  out->height = GEN_SIDE;
  out->width = GEN_SIDE;
  out->classes = classes;
  out->images = images;
  out->labels = labels;
  snprintf(out->source, sizeof out->source, "generated");
  return DLRT_OK;
}
