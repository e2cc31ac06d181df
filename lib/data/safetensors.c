/* safetensors.c — checkpoints in Hugging Face's safetensors format, which
 * PyTorch, JAX and the safetensors library read:
 *
 *   [8 bytes]  N, the header length, little-endian u64
 *   [N bytes]  UTF-8 JSON: {"__metadata__": {"key": "value", ...},      (optional)
 *                           "name": {"dtype": "F32", "shape": [2, 3],
 *                                    "data_offsets": [begin, end]}, ...}
 *              padded with spaces so that the data starts 8-byte aligned
 *   [rest]     the tensors' bytes, row-major, little-endian; offsets count
 *              from the byte after the header, tensors lie back to back with
 *              no gap and together cover the rest of the file exactly.
 *
 * Saving replaces the target atomically (util/replace.h: written beside it,
 * flushed, renamed over it; only a regular file, or a link to one, is
 * replaced); loading trusts nothing in the file. dlrt also writes two
 * CRC-32s as metadata (8 hex digits each, which other readers ignore):
 * "dlrt.crc32" of the data bytes, and "dlrt.header_crc32" of the rest of
 * the header (the other metadata, the tensors' names, dtypes, shapes and
 * offsets, in a canonical order), and checks them on load, so a flipped bit
 * in a weight or an edited epochs_done is refused rather than trained on.
 * Files without them (from other writers, or from dlrt before the header's
 * checksum) load unchecked. The keys are dlrt's own: never handed back in
 * the metadata, replaced if a caller passes them. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "data/json.h"
#include "util/file.h"
#include "util/replace.h"
#include "util/status.h"

/* The reference implementation refuses longer headers too: a corrupt length
 * must not make us allocate gigabytes. */
#define ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)
#define ST_NAME_MAX ((int)sizeof(((dlrt_host_tensor *)0)->name))

static const struct {
  const char *name;
  dlrt_dtype dtype;
} st_dtypes[] = {
    {"F32", DLRT_F32}, {"F16", DLRT_F16}, {"BF16", DLRT_BF16}, {"I32", DLRT_I32}, {"U8", DLRT_U8},
};
enum { ST_DTYPE_COUNT = sizeof st_dtypes / sizeof st_dtypes[0] };

static const char *st_dtype_name(dlrt_dtype dtype) {
  for (int i = 0; i < ST_DTYPE_COUNT; i++)
    if (st_dtypes[i].dtype == dtype) return st_dtypes[i].name;
  return NULL;
}

/* product(shape) * elem, or 0 with *ok = 0 on overflow past SIZE_MAX. */
static size_t shape_bytes(int ndim, const int64_t *shape, size_t elem, int *ok) {
  uint64_t total = elem;
  *ok = 1;
  for (int d = 0; d < ndim; d++) {
    uint64_t dim = (uint64_t)shape[d];
    if (dim && total > SIZE_MAX / dim) *ok = 0;
    else total *= dim;
  }
  return *ok ? (size_t)total : 0;
}

/* "[2, 3]" into buf. */
static const char *shape_text(int ndim, const int64_t *shape, char *buf, size_t size) {
  size_t used = (size_t)snprintf(buf, size, "[");
  for (int d = 0; d < ndim && used < size; d++)
    used += (size_t)snprintf(buf + used, size - used, "%s%lld", d ? ", " : "",
                             (long long)shape[d]);
  if (used < size) snprintf(buf + used, size - used, "]");
  return buf;
}

/* A tensor as the header describes it. */
typedef struct {
  dlrt_host_tensor t;
  uint64_t begin, end; /* data_offsets */
  int index;           /* position in the header, to keep equal offsets stable */
} st_entry;

static int by_name(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first name that appears twice among names[0..n), or NULL. Sorts names. */
static const char *first_duplicate(const char **names, size_t n) {
  if (n > 1) qsort(names, n, sizeof *names, by_name);
  for (size_t i = 1; i < n; i++)
    if (!strcmp(names[i - 1], names[i])) return names[i];
  return NULL;
}

/* ------------------------------------------------------------------ save */

/* A name that needs no escape in JSON: no quote, backslash or control byte. */
static int plain_name(const char *name, size_t len) {
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)name[i];
    if (c < 0x20 || c == 0x7f || c == '"' || c == '\\') return 0;
  }
  return dlrt__utf8_valid(name, len);
}

static int check_tensors(const char *path, const dlrt_host_tensor *tensors, int n) {
  const char **names = malloc((size_t)(n ? n : 1) * sizeof *names);
  if (!names) return dlrt__set_error(DLRT_ERR_OOM, "%s: out of host memory", path);
  int rc = DLRT_OK;
  for (int i = 0; i < n && rc == DLRT_OK; i++) {
    const dlrt_host_tensor *t = &tensors[i];
    size_t len = strnlen(t->name, ST_NAME_MAX);
    char dims[256];
    int ok = 1;
    if (len == 0 || len == (size_t)ST_NAME_MAX) {
      rc = dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: tensor %d has %s name; give each "
                           "tensor a name of 1 to %d bytes", path, i,
                           len ? "an unterminated" : "an empty", ST_NAME_MAX - 1);
    } else if (!plain_name(t->name, len)) {
      rc = dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: name of tensor %d holds a quote, "
                           "backslash, control character or invalid UTF-8; use names such "
                           "as \"layer1.weight\"", path, i);
    } else if (!strcmp(t->name, "__metadata__")) {
      rc = dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: tensor %d is named \"__metadata__\", "
                           "which the format keeps for metadata; rename it", path, i);
    } else if (!st_dtype_name(t->dtype)) {
      rc = dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: tensor \"%s\" has unknown dtype %d",
                           path, t->name, (int)t->dtype);
    } else if (t->ndim < 0 || t->ndim > DLRT_MAX_DIMS) {
      rc = dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: tensor \"%s\" has ndim %d; use 0 (a "
                           "scalar) to %d", path, t->name, t->ndim, DLRT_MAX_DIMS);
    } else {
      for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] < 0) ok = 0;
      size_t need = ok ? shape_bytes(t->ndim, t->shape, dlrt_dtype_size(t->dtype), &ok) : 0;
      shape_text(t->ndim, t->shape, dims, sizeof dims);
      if (!ok)
        rc = dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: tensor \"%s\" has shape %s: "
                             "dimensions must be >= 0 and the size must fit in memory",
                             path, t->name, dims);
      else if (need != t->bytes)
        rc = dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: tensor \"%s\" has bytes = %zu but "
                             "shape %s of %s needs %zu; fix bytes or shape", path, t->name,
                             t->bytes, dims, dlrt_dtype_name(t->dtype), need);
      else if (need && !t->data)
        rc = dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: tensor \"%s\" has %zu bytes but "
                             "data is NULL", path, t->name, need);
    }
    names[i] = t->name;
  }
  const char *dup = rc == DLRT_OK ? first_duplicate(names, (size_t)n) : NULL;
  if (dup)
    rc = dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: two tensors are named \"%s\"; names "
                         "must be unique", path, dup);
  free(names);
  return rc;
}

static int check_metadata(const char *path, const char *const *metadata) {
  for (size_t i = 0; metadata && metadata[i]; i += 2) {
    const char *key = metadata[i], *value = metadata[i + 1];
    if (!value)
      return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: metadata key \"%s\" has no value "
                             "(the list is key, value, ..., NULL)", path, key);
    if (!dlrt__utf8_valid(key, strlen(key)) || !dlrt__utf8_valid(value, strlen(value)))
      return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: metadata \"%s\" is not valid UTF-8",
                             path, key);
    for (size_t j = 0; j < i; j += 2)
      if (!strcmp(metadata[j], key))
        return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: metadata key \"%s\" appears "
                               "twice; keys must be unique", path, key);
  }
  return DLRT_OK;
}

#define ST_CRC_KEY "dlrt.crc32"
#define ST_HEADER_CRC_KEY "dlrt.header_crc32"

/* dlrt's keys: written fresh with every file, never handed back. */
static int own_key(const char *key) {
  return !strcmp(key, ST_CRC_KEY) || !strcmp(key, ST_HEADER_CRC_KEY);
}

/* CRC-32 (zlib's) of tensors' bytes in order; zlib takes at most 4 GiB a call. */
static uint32_t data_crc(const dlrt_host_tensor *tensors, int n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (int i = 0; i < n; i++)
    for (size_t at = 0; at < tensors[i].bytes;) {
      size_t step = tensors[i].bytes - at < (1u << 30) ? tensors[i].bytes - at : (1u << 30);
      crc = crc32(crc, (const Bytef *)tensors[i].data + at, (uInt)step);
      at += step;
    }
  return (uint32_t)crc;
}

static int by_key(const void *a, const void *b) {
  return strcmp(**(const char *const *const *)a, **(const char *const *const *)b);
}

static int by_entry_name(const void *a, const void *b) {
  return strcmp((*(const st_entry *const *)a)->t.name, (*(const st_entry *const *)b)->t.name);
}

static uLong crc_string(uLong crc, const char *s) {
  return crc32(crc, (const Bytef *)s, (uInt)strlen(s) + 1); /* with its NUL */
}

/* CRC-32 of everything in the header but dlrt's own keys, in a form that
 * does not depend on the order a writer put things in: the metadata pairs
 * sorted by key, then the tensors sorted by name, each with its dtype,
 * shape and data_offsets. So a value edited in the metadata (epochs_done,
 * the loss scale) or a renamed or reshaped tensor is found, as the data's
 * CRC finds a flipped bit in a weight. */
static int header_crc(const char *path, const char *const *meta, const st_entry *v, int n,
                      uint32_t *out) {
  size_t pairs = 0;
  while (meta && meta[2 * pairs]) pairs++;
  const char *const **keys = malloc((pairs ? pairs : 1) * sizeof *keys);
  const st_entry **order = malloc((size_t)(n ? n : 1) * sizeof *order);
  if (!keys || !order) {
    free(keys);
    free(order);
    return dlrt__set_error(DLRT_ERR_OOM, "%s: out of host memory", path);
  }
  for (size_t i = 0; i < pairs; i++) keys[i] = meta + 2 * i;
  for (int i = 0; i < n; i++) order[i] = &v[i];
  if (pairs > 1) qsort(keys, pairs, sizeof *keys, by_key);
  if (n > 1) qsort(order, (size_t)n, sizeof *order, by_entry_name);
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t i = 0; i < pairs; i++) {
    if (own_key(keys[i][0])) continue;
    crc = crc_string(crc_string(crc_string(crc, "m"), keys[i][0]), keys[i][1]);
  }
  for (int i = 0; i < n; i++) {
    const st_entry *e = order[i];
    char layout[32 * (DLRT_MAX_DIMS + 3)];
    size_t used = (size_t)snprintf(layout, sizeof layout, "%d", e->t.ndim);
    for (int d = 0; d < e->t.ndim && d < DLRT_MAX_DIMS; d++)
      used += (size_t)snprintf(layout + used, sizeof layout - used, ",%lld",
                               (long long)e->t.shape[d]);
    snprintf(layout + used, sizeof layout - used, ";%llu,%llu", (unsigned long long)e->begin,
             (unsigned long long)e->end);
    crc = crc_string(crc_string(crc_string(crc_string(crc, "t"), e->t.name),
                                st_dtype_name(e->t.dtype)), layout);
  }
  free(keys);
  free(order);
  *out = (uint32_t)crc;
  return DLRT_OK;
}

static int build_header(const char *path, dlrt__text *h, const dlrt_host_tensor *tensors,
                        int n, const char *const *metadata) {
  st_entry *v = calloc((size_t)(n ? n : 1), sizeof *v);
  if (!v) return dlrt__set_error(DLRT_ERR_OOM, "%s: out of host memory", path);
  uint64_t offset = 0;
  for (int i = 0; i < n; i++) {
    v[i].t = tensors[i];
    v[i].begin = offset;
    v[i].end = offset += tensors[i].bytes;
  }
  uint32_t hcrc;
  int rc = header_crc(path, metadata, v, n, &hcrc);
  free(v);
  if (rc < 0) return rc;
  char crc[16], header_sum[16];
  snprintf(crc, sizeof crc, "%08x", (unsigned)data_crc(tensors, n));
  snprintf(header_sum, sizeof header_sum, "%08x", (unsigned)hcrc);
  dlrt__text_put(h, "{\"__metadata__\":{", 17);
  for (size_t i = 0; metadata && metadata[i]; i += 2) {
    if (own_key(metadata[i])) continue; /* ours, written fresh below */
    dlrt__text_json_string(h, metadata[i]);
    dlrt__text_put(h, ":", 1);
    dlrt__text_json_string(h, metadata[i + 1]);
    dlrt__text_put(h, ",", 1);
  }
  dlrt__text_json_string(h, ST_CRC_KEY);
  dlrt__text_put(h, ":", 1);
  dlrt__text_json_string(h, crc);
  dlrt__text_put(h, ",", 1);
  dlrt__text_json_string(h, ST_HEADER_CRC_KEY);
  dlrt__text_put(h, ":", 1);
  dlrt__text_json_string(h, header_sum);
  dlrt__text_put(h, "}", 1);
  offset = 0;
  for (int i = 0; i < n; i++) {
    const dlrt_host_tensor *t = &tensors[i];
    dlrt__text_put(h, ",", 1);
    dlrt__text_json_string(h, t->name);
    dlrt__text_printf(h, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim; d++)
      dlrt__text_printf(h, "%s%lld", d ? "," : "", (long long)t->shape[d]);
    dlrt__text_printf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
                      (unsigned long long)(offset + t->bytes));
    offset += t->bytes;
  }
  dlrt__text_put(h, "}", 1);
  while (h->len % 8) dlrt__text_put(h, " ", 1);
  return DLRT_OK;
}

static int write_file(const char *path, const dlrt__text *header,
                      const dlrt_host_tensor *tensors, int n) {
  dlrt__replace r;
  int rc = dlrt__replace_open(&r, path);
  if (rc < 0) return rc;
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)header->len >> (8 * i));
  rc = dlrt__write_all(r.fd, path, len8, 8);
  if (rc == DLRT_OK) rc = dlrt__write_all(r.fd, path, header->p, header->len);
  for (int i = 0; i < n && rc == DLRT_OK; i++)
    rc = dlrt__write_all(r.fd, path, tensors[i].data, tensors[i].bytes);
  if (rc < 0) {
    dlrt__replace_abort(&r);
    return rc;
  }
  return dlrt__replace_commit(&r);
}

int dlrt_safetensors_save(const char *path, const dlrt_host_tensor *tensors, int n,
                          const char *const *metadata) {
  DLRT__CHECK_ARG(path && *path, "safetensors path is NULL or empty");
  DLRT__CHECK_ARG(n >= 0 && (n == 0 || tensors), "%s: n = %d tensors at %p", path, n,
                  (const void *)tensors);
  int rc = check_tensors(path, tensors, n);
  if (rc == DLRT_OK) rc = check_metadata(path, metadata);
  if (rc < 0) return rc;
  dlrt__text header = {0};
  rc = build_header(path, &header, tensors, n, metadata);
  if (rc == DLRT_OK && header.oom)
    rc = dlrt__set_error(DLRT_ERR_OOM, "%s: out of host memory", path);
  else if (rc == DLRT_OK)
    rc = write_file(path, &header, tensors, n);
  free(header.p);
  return rc;
}

/* ------------------------------------------------------------------ load */

typedef struct {
  st_entry *v;
  int n, cap;
  char **meta; /* key, value, ..., NULL */
  size_t meta_n;
} st_header;

static void header_free(st_header *h) {
  for (size_t i = 0; i < h->meta_n; i++) free(h->meta[i]);
  free(h->meta);
  free(h->v);
}

/* Reads count bytes at offset; a short read means the file shrank under us. */
static int read_at(int fd, const char *path, void *buf, size_t count, uint64_t offset) {
  for (size_t done = 0; done < count;) {
    ssize_t got = pread(fd, (char *)buf + done, count - done, (off_t)(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      return dlrt__set_error(DLRT_ERR_IO, "%s: read failed at byte %llu: %s", path,
                             (unsigned long long)(offset + done), strerror(errno));
    if (got == 0)
      return dlrt__set_error(DLRT_ERR_IO, "%s: truncated: ended at byte %llu while reading "
                             "(did it change while being read?)", path,
                             (unsigned long long)(offset + done));
    done += (size_t)got;
  }
  return DLRT_OK;
}

static int parse_metadata(dlrt__json *js, st_header *h) {
  int rc = dlrt__json_expect(js, '{');
  char *key;
  for (int i = 0; rc == DLRT_OK && (rc = dlrt__json_member(js, i, &key)) == 1; i++) {
    for (size_t j = 0; j < h->meta_n; j += 2)
      if (!strcmp(h->meta[j], key)) {
        free(key);
        return dlrt__json_error(js, "metadata key \"%s\" appears twice", h->meta[j]);
      }
    char **grown = realloc(h->meta, (h->meta_n + 3) * sizeof *grown);
    if (!grown) {
      free(key);
      return dlrt__set_error(DLRT_ERR_OOM, "%s: out of host memory", js->path);
    }
    h->meta = grown;
    h->meta[h->meta_n++] = key;
    h->meta[h->meta_n] = NULL;
    if (dlrt__json_peek(js) != '"')
      return dlrt__json_error(js, "the value of metadata \"%s\" is not a string (the "
                              "format allows only strings there)", key);
    rc = dlrt__json_string(js, &h->meta[h->meta_n], NULL);
    if (rc < 0) return rc;
    h->meta[++h->meta_n] = NULL;
    rc = DLRT_OK;
  }
  return rc < 0 ? rc : DLRT_OK;
}

static int parse_tensor(dlrt__json *js, st_entry *e) {
  const char *name = e->t.name;
  int seen = 0, rc = dlrt__json_expect(js, '{');
  char *key = NULL;
  for (int i = 0; rc == DLRT_OK && (rc = dlrt__json_member(js, i, &key)) == 1; i++) {
    rc = DLRT_OK;
    int field = !strcmp(key, "dtype") ? 1 : !strcmp(key, "shape") ? 2
                : !strcmp(key, "data_offsets") ? 4 : 0;
    if (!field || (seen & field)) {
      rc = dlrt__json_error(js, "tensor \"%s\": %s field \"%s\" (a tensor has dtype, shape "
                            "and data_offsets)", name, field ? "repeated" : "unknown", key);
      break;
    }
    seen |= field;
    free(key);
    key = NULL;
    uint64_t v[DLRT_MAX_DIMS];
    int count;
    if (field == 1) {
      size_t at = js->pos;
      if ((rc = dlrt__json_string(js, &key, NULL)) < 0) break;
      int d = 0;
      while (d < ST_DTYPE_COUNT && strcmp(key, st_dtypes[d].name)) d++;
      if (d == ST_DTYPE_COUNT) {
        js->pos = at;
        rc = dlrt__json_error(js, "tensor \"%s\" has dtype \"%s\", which dlrt does not read "
                              "(it reads F32, F16, BF16, I32 and U8)", name, key);
        break;
      }
      e->t.dtype = st_dtypes[d].dtype;
    } else if (field == 2) {
      if ((rc = dlrt__json_uint_array(js, v, DLRT_MAX_DIMS, &count)) < 0) break;
      if (count > DLRT_MAX_DIMS) {
        rc = dlrt__json_error(js, "tensor \"%s\" has %d dimensions; dlrt holds at most %d",
                              name, count, DLRT_MAX_DIMS);
        break;
      }
      e->t.ndim = count;
      for (int d = 0; d < count; d++) e->t.shape[d] = (int64_t)v[d];
    } else {
      if ((rc = dlrt__json_uint_array(js, v, 2, &count)) < 0) break;
      if (count != 2 || v[0] > v[1]) {
        rc = dlrt__json_error(js, "tensor \"%s\": data_offsets must be [begin, end] with "
                              "begin <= end", name);
        break;
      }
      e->begin = v[0];
      e->end = v[1];
    }
    free(key);
    key = NULL;
  }
  free(key);
  if (rc == 0 && seen != 7)
    rc = dlrt__json_error(js, "tensor \"%s\" lacks %s", name,
                          !(seen & 1) ? "dtype" : !(seen & 2) ? "shape" : "data_offsets");
  return rc < 0 ? rc : DLRT_OK;
}

static int grow(st_header *h) {
  int cap = h->cap ? 2 * h->cap : 16;
  st_entry *v = realloc(h->v, (size_t)cap * sizeof *v);
  if (!v) return -1;
  h->v = v;
  h->cap = cap;
  return 0;
}

static int parse_header(dlrt__json *js, st_header *h) {
  int rc = dlrt__json_expect(js, '{'), has_meta = 0;
  char *key = NULL;
  for (int i = 0; rc == DLRT_OK && (rc = dlrt__json_member(js, i, &key)) == 1; i++) {
    rc = DLRT_OK;
    if (!strcmp(key, "__metadata__")) {
      if (has_meta++) rc = dlrt__json_error(js, "\"__metadata__\" appears twice");
      else rc = parse_metadata(js, h);
    } else if (!*key) {
      /* A tensor is matched to a parameter by name, and a save refuses an
       * empty one: what loads must save again. */
      rc = dlrt__json_error(js, "a tensor has an empty name; name each tensor");
    } else if (strlen(key) >= (size_t)ST_NAME_MAX) {
      rc = dlrt__json_error(js, "tensor name \"%.40s...\" is %zu bytes; dlrt holds names of "
                            "at most %d", key, strlen(key), ST_NAME_MAX - 1);
    } else if (h->n == h->cap && grow(h) < 0) {
      rc = dlrt__set_error(DLRT_ERR_OOM, "%s: out of host memory", js->path);
    } else {
      st_entry *e = &h->v[h->n];
      memset(e, 0, sizeof *e);
      strcpy(e->t.name, key);
      e->index = h->n++;
      rc = parse_tensor(js, e);
    }
    free(key);
    key = NULL;
  }
  if (rc == 0) rc = dlrt__json_end(js);
  return rc;
}

static int by_offset(const void *a, const void *b) {
  const st_entry *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return x->index - y->index;
}

/* Sizes against shapes, then the offsets, sorted, tile [0, data) exactly. */
static int check_layout(const char *path, st_header *h, uint64_t data) {
  const char **names = malloc((size_t)(h->n ? h->n : 1) * sizeof *names);
  if (!names) return dlrt__set_error(DLRT_ERR_OOM, "%s: out of host memory", path);
  for (int i = 0; i < h->n; i++) names[i] = h->v[i].t.name;
  const char *dup = first_duplicate(names, (size_t)h->n);
  int rc = dup ? dlrt__set_error(DLRT_ERR_IO, "%s: corrupt: two tensors are named \"%s\"",
                                 path, dup) : DLRT_OK;
  free(names);
  for (int i = 0; i < h->n && rc == DLRT_OK; i++) {
    st_entry *e = &h->v[i];
    int ok;
    char dims[256];
    size_t need = shape_bytes(e->t.ndim, e->t.shape, dlrt_dtype_size(e->t.dtype), &ok);
    if (!ok || need != e->end - e->begin)
      rc = dlrt__set_error(DLRT_ERR_IO, "%s: corrupt: tensor \"%s\" has data_offsets [%llu, "
                           "%llu] (%llu bytes) but shape %s of %s needs %s%zu", path,
                           e->t.name, (unsigned long long)e->begin,
                           (unsigned long long)e->end,
                           (unsigned long long)(e->end - e->begin),
                           shape_text(e->t.ndim, e->t.shape, dims, sizeof dims),
                           st_dtype_name(e->t.dtype), ok ? "" : "more than ", need);
    e->t.bytes = need;
  }
  if (rc < 0) return rc;
  if (h->n > 1) qsort(h->v, (size_t)h->n, sizeof *h->v, by_offset);
  uint64_t at = 0;
  for (int i = 0; i < h->n; i++) {
    const st_entry *e = &h->v[i];
    if (e->begin < at)
      return dlrt__set_error(DLRT_ERR_IO, "%s: corrupt: tensor \"%s\" at [%llu, %llu] "
                             "overlaps tensor \"%s\", which ends at %llu", path, e->t.name,
                             (unsigned long long)e->begin, (unsigned long long)e->end,
                             h->v[i - 1].t.name, (unsigned long long)at);
    if (e->begin > at)
      return dlrt__set_error(DLRT_ERR_IO, "%s: corrupt: data bytes [%llu, %llu] belong to no "
                             "tensor", path, (unsigned long long)at,
                             (unsigned long long)e->begin);
    at = e->end;
  }
  if (at > data)
    return dlrt__set_error(DLRT_ERR_IO, "%s: truncated: the tensors need %llu bytes of data "
                           "after the header but the file has %llu", path,
                           (unsigned long long)at, (unsigned long long)data);
  if (at < data)
    return dlrt__set_error(DLRT_ERR_IO, "%s: corrupt: the last %llu bytes of the file belong "
                           "to no tensor", path, (unsigned long long)(data - at));
  return DLRT_OK;
}

/* The value of metadata `key` as a CRC-32 (8 hex digits) in *out: 1 when
 * the key is there, 0 when not, or an error. */
static int saved_crc(const char *path, const st_header *h, const char *key, uint32_t *out) {
  for (size_t i = 0; i + 1 < h->meta_n; i += 2) {
    if (strcmp(h->meta[i], key) != 0) continue;
    const char *text = h->meta[i + 1];
    char *end;
    unsigned long want = strtoul(text, &end, 16);
    if (strlen(text) != 8 || *end || !isxdigit((unsigned char)text[0]))
      return dlrt__set_error(DLRT_ERR_IO, "%s: corrupt: metadata \"%s\" is \"%s\", not 8 hex "
                             "digits", path, key, text);
    *out = (uint32_t)want;
    return 1;
  }
  return 0;
}

/* Checks the data and the header against dlrt's CRC-32s where the metadata
 * has them (files of other writers, and of dlrt before the header's
 * checksum, load without), and takes the keys out of the metadata
 * (tensors: in file order). */
static int check_crc(const char *path, st_header *h, const dlrt_host_tensor *tensors) {
  uint32_t want, got;
  int rc = saved_crc(path, h, ST_CRC_KEY, &want);
  if (rc < 0) return rc;
  if (rc == 1 && (got = data_crc(tensors, h->n)) != want)
    return dlrt__set_error(DLRT_ERR_IO, "%s: corrupt: the tensors' bytes do not match the "
                           "CRC-32 saved with them (%08x; the bytes give %08x): the file "
                           "was damaged after it was written; use an earlier copy", path,
                           (unsigned)want, (unsigned)got);
  if ((rc = saved_crc(path, h, ST_HEADER_CRC_KEY, &want)) < 0) return rc;
  if (rc == 1) {
    if ((rc = header_crc(path, (const char *const *)h->meta, h->v, h->n, &got)) < 0) return rc;
    if (got != want)
      return dlrt__set_error(DLRT_ERR_IO, "%s: corrupt: the header (metadata, tensor names, "
                             "dtypes, shapes or offsets) does not match the CRC-32 saved with "
                             "it (%08x; the header gives %08x): the file was damaged or edited "
                             "after it was written; use an earlier copy", path,
                             (unsigned)want, (unsigned)got);
  }
  for (size_t i = 0; i + 1 < h->meta_n;) {
    if (!own_key(h->meta[i])) {
      i += 2;
      continue;
    }
    free(h->meta[i]);
    free(h->meta[i + 1]);
    memmove(h->meta + i, h->meta + i + 2, (h->meta_n - i - 2 + 1) * sizeof *h->meta);
    h->meta_n -= 2;
  }
  return DLRT_OK;
}

int dlrt_safetensors_load(const char *path, dlrt_host_tensor **tensors, int *n,
                          char ***metadata) {
  DLRT__CHECK_ARG(path && tensors && n, "path, tensors or n is NULL");
  *tensors = NULL;
  *n = 0;
  if (metadata) *metadata = NULL;
  st_header h = {0};
  dlrt_host_tensor *out = NULL;
  char *text = NULL;
  unsigned char len8[8];
  struct stat st;
  int got = 0, fd, rc = dlrt__open_regular(path, "a safetensors file", &fd, &st);
  if (rc < 0) return rc;
  uint64_t size = (uint64_t)st.st_size, hlen = 0;
  if (size < 8) {
    rc = dlrt__set_error(DLRT_ERR_IO, "%s: truncated: %llu bytes, shorter than the 8-byte "
                         "header length", path, (unsigned long long)size);
    goto out;
  }
  if ((rc = read_at(fd, path, len8, 8, 0)) < 0) goto out;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
  if (hlen > ST_MAX_HEADER) {
    rc = dlrt__set_error(DLRT_ERR_IO, "%s: corrupt: header length %llu is over the %llu-byte "
                         "limit; the file is damaged or not a safetensors file", path,
                         (unsigned long long)hlen, (unsigned long long)ST_MAX_HEADER);
    goto out;
  }
  if (hlen > size - 8) {
    rc = dlrt__set_error(DLRT_ERR_IO, "%s: truncated: header says %llu bytes but the file "
                         "has %llu after the 8-byte length", path, (unsigned long long)hlen,
                         (unsigned long long)(size - 8));
    goto out;
  }
  if (!(text = malloc(hlen ? hlen : 1))) {
    rc = dlrt__set_error(DLRT_ERR_OOM, "%s: out of host memory for a %llu-byte header", path,
                         (unsigned long long)hlen);
    goto out;
  }
  if ((rc = read_at(fd, path, text, hlen, 8)) < 0) goto out;
  dlrt__json js;
  dlrt__json_init(&js, path, text, hlen);
  if ((rc = parse_header(&js, &h)) < 0) goto out;
  if ((rc = check_layout(path, &h, size - 8 - hlen)) < 0) goto out;
  if (h.n && !(out = calloc((size_t)h.n, sizeof *out))) {
    rc = dlrt__set_error(DLRT_ERR_OOM, "%s: out of host memory", path);
    goto out;
  }
  for (; got < h.n; got++) {
    const st_entry *e = &h.v[got];
    out[got] = e->t;
    if (!(out[got].data = malloc(e->t.bytes ? e->t.bytes : 1))) {
      rc = dlrt__set_error(DLRT_ERR_OOM, "%s: out of host memory for tensor \"%s\" (%zu "
                           "bytes)", path, e->t.name, e->t.bytes);
      goto out;
    }
    rc = read_at(fd, path, out[got].data, e->t.bytes, 8 + hlen + e->begin);
    if (rc < 0) {
      got++;
      goto out;
    }
  }
  if ((rc = check_crc(path, &h, out)) < 0) goto out;
  *tensors = out;
  *n = h.n;
  out = NULL;
  if (metadata) {
    if (!h.meta && !(h.meta = calloc(1, sizeof *h.meta))) {
      dlrt_safetensors_free(*tensors, *n, NULL);
      *tensors = NULL;
      *n = 0;
      rc = dlrt__set_error(DLRT_ERR_OOM, "%s: out of host memory", path);
      goto out;
    }
    *metadata = h.meta;
    h.meta = NULL;
    h.meta_n = 0;
  }
  rc = DLRT_OK;
out:
  dlrt_safetensors_free(out, got, NULL);
  header_free(&h);
  free(text);
  close(fd);
  return rc;
}

void dlrt_safetensors_free(dlrt_host_tensor *tensors, int n, char **metadata) {
  dlrt_host_tensors_free(tensors, n);
  for (size_t i = 0; metadata && metadata[i]; i++) free(metadata[i]);
  free(metadata);
}
