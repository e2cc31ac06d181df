/* link_model.c — the host link model's presets, its spec, and its
 * arithmetic (link_model.h); the model on a device is link.c. */
#include "config.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "device/link_model.h"
#include "util/status.h"

/* ---------------------------------------------------------------- presets */

/* What large GEMMs reach of a tensor core's dense peak: the ratio presets
 * compare it with this device's measured GEMM rate, an achieved figure too.
 * 0.8 of the H200's 989.4 TFLOP/s is the 790 TFLOP/s issue 20 quotes. */
#define ACHIEVED 0.8

#define T 1e12 /* FLOP/s */
#define G 1e9  /* B/s */
#define US 1e-6

/* README.md's "The host link" lists each with its sources: keep the two
 * together. Peaks are dense bf16 (half the datasheets' "with sparsity"
 * figures); link rates are per direction; achievable PCIe rates are what
 * cudaMemcpy from pinned memory reaches (about 55 of 64 GB/s on PCIe 5.0 x16,
 * 25 of 32 on PCIe 4.0); for NVLink-C2C the PCIe 5.0 fraction (86%) of its
 * 450 GB/s. The latency is that of a small asynchronous copy. */
#define PRESET(name, about, peak_tflops, link_peak_gbs, link_gbs, latency_us)                  \
  {name, about, (peak_tflops) * T, ACHIEVED * (peak_tflops) * T, (link_peak_gbs) * G,          \
   (link_gbs) * G, (latency_us) * US, ACHIEVED * (peak_tflops) * T / ((link_gbs) * G)}
static const dlrt_link_preset presets[] = {
    PRESET("h200-pcie5", "NVIDIA H200 SXM on PCIe 5.0 x16", 989.4, 64, 55, 10),
    PRESET("h100-pcie5", "NVIDIA H100 PCIe on PCIe 5.0 x16", 756.0, 64, 55, 10),
    PRESET("a100-pcie4", "NVIDIA A100 on PCIe 4.0 x16", 312.0, 32, 25, 10),
    PRESET("l40s-pcie4", "NVIDIA L40S on PCIe 4.0 x16", 362.05, 32, 25, 10),
    PRESET("gh200-c2c", "NVIDIA GH200, Hopper on NVLink-C2C to Grace", 989.4, 450, 387, 5),
    PRESET("mi300x-pcie5", "AMD Instinct MI300X on PCIe 5.0 x16", 1307.4, 64, 55, 10),
};
#define N_PRESETS ((int)(sizeof presets / sizeof presets[0]))

int dlrt_link_preset_count(void) { return N_PRESETS; }

const dlrt_link_preset *dlrt_link_preset_get(int index) {
  return index >= 0 && index < N_PRESETS ? &presets[index] : NULL;
}

/* ---------------------------------------------------------------- specs */

/* "h200-pcie5, h100-pcie5, ..." for messages. */
static void preset_names(char *out, size_t size) {
  size_t at = 0;
  out[0] = '\0';
  for (int i = 0; i < N_PRESETS && at < size; i++) {
    int n = snprintf(out + at, size - at, "%s%s", i ? ", " : "", presets[i].name);
    if (n < 0) break;
    at += (size_t)n;
  }
}

/* A number at the start of `text` (finite), into *v, *end after it; 0 if none. */
static int read_number(const char *text, double *v, const char **end) {
  char *e;
  if (!isdigit((unsigned char)text[0]) && text[0] != '.' && text[0] != '-' && text[0] != '+')
    return 0;
  *v = strtod(text, &e);
  if (e == text || !isfinite(*v)) return 0;
  *end = e;
  return 1;
}

/* "12GB/s" (the whole of `text`, `n` characters) into bytes per second. */
static int parse_rate(const char *spec, const char *text, size_t n, double *out) {
  static const struct {
    const char *unit;
    double scale;
  } units[] = {{"B/s", 1},       {"KB/s", 1e3},   {"MB/s", 1e6},  {"GB/s", 1e9},
               {"TB/s", 1e12},   {"KiB/s", 1024}, {"MiB/s", 1048576.0},
               {"GiB/s", 1073741824.0}, {"TiB/s", 1099511627776.0}};
  char buf[64];
  const char *unit;
  double v;
  if (n >= sizeof buf) n = sizeof buf - 1;
  memcpy(buf, text, n);
  buf[n] = '\0';
  if (!read_number(buf, &v, &unit))
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "link \"%s\": \"%s\" is neither a rate such "
                           "as 12GB/s nor a preset", spec, buf);
  if (!*unit)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "link \"%s\": the rate %s needs a unit: "
                           "B/s, KB/s, MB/s, GB/s, TB/s or KiB/s .. TiB/s (12GB/s)", spec, buf);
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (strcasecmp(unit, units[i].unit) == 0 && strchr(unit, 'B')) {
      if (!(v > 0))
        return dlrt__set_error(DLRT_ERR_INVALID_ARG, "link \"%s\": the rate must be above "
                               "zero, not %s", spec, buf);
      *out = v * units[i].scale;
      return DLRT_OK;
    }
  if (strchr(unit, 'b') && strstr(unit, "/s"))
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "link \"%s\": \"%s\" is bits (b); give the "
                           "rate in bytes with a capital B (GB/s: 12 Gbit/s is 1.5GB/s)", spec,
                           unit);
  return dlrt__set_error(DLRT_ERR_INVALID_ARG, "link \"%s\": \"%s\" is not a unit of rate: "
                         "use B/s, KB/s, MB/s, GB/s, TB/s or KiB/s .. TiB/s", spec, unit);
}

/* "10us" into seconds. */
static int parse_latency(const char *spec, const char *text, double *out) {
  static const struct {
    const char *unit;
    double scale;
  } units[] = {{"ns", 1e-9}, {"us", 1e-6}, {"\xc2\xb5s", 1e-6}, {"ms", 1e-3}, {"s", 1}};
  const char *unit;
  double v;
  if (!read_number(text, &v, &unit))
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "link \"%s\": the latency \"%s\" is not a "
                           "time such as 10us", spec, text);
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (strcmp(unit, units[i].unit) == 0) {
      if (v < 0)
        return dlrt__set_error(DLRT_ERR_INVALID_ARG, "link \"%s\": the latency cannot be "
                               "negative (%s)", spec, text);
      *out = v * units[i].scale;
      return DLRT_OK;
    }
  return dlrt__set_error(DLRT_ERR_INVALID_ARG, "link \"%s\": the latency \"%s\" needs a unit: "
                         "ns, us, ms or s (10us)", spec, text);
}

int dlrt_link_parse(const char *text, dlrt_link_spec *out) {
  DLRT__CHECK_ARG(out, "dlrt_link_parse: out is NULL");
  memset(out, 0, sizeof *out);
  if (!text || !*text || strcasecmp(text, "none") == 0 || strcasecmp(text, "off") == 0) {
    out->none = 1;
    return DLRT_OK;
  }
  const char *colon = strchr(text, ':');
  size_t head = colon ? (size_t)(colon - text) : strlen(text);
  if (colon && !colon[1])
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "link \"%s\": nothing after ':'; give a "
                           "latency such as 10us, or leave the ':' out", text);
  for (int i = 0; i < N_PRESETS; i++)
    if (strlen(presets[i].name) == head && strncasecmp(presets[i].name, text, head) == 0) {
      out->preset = &presets[i];
      out->latency_s = out->preset->latency_s;
      return colon ? parse_latency(text, colon + 1, &out->latency_s) : DLRT_OK;
    }
  if (head == 0 || !(isdigit((unsigned char)text[0]) || text[0] == '.' || text[0] == '-' ||
                     text[0] == '+')) {
    char names[256];
    preset_names(names, sizeof names);
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "link \"%s\": \"%.*s\" is not a preset; the "
                           "presets are %s (or give a rate such as 12GB/s:10us, or none)",
                           text, (int)head, text, names);
  }
  int rc = parse_rate(text, text, head, &out->bytes_per_s);
  if (rc == DLRT_OK && colon) rc = parse_latency(text, colon + 1, &out->latency_s);
  if (rc < 0) memset(out, 0, sizeof *out);
  return rc;
}

/* ---------------------------------------------------------------- arithmetic */

double dlrt__link_seconds(double bytes_per_s, double latency_s, uint64_t bytes) {
  return (double)bytes / bytes_per_s + latency_s;
}

double dlrt__link_seconds_past(double bytes_per_s, double latency_s, double held_bytes_per_s,
                               double gate_s, uint64_t bytes, uint64_t copies) {
  double link = bytes_per_s > 0 ? (double)bytes / bytes_per_s + (double)copies * latency_s : 0;
  double held = (double)bytes / held_bytes_per_s;
  return (link > held ? link - held : 0) + (double)copies * gate_s;
}

double dlrt__link_engine_take(dlrt__link_engine *e, double now, double seconds, uint64_t bytes) {
  double start = e->free_at > now ? e->free_at : now;
  e->queued_s += start - now;
  e->busy_s += seconds;
  e->copies++;
  e->bytes += bytes;
  e->free_at = start + seconds;
  return e->free_at;
}

/* ---------------------------------------------------------------- DLRT_LINK */

int dlrt__link_check_env(void) {
  const char *text = getenv("DLRT_LINK");
  dlrt_link_spec spec;
  if (!text || !*text) return DLRT_OK;
  int rc = dlrt_link_parse(text, &spec);
  if (rc < 0) return dlrt__set_error(rc, "DLRT_LINK: %s", dlrt_last_error());
  return DLRT_OK;
}
