/*
 * test-safetensors.c — checkpoints in the safetensors format
 * (dlrt_safetensors_save, _load, _free): tensors of every dtype, a 0-d
 * scalar and empty tensors round-trip exactly with their metadata; the file
 * is what an independent reader (Python's json, and the safetensors package
 * when it is installed) expects; a save that fails leaves the old file and no
 * temporary file behind; hand-made valid headers load, and every kind of
 * truncated or corrupt file is refused with DLRT_ERR_IO and a message naming
 * the file, and so is one whose data, metadata or tensor names no longer
 * match the CRC-32s saved with them.
 * Points: computed at run time (done_testing).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlrt.h"
#include "tap.h"

#define PATH_CAP 4096

static char root[PATH_CAP / 2]; /* the temporary folder every file goes in */

/* "<root>/<rel>" in one of a few rotating buffers. */
static const char *tmp_path(const char *rel) { return tap_join(root, rel); }

/* Files in root whose name holds ".tmp-": leftovers of a save. */
static int temp_files_left(void) {
  DIR *d = opendir(root);
  int count = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    if (strstr(e->d_name, ".tmp-")) {
      diag("left behind: %s", e->d_name);
      count++;
    }
  if (d) closedir(d);
  return count;
}

/* ------------------------------------------------------------ round trip */

enum { SAMPLE_COUNT = 9 };

typedef struct {
  dlrt_host_tensor t[SAMPLE_COUNT];
  unsigned char store[SAMPLE_COUNT][256];
} samples;

/* Every dtype, odd sizes (so later tensors are unaligned in the file), a
 * scalar, two empty tensors and a UTF-8 name. */
static void make_samples(samples *s) {
  static const struct {
    const char *name;
    dlrt_dtype dtype;
    int ndim;
    int64_t shape[4];
  } spec[SAMPLE_COUNT] = {
      {"layer1.weight", DLRT_F32, 2, {2, 3}},   {"layer1.bias", DLRT_F16, 1, {5}},
      {"emb.bf16", DLRT_BF16, 3, {3, 1, 2}},    {"labels", DLRT_I32, 1, {4}},
      {"pixels", DLRT_U8, 2, {3, 1}},           {"step", DLRT_I32, 0, {0}},
      {"empty", DLRT_F16, 1, {0}},              {"empty.2d", DLRT_F32, 2, {2, 0}},
      {"\xce\xbc.scale", DLRT_BF16, 4, {1, 1, 1, 7}},
  };
  memset(s, 0, sizeof *s);
  for (int i = 0; i < SAMPLE_COUNT; i++) {
    dlrt_host_tensor *t = &s->t[i];
    snprintf(t->name, sizeof t->name, "%s", spec[i].name);
    t->dtype = spec[i].dtype;
    t->ndim = spec[i].ndim;
    size_t count = 1;
    for (int d = 0; d < t->ndim; d++) count *= (size_t)(t->shape[d] = spec[i].shape[d]);
    t->bytes = count * dlrt_dtype_size(t->dtype);
    t->data = s->store[i];
    fill_pattern(t->data, t->bytes, (uint32_t)i + 1);
  }
}

static const char *const sample_meta[] = {
    "format", "pt",
    "note", "quote \" backslash \\ newline \n tab \t control \x01 \xc3\xbc\xe2\x82\xac",
    "empty", "",
    NULL,
};

static int same_tensor(const dlrt_host_tensor *a, const dlrt_host_tensor *b) {
  if (strcmp(a->name, b->name) || a->dtype != b->dtype || a->ndim != b->ndim ||
      a->bytes != b->bytes || !a->data)
    return 0;
  for (int d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d]) return 0;
  return memcmp(a->data, b->data, a->bytes) == 0;
}

static void test_round_trip(const samples *s) {
  const char *path = tmp_path("model.safetensors");
  if (!tap_check(dlrt_safetensors_save(path, s->t, SAMPLE_COUNT, sample_meta),
                 "save %d tensors with metadata", SAMPLE_COUNT))
    return;
  dlrt_host_tensor *t = NULL;
  char **meta = NULL;
  int n = 0;
  if (!tap_check(dlrt_safetensors_load(path, &t, &n, &meta), "load them back")) return;
  if (is_int(n, SAMPLE_COUNT, "as many tensors as were saved"))
    for (int i = 0; i < n; i++)
      ok(same_tensor(&t[i], &s->t[i]), "tensor %d (%s, %s, %d-d, %zu bytes) is exact and in "
         "file order", i, s->t[i].name, dlrt_dtype_name(s->t[i].dtype), s->t[i].ndim,
         s->t[i].bytes);
  int pairs = 0, same = 1;
  for (; meta && meta[2 * pairs]; pairs++)
    if (!sample_meta[2 * pairs] || strcmp(meta[2 * pairs], sample_meta[2 * pairs]) ||
        strcmp(meta[2 * pairs + 1], sample_meta[2 * pairs + 1]))
      same = 0;
  ok(meta && same && pairs == 3, "metadata round-trips, escapes and UTF-8 included");
  dlrt_safetensors_free(t, n, meta);

  t = NULL;
  if (tap_check(dlrt_safetensors_load(path, &t, &n, NULL), "load without metadata"))
    dlrt_safetensors_free(t, n, NULL);

  size_t len = 0;
  unsigned char *bytes = tap_read_file(path, &len);
  uint64_t hlen = 0;
  for (int i = 7; bytes && len >= 8 && i >= 0; i--) hlen = hlen << 8 | bytes[i];
  ok(bytes && len >= 16 && hlen % 8 == 0 && bytes[8] == '{' && hlen < len,
     "header length %llu is a multiple of 8 and the header starts with '{'",
     (unsigned long long)hlen);
  free(bytes);
  struct stat st;
  mode_t mask = umask(0);
  umask(mask);
  is_int(stat(path, &st) == 0 ? (int)(st.st_mode & 0777) : -1, (int)(0666 & ~mask),
         "the file has the mode fopen would give it (0666 less the umask), not 0600");
  ok(temp_files_left() == 0, "no temporary file left after a save");
}

/* Python's json module reads the header, and it describes the data exactly. */
static const char python_check[] =
    "import json, struct, sys\n"
    "b = open(sys.argv[1], 'rb').read()\n"
    "n = struct.unpack('<Q', b[:8])[0]\n"
    "assert n % 8 == 0 and 8 + n <= len(b), 'header length'\n"
    "h = json.loads(b[8:8 + n].decode('utf-8'))\n"
    "meta = h.pop('__metadata__')\n"
    "assert meta['format'] == 'pt' and meta['note'].startswith('quote \"'), meta\n"
    "size = {'F32': 4, 'F16': 2, 'BF16': 2, 'I32': 4, 'U8': 1}\n"
    "spans = []\n"
    "for name, t in h.items():\n"
    "    assert sorted(t) == ['data_offsets', 'dtype', 'shape'], t\n"
    "    count = 1\n"
    "    for d in t['shape']: count *= d\n"
    "    begin, end = t['data_offsets']\n"
    "    assert end - begin == count * size[t['dtype']], name\n"
    "    spans.append((begin, end))\n"
    "at = 0\n"
    "for begin, end in sorted(spans):\n"
    "    assert begin == at, 'gap or overlap'\n"
    "    at = end\n"
    "assert at == len(b) - 8 - n, 'data not covered'\n"
    "assert sorted(h) == sorted(sys.argv[2:]), sorted(h)\n";

/* The reference reader itself, when installed (numpy has no bfloat16, so
 * without torch those tensors are only listed). */
static const char reference_check[] =
    "import sys\n"
    "from safetensors import safe_open\n"
    "try:\n"
    "    import torch; fw = 'pt'\n"
    "except ImportError:\n"
    "    fw = 'np'\n"
    "b = open(sys.argv[1], 'rb').read()\n"
    "n = int.from_bytes(b[:8], 'little')\n"
    "import json; h = json.loads(b[8:8 + n])\n"
    "with safe_open(sys.argv[1], framework=fw) as f:\n"
    "    assert f.metadata()['format'] == 'pt'\n"
    "    assert sorted(f.keys()) == sorted(k for k in h if k != '__metadata__')\n"
    "    for k in f.keys():\n"
    "        if fw == 'np' and h[k]['dtype'] == 'BF16': continue\n"
    "        t = f.get_tensor(k)\n"
    "        begin, end = h[k]['data_offsets']\n"
    "        raw = t.numpy().tobytes() if fw == 'pt' else t.tobytes()\n"
    "        assert list(t.shape) == h[k]['shape'] and raw == b[8 + n + begin:8 + n + end], k\n";

/* A file the reference writer made, for dlrt to read. */
static const char reference_write[] =
    "import sys, numpy as np\n"
    "from safetensors.numpy import save_file\n"
    "save_file({'w': np.arange(6, dtype=np.float32).reshape(2, 3),\n"
    "           'h': np.array([1.5, -2], dtype=np.float16),\n"
    "           'i': np.array(-7, dtype=np.int32),\n"
    "           'u': np.zeros((0, 4), dtype=np.uint8),\n"
    "           'b': np.array([3, 200, 9], dtype=np.uint8)},\n"
    "          sys.argv[1], metadata={'format': 'np'})\n";

static const dlrt_host_tensor *find(const dlrt_host_tensor *t, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(t[i].name, name)) return &t[i];
  return NULL;
}

static int read_reference_file(const char *path) {
  dlrt_host_tensor *t = NULL;
  char **meta = NULL;
  int n = 0;
  if (dlrt_safetensors_load(path, &t, &n, &meta) != DLRT_OK) {
    diag("%s", dlrt_last_error());
    return 0;
  }
  static const float w_want[6] = {0, 1, 2, 3, 4, 5};
  static const uint16_t h_want[2] = {0x3e00, 0xc000}; /* 1.5, -2 */
  static const int32_t i_want = -7;
  const dlrt_host_tensor *w = find(t, n, "w"), *h = find(t, n, "h"), *i = find(t, n, "i"),
                         *u = find(t, n, "u"), *b = find(t, n, "b");
  int good = n == 5 && w && h && i && u && b && meta && meta[0] &&
             !strcmp(meta[0], "format") && !strcmp(meta[1], "np") &&
             w->dtype == DLRT_F32 && w->ndim == 2 && w->shape[0] == 2 && w->shape[1] == 3 &&
             !memcmp(w->data, w_want, sizeof w_want) &&
             h->dtype == DLRT_F16 && h->bytes == 4 && !memcmp(h->data, h_want, 4) &&
             i->dtype == DLRT_I32 && i->ndim == 0 && !memcmp(i->data, &i_want, 4) &&
             u->dtype == DLRT_U8 && u->ndim == 2 && u->bytes == 0 && u->shape[1] == 4 &&
             b->bytes == 3 && !memcmp(b->data, "\x03\xc8\x09", 3);
  dlrt_safetensors_free(t, n, meta);
  return good;
}

static void test_python(const samples *s) {
  if (system("python3 -c 'import json' >/dev/null 2>&1") != 0) {
    skip(3, "python3 is not installed");
    return;
  }
  char cmd[PATH_CAP * 2];
  const char *script = tmp_path("check.py"), *path = tmp_path("model.safetensors");
  tap_write_file(script, python_check, sizeof python_check - 1);
  int used = snprintf(cmd, sizeof cmd, "python3 '%s' '%s'", script, path);
  for (int i = 0; i < SAMPLE_COUNT; i++)
    used += snprintf(cmd + used, sizeof cmd - (size_t)used, " '%s'", s->t[i].name);
  is_int(system(cmd), 0, "python3's json reads the header and it describes the data");

  if (system("python3 -c 'import safetensors, numpy' >/dev/null 2>&1") != 0) {
    skip(2, "python3 has no safetensors package (with numpy or torch)");
  } else {
    tap_write_file(script, reference_check, sizeof reference_check - 1);
    snprintf(cmd, sizeof cmd, "python3 '%s' '%s'", script, path);
    is_int(system(cmd), 0, "Hugging Face's safetensors reads the file and its data");
    const char *ref = tmp_path("reference.safetensors");
    tap_write_file(script, reference_write, sizeof reference_write - 1);
    snprintf(cmd, sizeof cmd, "python3 '%s' '%s'", script, ref);
    ok(system(cmd) == 0 && read_reference_file(ref),
       "dlrt reads what Hugging Face's safetensors wrote (0-d, empty, F16, metadata)");
  }
  remove(script);
}

/* --------------------------------------------------------- failed saves */

static void expect_save_fails(const char *path, const dlrt_host_tensor *t, int n,
                              const char *const *meta, int want, const char *what) {
  is_status(dlrt_safetensors_save(path, t, n, meta), want, "save refuses %s", what);
}

static void test_failed_saves(const samples *s) {
  const char *path = tmp_path("keep.safetensors");
  if (!tap_check(dlrt_safetensors_save(path, s->t, 2, NULL), "save a file to keep")) return;
  size_t before_len = 0, after_len = 0;
  unsigned char *before = tap_read_file(path, &before_len);

  dlrt_host_tensor bad[2];
  memcpy(bad, s->t, sizeof bad);
  bad[1].bytes += 2;
  expect_save_fails(path, bad, 2, NULL, DLRT_ERR_INVALID_ARG, "bytes that do not match shape");
  ok(strstr(dlrt_last_error(), path) && strstr(dlrt_last_error(), bad[1].name),
     "the message names the file and the tensor");
  memcpy(bad, s->t, sizeof bad);
  strcpy(bad[1].name, bad[0].name);
  expect_save_fails(path, bad, 2, NULL, DLRT_ERR_INVALID_ARG, "two tensors of one name");
  memcpy(bad, s->t, sizeof bad);
  bad[0].name[0] = '\0';
  expect_save_fails(path, bad, 2, NULL, DLRT_ERR_INVALID_ARG, "an empty name");
  strcpy(bad[0].name, "a\"b");
  expect_save_fails(path, bad, 1, NULL, DLRT_ERR_INVALID_ARG, "a quote in a name");
  strcpy(bad[0].name, "a\nb");
  expect_save_fails(path, bad, 1, NULL, DLRT_ERR_INVALID_ARG, "a newline in a name");
  memset(bad[0].name, 'x', sizeof bad[0].name);
  expect_save_fails(path, bad, 1, NULL, DLRT_ERR_INVALID_ARG, "an unterminated name");
  memcpy(bad, s->t, sizeof bad);
  bad[0].ndim = DLRT_MAX_DIMS + 1;
  expect_save_fails(path, bad, 1, NULL, DLRT_ERR_INVALID_ARG, "ndim past DLRT_MAX_DIMS");
  memcpy(bad, s->t, sizeof bad);
  bad[0].data = NULL;
  expect_save_fails(path, bad, 1, NULL, DLRT_ERR_INVALID_ARG, "NULL data");
  static const char *const dup_meta[] = {"k", "1", "k", "2", NULL};
  expect_save_fails(path, s->t, 1, dup_meta, DLRT_ERR_INVALID_ARG, "a repeated metadata key");
  static const char *const odd_meta[] = {"k", NULL};
  expect_save_fails(path, s->t, 1, odd_meta, DLRT_ERR_INVALID_ARG, "a key without a value");

  expect_save_fails(tmp_path("no/such/folder/x.safetensors"), s->t, 1, NULL, DLRT_ERR_IO,
                    "a folder that does not exist");
  ok(strstr(dlrt_last_error(), "no/such/folder/x.safetensors") != NULL,
     "the message names the path: %s", dlrt_last_error());
  expect_save_fails(tmp_path("keep.safetensors/x.safetensors"), s->t, 1, NULL, DLRT_ERR_IO,
                    "a path under a regular file");
  /* Refused before anything is written (test-save-target covers the other
   * kinds of file). */
  const char *dir = tmp_path("a-folder.safetensors");
  mkdir(dir, 0755);
  tap_write_file(tmp_path("a-folder.safetensors/inside"), "x", 1);
  expect_save_fails(dir, s->t, 2, NULL, DLRT_ERR_INVALID_ARG, "replacing a folder");
  struct stat st;
  ok(stat(tmp_path("a-folder.safetensors/inside"), &st) == 0, "the folder is untouched");

  if (geteuid() == 0) {
    skip(2, "running as root: a read-only folder does not stop root");
  } else {
    const char *ro = tmp_path("read-only"), *ro_file = tmp_path("read-only/m.safetensors");
    mkdir(ro, 0755);
    tap_write_file(ro_file, "old", 3);
    chmod(ro, 0555);
    expect_save_fails(ro_file, s->t, 2, NULL, DLRT_ERR_IO, "a read-only folder");
    size_t len = 0;
    unsigned char *old = tap_read_file(ro_file, &len);
    ok(old && len == 3 && !memcmp(old, "old", 3), "the file in it is untouched");
    free(old);
    chmod(ro, 0755);
  }

  unsigned char *after = tap_read_file(path, &after_len);
  ok(before && after && before_len == after_len && !memcmp(before, after, before_len),
     "after every failed save the file holds what the good save wrote");
  free(before);
  free(after);
  ok(temp_files_left() == 0, "no temporary file left after failed saves");
}

/* -------------------------------------------------------- hand-made files */

/* A file of an 8-byte length, the header text as given and `data`. */
static void write_st(const char *path, const char *header, const void *data, size_t len) {
  size_t hlen = strlen(header);
  unsigned char *buf = malloc(8 + hlen + len + 1);
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
  memcpy(buf + 8, header, hlen);
  if (len) memcpy(buf + 8 + hlen, data, len);
  tap_write_file(path, buf, 8 + hlen + len);
  free(buf);
}

static void test_valid_headers(void) {
  const char *path = tmp_path("hand.safetensors");
  static const unsigned char data[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  /* Whitespace, keys in another order, escapes, a surrogate pair, the
   * tensors listed out of their data order, an empty tensor at the end. */
  write_st(path,
           " {\n \"b\\u00e9\\ud83d\\ude00\" : {\"shape\":[1], \"data_offsets\" : [8,12],"
           "\"dtype\":\"I32\"} ,\"a\\/\\\"q\":{\"dtype\":\"BF16\",\"shape\":[2,2],"
           "\"data_offsets\":[0,8]},\"z\":{\"dtype\":\"U8\",\"shape\":[0,3],"
           "\"data_offsets\":[12,12]},\"__metadata__\":{\"k\\n\":\"v\\t\"}}\r\n   ",
           data, sizeof data);
  dlrt_host_tensor *t = NULL;
  char **meta = NULL;
  int n = 0;
  if (!tap_check(dlrt_safetensors_load(path, &t, &n, &meta), "a hand-written header loads"))
    return;
  ok(n == 3 && !strcmp(t[0].name, "a/\"q") && !strcmp(t[1].name, "b\xc3\xa9\xf0\x9f\x98\x80") &&
         !strcmp(t[2].name, "z"), "escapes decode and tensors come in data order");
  ok(n == 3 && t[0].dtype == DLRT_BF16 && t[0].bytes == 8 && !memcmp(t[0].data, data, 8) &&
         t[1].dtype == DLRT_I32 && t[1].ndim == 1 && !memcmp(t[1].data, data + 8, 4) &&
         t[2].bytes == 0 && t[2].ndim == 2 && t[2].shape[1] == 3 && t[2].data,
     "dtypes, shapes and data are read");
  ok(meta && meta[0] && !strcmp(meta[0], "k\n") && !strcmp(meta[1], "v\t") && !meta[2],
     "metadata is read");
  dlrt_safetensors_free(t, n, meta);

  write_st(path, "{}", NULL, 0);
  t = NULL;
  meta = NULL;
  if (tap_check(dlrt_safetensors_load(path, &t, &n, &meta), "a file of no tensors loads")) {
    ok(n == 0 && meta && !meta[0], "zero tensors and an empty metadata list");
    dlrt_safetensors_free(t, n, meta);
  }
  dlrt_safetensors_free(NULL, 0, NULL);
  ok(1, "dlrt_safetensors_free(NULL, 0, NULL) is a no-op");
}

/* ------------------------------------------------------------ bad files */

static void expect_corrupt(const char *path, const char *what, const char *word) {
  dlrt_host_tensor *t = (dlrt_host_tensor *)&t;
  char **meta = (char **)&meta;
  int n = -1;
  int rc = dlrt_safetensors_load(path, &t, &n, &meta);
  const char *msg = dlrt_last_error();
  is_status(rc, DLRT_ERR_IO, "%s is refused", what);
  ok(strstr(msg, path) && (!word || strstr(msg, word)) && !t && n == 0 && !meta,
     "%s: nothing returned, the message names the file%s%s", what, word ? " and says " : "",
     word ? word : "");
  diag("%s", msg);
  if (rc == DLRT_OK) dlrt_safetensors_free(t, n, meta);
}

static void test_truncated(void) {
  const char *good = tmp_path("model.safetensors"), *path = tmp_path("cut.safetensors");
  size_t len = 0;
  unsigned char *bytes = tap_read_file(good, &len);
  if (!bytes || len < 40) {
    skip(1, "no saved file to cut");
    free(bytes);
    return;
  }
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | bytes[i];
  const struct {
    size_t keep;
    const char *what;
  } cuts[] = {
      {0, "an empty file"},
      {5, "a file cut inside the header length"},
      {8 + (size_t)hlen / 2, "a file cut inside the header"},
      {8 + (size_t)hlen + 1, "a file cut at the start of the data"},
      {len - 1, "a file missing its last byte"},
  };
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    tap_write_file(path, bytes, cuts[i].keep);
    expect_corrupt(path, cuts[i].what, "truncated");
  }
  memset(bytes, 0, 8);
  bytes[7] = 0x40; /* 2^62 */
  tap_write_file(path, bytes, len);
  expect_corrupt(path, "a header length of 2^62", "limit");
  free(bytes);
  is_status(dlrt_safetensors_load(tmp_path("missing.safetensors"), &(dlrt_host_tensor *){0},
                                  &(int){0}, NULL),
            DLRT_ERR_NOT_FOUND, "a missing file is DLRT_ERR_NOT_FOUND");
}

static void test_corrupt(void) {
  const char *path = tmp_path("bad.safetensors");
  static const unsigned char data[16] = {0};
  static const struct {
    const char *header;
    size_t data;
    const char *what, *word;
  } cases[] = {
      {"garbage!", 16, "garbage instead of JSON", "expected '{'"},
      {"{\"\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16,
       "an empty tensor name (which no save writes)", "empty name"},
      {"[1, 2]", 16, "an array instead of an object", "expected '{'"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},}", 16,
       "a trailing comma", "JSON"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}", 16,
       "a missing '}'", "JSON"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}} x", 16,
       "text after the object", "JSON"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4.0],\"data_offsets\":[0,16]}}", 16,
       "a fraction in a shape", "integer"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-4],\"data_offsets\":[0,16]}}", 16,
       "a negative dimension", "negative"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[04],\"data_offsets\":[0,16]}}", 16,
       "a leading zero", "JSON"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,99999999999999999999]}}",
       16, "an offset past 2^63", "too large"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16],\"x\":[1]}}", 16,
       "an unknown field", "unknown field"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4]}}", 16, "a missing data_offsets", "lacks"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16],\"dtype\":\"F32\"}}",
       16, "a repeated field", "repeated"},
      {"{\"a\":{\"dtype\":true,\"shape\":[4],\"data_offsets\":[0,16]}}", 16,
       "a boolean", "expected '\"'"},
      {"{\"a\\q\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16,
       "an unknown escape", "escape"},
      {"{\"a\\ud800\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16,
       "a lone surrogate", "surrogate"},
      {"{\"a\\u0000\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16,
       "a \\u0000 in a name", "NUL"},
      {"{\"a\xff\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16,
       "invalid UTF-8", "UTF-8"},
      {"{\"a\tb\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16,
       "a raw tab in a string", "control"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]", 16,
       "an unterminated header", "JSON"},
      {"{\"a", 16, "an unterminated string", "unterminated"},
      {"{\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 16,
       "dtype F64 (valid safetensors, not for dlrt)", "F64"},
      {"{\"a\":{\"dtype\":\"Q4\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16,
       "an unknown dtype", "Q4"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}", 16,
       "offsets that do not match the shape", "needs"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,2,3,4,5,6,7,8,9],\"data_offsets\":[0,16]}}", 16,
       "nine dimensions", "at most"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,0]}}", 16,
       "offsets that end before they begin", "begin"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
       "overlapping offsets", "overlaps"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
       "two tensors on the same bytes", "overlaps"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}", 16,
       "a gap between tensors", "no tensor"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 16,
       "bytes after the last tensor", "no tensor"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]}}", 16,
       "a tensor past the end of the file", "truncated"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16,
       "two tensors of one name", "two tensors"},
      {"{\"__metadata__\":{\"k\":1}}", 0, "a metadata value that is not a string", "string"},
      {"{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0, "a repeated metadata key", "twice"},
      {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, "two __metadata__ objects", "twice"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    write_st(path, cases[i].header, data, cases[i].data);
    expect_corrupt(path, cases[i].what, cases[i].word);
  }
  /* A name one byte longer than dlrt_host_tensor holds. */
  char header[512], name[sizeof ((dlrt_host_tensor *)0)->name + 1];
  memset(name, 'x', sizeof name - 1);
  name[sizeof name - 1] = '\0';
  snprintf(header, sizeof header, "{\"%s\":{\"dtype\":\"U8\",\"shape\":[16],"
           "\"data_offsets\":[0,16]}}", name);
  write_st(path, header, data, 16);
  expect_corrupt(path, "a name of 128 bytes", "at most");
  /* The header length says more than the file holds. */
  unsigned char shorty[8 + 2] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
  tap_write_file(path, shorty, sizeof shorty);
  expect_corrupt(path, "a header length past the end of the file", "truncated");
  const char *dir = tmp_path("a-folder.safetensors");
  expect_corrupt(dir, "a folder", "regular file");
}

/* dlrt's CRC-32 of the data ("dlrt.crc32" metadata): written with every
 * file, checked on load, kept out of the metadata handed back; a bit flipped
 * in a weight after the save is refused. */
static void test_checksum(const samples *s) {
  const char *path = tmp_path("crc.safetensors");
  if (!tap_check(dlrt_safetensors_save(path, s->t, SAMPLE_COUNT, sample_meta),
                 "save a file with its checksum"))
    return;
  size_t len = 0;
  unsigned char *bytes = tap_read_file(path, &len);
  uint64_t hlen = 0;
  for (int i = 7; bytes && len >= 8 && i >= 0; i--) hlen = hlen << 8 | bytes[i];
  char *header = bytes && hlen < len ? strndup((const char *)bytes + 8, hlen) : NULL;
  ok(header && strstr(header, "\"dlrt.crc32\":\""), "the header carries \"dlrt.crc32\"");
  ok(header && strstr(header, "\"dlrt.header_crc32\":\""),
     "and \"dlrt.header_crc32\"");
  /* Edits in place that keep the header valid JSON of the same length. */
  char *value = header ? strstr(header, "\"format\":\"pt\"") : NULL;
  char *name = header ? strstr(header, "\"layer1.bias\"") : NULL;
  if (ok(value && name, "the header holds metadata \"format\" and tensor \"layer1.bias\"")) {
    unsigned char *edited = malloc(len);
    memcpy(edited, bytes, len);
    edited[8 + (value - header) + 10] = 'q'; /* "pt" -> "qt" */
    tap_write_file(path, edited, len);
    expect_corrupt(path, "a metadata value edited after the save", "CRC-32");
    memcpy(edited, bytes, len);
    edited[8 + (name - header) + 7] = 'X'; /* "layer1.bias" -> "layer1.Xias" */
    tap_write_file(path, edited, len);
    expect_corrupt(path, "a tensor renamed after the save", "CRC-32");
    free(edited);
  }
  free(header);
  if (bytes && len > hlen + 8) {
    bytes[len - 1] ^= 0x10; /* one bit of the last tensor's last byte */
    tap_write_file(path, bytes, len);
    expect_corrupt(path, "a bit flipped in the data after the save", "CRC-32");
  }
  free(bytes);
  /* A caller's own "dlrt.crc32" and "dlrt.header_crc32" are replaced by
   * the real ones. */
  const char *stale[] = {"dlrt.crc32", "00000000", "note", "kept", "dlrt.header_crc32",
                         "00000000", NULL};
  dlrt_host_tensor *t = NULL;
  char **meta = NULL;
  int n = 0;
  if (tap_check(dlrt_safetensors_save(path, s->t, SAMPLE_COUNT, stale),
                "save with a stale \"dlrt.crc32\" and header CRC of the caller's") &&
      tap_check(dlrt_safetensors_load(path, &t, &n, &meta), "it loads: the key was rewritten")) {
    ok(meta && meta[0] && !strcmp(meta[0], "note") && !meta[2],
       "the metadata handed back has the caller's keys only");
    dlrt_safetensors_free(t, n, meta);
  }
  static const char bad_crc[] =
      "{\"__metadata__\":{\"dlrt.crc32\":\"xyz\"},\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
      "\"data_offsets\":[0,4]}}";
  const float one = 1.0f;
  write_st(tmp_path("badcrc.safetensors"), bad_crc, &one, sizeof one);
  expect_corrupt(tmp_path("badcrc.safetensors"), "a checksum that is not 8 hex digits", "hex");
}

int main(void) {
  tap_tempdir("dlrt-safetensors", root, sizeof root);
  diag("files in %s", root);

  samples s;
  make_samples(&s);
  test_round_trip(&s);
  test_python(&s);
  test_failed_saves(&s);
  test_valid_headers();
  test_truncated();
  test_corrupt();
  test_checksum(&s);
  ok(temp_files_left() == 0, "no temporary file left at the end");

  tap_remove_tree(root);
  return done_testing();
}
