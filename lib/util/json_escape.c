/* json_escape.c — JSON strings (json_escape.h). */
#include "config.h"

#include <stdio.h>

#include "util/json_escape.h"

void dlrt__json_write_string(dlrt__json_sink *put, void *sink, const char *s) {
  put(sink, "\"", 1);
  while (*s) {
    size_t plain = 0;
    while (s[plain] && s[plain] != '"' && s[plain] != '\\' && (unsigned char)s[plain] >= 0x20)
      plain++;
    if (plain) put(sink, s, plain);
    s += plain;
    if (!*s) break;
    unsigned char c = (unsigned char)*s++;
    char esc[8];
    if (c == '"' || c == '\\') {
      esc[0] = '\\', esc[1] = (char)c;
      put(sink, esc, 2);
    } else { /* a control byte */
      snprintf(esc, sizeof esc, "\\u%04x", c);
      put(sink, esc, 6);
    }
  }
  put(sink, "\"", 1);
}
