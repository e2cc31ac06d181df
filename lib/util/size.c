/* size.c — parsing sizes ("256M", "50%") and dtype facts. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "util/status.h"

int dlrt_parse_size(const char *text, uint64_t total, uint64_t *out) {
  DLRT__CHECK_ARG(text && out, "text or out is NULL");
  const char *p = text;
  while (isspace((unsigned char)*p)) p++;
  if (!isdigit((unsigned char)*p) && *p != '.')
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "\"%s\" is not a size: use bytes with "
                           "an optional K, M, G or T suffix (256M) or a percentage (50%%)", text);
  errno = 0;
  char *end;
  double value = strtod(p, &end);
  if (errno || end == p || !isfinite(value) || value < 0)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "\"%s\" is not a size", text);
  double scale = 1;
  switch (toupper((unsigned char)*end)) {
  case 'K': scale = 1024.0; end++; break;
  case 'M': scale = 1024.0 * 1024; end++; break;
  case 'G': scale = 1024.0 * 1024 * 1024; end++; break;
  case 'T': scale = 1024.0 * 1024 * 1024 * 1024; end++; break;
  case '%':
    if (value > 100)
      return dlrt__set_error(DLRT_ERR_INVALID_ARG, "\"%s\": a percentage of device memory "
                             "must be at most 100%%", text);
    scale = (double)total / 100.0;
    end++;
    break;
  default: break;
  }
  /* Accept "256MiB" and "256MB" as well as "256M". */
  if (scale != 1 && end[-1] != '%') {
    if (*end == 'i' || *end == 'I') end++;
    if (*end == 'b' || *end == 'B') end++;
  } else if (scale == 1 && (*end == 'b' || *end == 'B')) {
    end++;
  }
  while (isspace((unsigned char)*end)) end++;
  if (*end)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "\"%s\" is not a size: unknown suffix "
                           "\"%s\" (use K, M, G, T or %%)", text, end);
  double bytes = value * scale;
  if (bytes >= 18446744073709551615.0)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "\"%s\" is too large", text);
  *out = (uint64_t)bytes;
  return DLRT_OK;
}

size_t dlrt_dtype_size(dlrt_dtype dtype) {
  switch (dtype) {
  case DLRT_F32: case DLRT_I32: return 4;
  case DLRT_F16: case DLRT_BF16: return 2;
  case DLRT_U8: return 1;
  }
  return 0;
}

const char *dlrt_dtype_name(dlrt_dtype dtype) {
  switch (dtype) {
  case DLRT_F32: return "f32";
  case DLRT_F16: return "f16";
  case DLRT_BF16: return "bf16";
  case DLRT_I32: return "i32";
  case DLRT_U8: return "u8";
  }
  return "unknown";
}
