/* json.c — the strict JSON reader declared in json.h (RFC 8259, restricted to
 * objects, strings and non-negative integers), and the text buffer that
 * writes JSON. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/json.h"
#include "util/json_escape.h"

void dlrt__json_init(dlrt__json *js, const char *path, const void *text, size_t len) {
  js->path = path;
  js->text = text;
  js->len = len;
  js->pos = 0;
}

int dlrt__json_error(const dlrt__json *js, const char *fmt, ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return dlrt__set_error(DLRT_ERR_IO, "%s: bad header (at byte %zu of %zu): %s; the file is "
                         "corrupt or not a safetensors file", js->path, js->pos, js->len, what);
}

/* A break of JSON's own grammar, as opposed to a value this reader refuses. */
static int syntax(const dlrt__json *js, const char *what) {
  return dlrt__json_error(js, "invalid JSON, %s", what);
}

int dlrt__json_peek(dlrt__json *js) {
  while (js->pos < js->len) {
    unsigned char c = js->text[js->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return c;
    js->pos++;
  }
  return -1;
}

/* "'x'" for a printable byte, "byte 0x07" otherwise, "the end" at -1. */
static const char *describe(int c, char buf[16]) {
  if (c < 0) return "the end of the header";
  if (c >= 0x20 && c < 0x7f) snprintf(buf, 16, "'%c'", c);
  else snprintf(buf, 16, "byte 0x%02x", (unsigned)c);
  return buf;
}

int dlrt__json_expect(dlrt__json *js, char want) {
  int c = dlrt__json_peek(js);
  if (c != (unsigned char)want) {
    char buf[16];
    return dlrt__json_error(js, "expected '%c' but found %s", want, describe(c, buf));
  }
  js->pos++;
  return DLRT_OK;
}

int dlrt__json_member(dlrt__json *js, int index, char **key) {
  *key = NULL;
  int c = dlrt__json_peek(js);
  if (c == '}') {
    js->pos++;
    return 0;
  }
  if (index > 0) {
    if (c != ',') {
      char buf[16];
      return dlrt__json_error(js, "invalid JSON, expected ',' or '}' but found %s",
                              describe(c, buf));
    }
    js->pos++;
    if (dlrt__json_peek(js) != '"')
      return syntax(js, "expected a key after ',' (no trailing commas)");
  }
  int rc = dlrt__json_string(js, key, NULL);
  if (rc < 0) return rc;
  rc = dlrt__json_expect(js, ':');
  if (rc < 0) {
    free(*key);
    *key = NULL;
    return rc;
  }
  return 1;
}

/* Length of the well-formed UTF-8 sequence at s (at most `avail` bytes), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t avail) {
  unsigned c = s[0], cp;
  size_t n;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) { n = 2; cp = c & 0x1f; }
  else if ((c & 0xf0) == 0xe0) { n = 3; cp = c & 0x0f; }
  else if (c >= 0xf0 && c <= 0xf4) { n = 4; cp = c & 0x07; }
  else return 0;
  if (avail < n) return 0;
  for (size_t i = 1; i < n; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (s[i] & 0x3f);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
      (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return n;
}

int dlrt__utf8_valid(const char *s, size_t len) {
  const unsigned char *p = (const unsigned char *)s;
  for (size_t i = 0; i < len;) {
    size_t n = utf8_seq(p + i, len - i);
    if (!n) return 0;
    i += n;
  }
  return 1;
}

/* Four hex digits at p (avail bytes left) into *out; 0 if malformed. */
static int hex4(const unsigned char *p, size_t avail, unsigned *out) {
  if (avail < 4) return 0;
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    unsigned c = p[i], d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return 0;
    v = v << 4 | d;
  }
  *out = v;
  return 1;
}

static size_t utf8_put(char *o, unsigned cp) {
  if (cp < 0x80) { o[0] = (char)cp; return 1; }
  if (cp < 0x800) {
    o[0] = (char)(0xc0 | cp >> 6);
    o[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xe0 | cp >> 12);
    o[1] = (char)(0x80 | (cp >> 6 & 0x3f));
    o[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  o[0] = (char)(0xf0 | cp >> 18);
  o[1] = (char)(0x80 | (cp >> 12 & 0x3f));
  o[2] = (char)(0x80 | (cp >> 6 & 0x3f));
  o[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

/* The escape whose backslash is at p (`avail` bytes before the closing quote):
 * its UTF-8 into o and *out_len, its raw length into *used; a message on
 * failure, NULL on success. */
static const char *unescape(const unsigned char *p, size_t avail, char *o, size_t *out_len,
                            size_t *used) {
  static const char plain[] = "\"\\/bfnrt", value[] = "\"\\/\b\f\n\r\t";
  if (avail < 2) return "unterminated escape";
  const char *hit = p[1] ? strchr(plain, p[1]) : NULL;
  if (hit) {
    o[0] = value[hit - plain];
    *out_len = 1;
    *used = 2;
    return NULL;
  }
  unsigned cp, lo;
  if (p[1] != 'u') return "unknown escape (JSON has \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)";
  if (!hex4(p + 2, avail - 2, &cp)) return "\\u not followed by four hex digits";
  *used = 6;
  if (cp >= 0xdc00 && cp <= 0xdfff) return "unpaired low surrogate in a \\u escape";
  if (cp >= 0xd800 && cp <= 0xdbff) {
    if (avail < 12 || p[6] != '\\' || p[7] != 'u' || !hex4(p + 8, avail - 8, &lo) ||
        lo < 0xdc00 || lo > 0xdfff)
      return "high surrogate in a \\u escape not followed by a low one";
    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    *used = 12;
  }
  if (cp == 0) return "\\u0000 in a string (names and metadata cannot hold NUL)";
  *out_len = utf8_put(o, cp);
  return NULL;
}

int dlrt__json_string(dlrt__json *js, char **out, size_t *len) {
  *out = NULL;
  int rc = dlrt__json_expect(js, '"');
  if (rc < 0) return rc;
  /* Find the closing quote first: the decoded text is never longer than the
   * raw one (an escape of n bytes decodes to fewer), so one allocation fits. */
  size_t start = js->pos, end = start;
  while (end < js->len && js->text[end] != '"') end += js->text[end] == '\\' ? 2 : 1;
  if (end >= js->len) {
    js->pos = start - 1;
    return syntax(js, "unterminated string");
  }
  char *s = malloc(end - start + 1);
  if (!s) return dlrt__set_error(DLRT_ERR_OOM, "%s: out of host memory", js->path);
  size_t o = 0;
  const char *bad = NULL;
  while (js->pos < end) {
    const unsigned char *p = js->text + js->pos;
    size_t n = 1, put;
    if (*p < 0x20) {
      bad = "raw control character in a string (JSON needs an escape such as \\n)";
      break;
    } else if (*p == '\\') {
      if ((bad = unescape(p, end - js->pos, s + o, &put, &n))) break;
      o += put;
    } else if (!(n = utf8_seq(p, end - js->pos))) {
      bad = "invalid UTF-8 in a string";
      break;
    } else {
      memcpy(s + o, p, n);
      o += n;
    }
    js->pos += n;
  }
  if (bad) {
    free(s);
    return syntax(js, bad);
  }
  js->pos = end + 1;
  s[o] = '\0';
  *out = s;
  if (len) *len = o;
  return DLRT_OK;
}

int dlrt__json_uint(dlrt__json *js, uint64_t *out) {
  int c = dlrt__json_peek(js);
  char buf[16];
  if (c == '-') return dlrt__json_error(js, "negative number where a size or offset belongs");
  if (c < '0' || c > '9')
    return dlrt__json_error(js, "expected a non-negative integer but found %s",
                            describe(c, buf));
  size_t start = js->pos;
  uint64_t v = 0;
  while (js->pos < js->len && js->text[js->pos] >= '0' && js->text[js->pos] <= '9') {
    unsigned d = js->text[js->pos] - '0';
    if (v > ((uint64_t)INT64_MAX - d) / 10) return dlrt__json_error(js, "integer too large");
    v = v * 10 + d;
    js->pos++;
  }
  if (js->text[start] == '0' && js->pos - start > 1) {
    js->pos = start;
    return syntax(js, "number with a leading zero");
  }
  if (js->pos < js->len && strchr(".eE", js->text[js->pos]))
    return dlrt__json_error(js, "not an integer (no fractions or exponents here)");
  *out = v;
  return DLRT_OK;
}

int dlrt__json_uint_array(dlrt__json *js, uint64_t *out, int max, int *count) {
  *count = 0;
  int rc = dlrt__json_expect(js, '[');
  if (rc < 0) return rc;
  if (dlrt__json_peek(js) == ']') {
    js->pos++;
    return DLRT_OK;
  }
  for (;;) {
    uint64_t v;
    if ((rc = dlrt__json_uint(js, &v)) < 0) return rc;
    if (*count < max) out[*count] = v;
    (*count)++;
    int c = dlrt__json_peek(js);
    js->pos++;
    if (c == ']') return DLRT_OK;
    if (c != ',') {
      char buf[16];
      js->pos--;
      return dlrt__json_error(js, "invalid JSON, expected ',' or ']' in an array but "
                              "found %s", describe(c, buf));
    }
  }
}

int dlrt__json_end(dlrt__json *js) {
  char buf[16];
  int c = dlrt__json_peek(js);
  if (c >= 0)
    return dlrt__json_error(js, "invalid JSON, %s after the closing '}' (only spaces may "
                            "pad the header)", describe(c, buf));
  return DLRT_OK;
}

/* ------------------------------------------------------------- writing */

static int reserve(dlrt__text *t, size_t n) {
  if (t->oom) return 0;
  if (t->len + n + 1 <= t->cap) return 1;
  size_t cap = t->cap ? t->cap : 256;
  while (cap < t->len + n + 1) cap *= 2;
  char *p = realloc(t->p, cap);
  if (!p) {
    t->oom = 1;
    return 0;
  }
  t->p = p;
  t->cap = cap;
  return 1;
}

void dlrt__text_put(dlrt__text *t, const char *s, size_t n) {
  if (!reserve(t, n)) return;
  memcpy(t->p + t->len, s, n);
  t->len += n;
  t->p[t->len] = '\0';
}

void dlrt__text_printf(dlrt__text *t, const char *fmt, ...) {
  va_list ap, again;
  va_start(ap, fmt);
  va_copy(again, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  if (n >= 0 && reserve(t, (size_t)n)) {
    vsnprintf(t->p + t->len, (size_t)n + 1, fmt, again);
    t->len += (size_t)n;
  }
  va_end(again);
  va_end(ap);
}

static void text_sink(void *t, const char *bytes, size_t n) { dlrt__text_put(t, bytes, n); }

void dlrt__text_json_string(dlrt__text *t, const char *s) {
  dlrt__json_write_string(text_sink, t, s);
}
