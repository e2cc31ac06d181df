/* tokens.c — token streams for language models (dlrt_tokens, data.h): llm.c's
 * token files (a 1024-byte header of int32, then uint16 tokens), text files
 * and folders of them as byte tokens, the validation split, and writing a
 * token file. Every file is opened through util/file.h (a FIFO or device is
 * refused at once) and written through util/replace.h (atomically, only over
 * a regular file). */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlrt.h"
#include "util/file.h"
#include "util/replace.h"
#include "util/status.h"

enum { HEADER_INTS = 256, HEADER_BYTES = HEADER_INTS * 4 };

void dlrt_tokens_free(dlrt_tokens *t) {
  if (!t) return;
  free(t->tokens);
  memset(t, 0, sizeof *t);
}

static uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Reads all of fd (st_size bytes) into a new buffer. */
static int read_whole(int fd, const char *path, const struct stat *st, unsigned char **out) {
  size_t size = (size_t)st->st_size, done = 0;
  unsigned char *buf = malloc(size ? size : 1);
  if (!buf) return dlrt__set_error(DLRT_ERR_OOM, "%s: no host memory for %zu bytes", path, size);
  while (done < size) {
    ssize_t got = read(fd, buf + done, size - done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      free(buf);
      return dlrt__set_error(DLRT_ERR_IO, "%s: %s after %zu of %zu bytes", path,
                             got < 0 ? strerror(errno) : "the file ended", done, size);
    }
    done += (size_t)got;
  }
  *out = buf;
  return DLRT_OK;
}

/* An llm.c token file: the header, checked against the file's size, then
 * the tokens. */
static int parse_token_file(const char *path, const unsigned char *b, size_t size,
                            dlrt_tokens *out) {
  uint32_t version = le32(b + 4), count = le32(b + 8);
  if (version != DLRT_TOKENS_VERSION)
    return dlrt__set_error(DLRT_ERR_IO, "%s: token file version %u; dlrt reads version %d "
                           "(llm.c's uint16 tokens)", path, version, DLRT_TOKENS_VERSION);
  if (count > INT32_MAX || size != HEADER_BYTES + 2 * (size_t)count)
    return dlrt__set_error(DLRT_ERR_IO, "%s: the header says %u tokens, which take %zu "
                           "bytes, but the file has %zu: it is truncated or corrupt; "
                           "prepare it again", path, count,
                           (size_t)HEADER_BYTES + 2 * (size_t)count, size);
  if (count == 0)
    return dlrt__set_error(DLRT_ERR_IO, "%s: the token file holds no tokens", path);
  out->tokens = malloc((size_t)count * sizeof *out->tokens);
  if (!out->tokens) return dlrt__set_error(DLRT_ERR_OOM, "%s: no host memory", path);
  int top = 0;
  for (uint32_t i = 0; i < count; i++) {
    const unsigned char *p = b + HEADER_BYTES + 2 * (size_t)i;
    out->tokens[i] = (uint16_t)(p[0] | p[1] << 8);
    if (out->tokens[i] > top) top = out->tokens[i];
  }
  out->count = count;
  out->vocab = top + 1;
  return DLRT_OK;
}

/* Appends `n` bytes as byte tokens. */
static int append_bytes(dlrt_tokens *t, const unsigned char *b, size_t n, const char *path) {
  uint16_t *grown = realloc(t->tokens, ((size_t)t->count + n + 1) * sizeof *grown);
  if (!grown) return dlrt__set_error(DLRT_ERR_OOM, "%s: no host memory", path);
  t->tokens = grown;
  for (size_t i = 0; i < n; i++) grown[t->count + (int64_t)i] = b[i];
  t->count += (int64_t)n;
  return DLRT_OK;
}

static int load_file(const char *path, dlrt_tokens *out) {
  int fd;
  struct stat st;
  int rc = dlrt__open_regular(path, "the token or text file", &fd, &st);
  if (rc < 0) return rc;
  unsigned char *b = NULL;
  rc = read_whole(fd, path, &st, &b);
  close(fd);
  if (rc < 0) return rc;
  size_t size = (size_t)st.st_size;
  if (size >= HEADER_BYTES && le32(b) == DLRT_TOKENS_MAGIC) {
    rc = parse_token_file(path, b, size, out);
  } else if (size == 0) {
    rc = dlrt__set_error(DLRT_ERR_IO, "%s: the file is empty: no text to train on", path);
  } else {
    rc = append_bytes(out, b, size, path);
    out->vocab = 256;
  }
  free(b);
  if (rc == DLRT_OK) out->files = 1;
  return rc;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int load_folder(const char *path, dlrt_tokens *out) {
  DIR *dir = opendir(path);
  if (!dir) return dlrt__set_error(DLRT_ERR_IO, "cannot open the folder %s: %s", path,
                                   strerror(errno));
  char **names = NULL;
  size_t n = 0, cap = 0;
  int rc = DLRT_OK;
  for (struct dirent *e; rc == DLRT_OK && (e = readdir(dir));) {
    if (e->d_name[0] == '.') continue;
    if (n == cap) {
      char **grown = realloc(names, (cap = cap ? 2 * cap : 64) * sizeof *names);
      if (!grown) rc = dlrt__set_error(DLRT_ERR_OOM, "%s: no host memory", path);
      else names = grown;
    }
    if (rc == DLRT_OK && !(names[n++] = strdup(e->d_name)))
      rc = dlrt__set_error(DLRT_ERR_OOM, "%s: no host memory", path);
  }
  closedir(dir);
  if (rc == DLRT_OK && n) qsort(names, n, sizeof *names, by_name);
  out->vocab = 256;
  /* The files read, by (device, inode): a second name of one (a link, such
   * as Debian's fortunes' NAME.u8 -> NAME) is read once, at its first name. */
  struct stat *seen = calloc(n ? n : 1, sizeof *seen);
  size_t n_seen = 0;
  if (!seen) rc = dlrt__set_error(DLRT_ERR_OOM, "%s: no host memory", path);
  for (size_t i = 0; rc == DLRT_OK && i < n; i++) {
    char file[4096];
    if (snprintf(file, sizeof file, "%s/%s", path, names[i]) >= (int)sizeof file) continue;
    struct stat st;
    /* Only the top level's regular files: a FIFO or device is skipped, never
     * opened (it could block). */
    if (stat(file, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) continue;
    int again = 0;
    for (size_t k = 0; k < n_seen && !again; k++)
      again = seen[k].st_dev == st.st_dev && seen[k].st_ino == st.st_ino;
    if (again) continue;
    seen[n_seen++] = st;
    int fd = dlrt__open_regular_fd(file, &st);
    if (fd < 0) continue;
    unsigned char *b = NULL;
    rc = read_whole(fd, file, &st, &b);
    close(fd);
    if (rc < 0) break;
    if (!memchr(b, 0, (size_t)st.st_size)) { /* a NUL byte: not text */
      rc = append_bytes(out, b, (size_t)st.st_size, file);
      out->files++;
    }
    free(b);
  }
  free(seen);
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
  if (rc == DLRT_OK && out->count == 0)
    rc = dlrt__set_error(DLRT_ERR_IO, "%s: no text file in the folder (top-level regular "
                         "files without NUL bytes are read)", path);
  return rc;
}

int dlrt_tokens_load(const char *path, dlrt_tokens *out) {
  DLRT__CHECK_ARG(out, "dlrt_tokens_load: out is NULL");
  memset(out, 0, sizeof *out);
  DLRT__CHECK_ARG(path && *path, "dlrt_tokens_load: give a token file, a text file or a folder");
  snprintf(out->source, sizeof out->source, "%s", path);
  struct stat st;
  int rc = stat(path, &st) == 0 && S_ISDIR(st.st_mode) ? load_folder(path, out)
                                                       : load_file(path, out);
  if (rc < 0) {
    dlrt_tokens_free(out);
    return rc;
  }
  return DLRT_OK;
}

int dlrt_tokens_split(const dlrt_tokens *all, int validation, dlrt_tokens *out) {
  DLRT__CHECK_ARG(all && out && all->tokens, "dlrt_tokens_split: all or out is NULL");
  DLRT__CHECK_ARG(all->count >= 2, "%s: %lld token(s): a validation split needs two or more",
                  all->source, (long long)all->count);
  int64_t held = all->count / 10 > 0 ? all->count / 10 : 1, first = all->count - held;
  int64_t from = validation ? first : 0, count = validation ? held : first;
  dlrt_tokens t = *all;
  t.tokens = malloc((size_t)count * sizeof *t.tokens);
  if (!t.tokens) return dlrt__set_error(DLRT_ERR_OOM, "%s: no host memory", all->source);
  memcpy(t.tokens, all->tokens + from, (size_t)count * sizeof *t.tokens);
  t.count = count;
  *out = t;
  return DLRT_OK;
}

int dlrt_tokens_save(const char *path, const dlrt_tokens *t) {
  DLRT__CHECK_ARG(path && t && (t->tokens || !t->count), "dlrt_tokens_save: path or t is NULL");
  DLRT__CHECK_ARG(t->count > 0 && t->count <= INT32_MAX,
                  "%s: %lld tokens: a token file holds 1 to 2^31 - 1 (llm.c's int32 count); "
                  "split the stream into shards", path, (long long)t->count);
  unsigned char header[HEADER_BYTES] = {0};
  const uint32_t fields[3] = {DLRT_TOKENS_MAGIC, DLRT_TOKENS_VERSION, (uint32_t)t->count};
  for (int f = 0; f < 3; f++)
    for (int k = 0; k < 4; k++) header[4 * f + k] = (unsigned char)(fields[f] >> (8 * k));
  unsigned char *body = malloc((size_t)t->count * 2);
  if (!body) return dlrt__set_error(DLRT_ERR_OOM, "%s: no host memory", path);
  for (int64_t i = 0; i < t->count; i++) {
    body[2 * i] = (unsigned char)(t->tokens[i] & 0xff);
    body[2 * i + 1] = (unsigned char)(t->tokens[i] >> 8);
  }
  dlrt__replace r;
  int rc = dlrt__replace_open(&r, path);
  if (rc == DLRT_OK) {
    rc = dlrt__write_all(r.fd, path, header, sizeof header);
    if (rc == DLRT_OK) rc = dlrt__write_all(r.fd, path, body, (size_t)t->count * 2);
    if (rc == DLRT_OK) rc = dlrt__replace_commit(&r);
    else dlrt__replace_abort(&r);
  }
  free(body);
  return rc;
}
