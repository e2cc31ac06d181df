/* json.h — a small, strict JSON reader for the headers of binary files
 * (safetensors): objects, strings and non-negative integers, nothing else
 * (no floats, negatives, booleans or null). It reads in place with a cursor,
 * so the caller checks each value's shape as it goes; every failure is a
 * DLRT_ERR_IO naming the file and the byte where the header went wrong
 * (breaks of JSON's grammar say "invalid JSON"). */
#ifndef DLRT_DATA_JSON_H
#define DLRT_DATA_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

typedef struct {
  const char *path;          /* the file, for messages */
  const unsigned char *text; /* the JSON text, not NUL-terminated */
  size_t len, pos;           /* bytes */
} dlrt__json;

void dlrt__json_init(dlrt__json *js, const char *path, const void *text, size_t len);
/* DLRT_ERR_IO: "<path>: bad header (at byte <pos> of <len>): <what>; ...". */
int dlrt__json_error(const dlrt__json *js, const char *fmt, ...) DLRT__PRINTF(2, 3);
/* Skips whitespace and consumes `c`; otherwise fails saying `c` was expected. */
int dlrt__json_expect(dlrt__json *js, char c);
/* Skips whitespace; the next byte, or -1 at the end of the text. */
int dlrt__json_peek(dlrt__json *js);
/* Inside an object whose '{' was consumed, `index` members read so far: 1 with
 * the next key in *key (malloc'd, the caller frees it) and its ':' consumed;
 * 0 when the closing '}' was consumed; <0 on error. */
int dlrt__json_member(dlrt__json *js, int index, char **key);
/* A string, decoded (escapes, \uXXXX with surrogate pairs) into malloc'd UTF-8
 * with a terminating NUL; *len (may be NULL) gets its length. Raw control
 * characters, invalid UTF-8 and \u0000 are refused. */
int dlrt__json_string(dlrt__json *js, char **out, size_t *len);
/* A non-negative integer without sign, fraction or exponent, at most INT64_MAX. */
int dlrt__json_uint(dlrt__json *js, uint64_t *out);
/* An array of such integers: up to `max` go to out[], *count gets how many the
 * array held (it may exceed `max`; the caller says why that is wrong). */
int dlrt__json_uint_array(dlrt__json *js, uint64_t *out, int max, int *count);
/* Fails unless only whitespace remains. */
int dlrt__json_end(dlrt__json *js);

/* Text being written, grown as needed; after a failed allocation oom is set
 * and later writes do nothing, so a writer checks once at the end. p is
 * NUL-terminated and freed by the caller. */
typedef struct {
  char *p;
  size_t len, cap;
  int oom;
} dlrt__text;

void dlrt__text_put(dlrt__text *t, const char *s, size_t n);
void dlrt__text_printf(dlrt__text *t, const char *fmt, ...) DLRT__PRINTF(2, 3);
/* s as a JSON string: quotes, backslashes and control characters escaped. */
void dlrt__text_json_string(dlrt__text *t, const char *s);

/* 1 when s[0..len) is well-formed UTF-8 (no overlong forms, surrogates or
 * code points past U+10FFFF), else 0. */
int dlrt__utf8_valid(const char *s, size_t len);

#endif
