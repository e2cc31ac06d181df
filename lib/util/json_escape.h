/* json_escape.h — the library's one JSON string writer (internal), for every
 * place that writes JSON: the trace's file, lib/train's growing text
 * (checkpoint and safetensors headers). The bytes go to a caller's sink. */
#ifndef DLRT_UTIL_JSON_ESCAPE_H
#define DLRT_UTIL_JSON_ESCAPE_H

#include <stddef.h>

/* Appends bytes[0..n) to sink. */
typedef void dlrt__json_sink(void *sink, const char *bytes, size_t n);

/* Writes s as a JSON string, quotes included: quote and backslash escaped
 * with a backslash, control bytes (below 0x20) as \u00XX, every other byte
 * (UTF-8 included) as it is. A run of plain bytes goes to put in one call. */
void dlrt__json_write_string(dlrt__json_sink *put, void *sink, const char *s);

#endif
