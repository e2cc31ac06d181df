/* machine.c — the figures of a machine a step is predicted on
 * (dlrt_machine, dlrt/train.h): the presets, a file of figures, and this
 * machine measured. The presets are the host link's (lib/device/
 * link_model.c): their names, dense bf16 peaks, link rates and latencies
 * come from there; this file adds what the link model has no use for —
 * the other precisions' peaks, device memory and its bandwidth, the host.
 * README "Predicting a step" gives every figure's source: keep them
 * together. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dlrt.h"
#include "graph/cost.h"
#include "mem/disk.h"
#include "util/clock.h"
#include "util/status.h"

#define T 1e12
#define G 1e9
#define GIB 1073741824.0

/* What kernels reach of the published figures. GEMMs: the link presets'
 * own fraction of the tensor peak (their flops / peak_flops, 0.8). Device
 * memory: 0.9 (an H200 copies 4.3 of its 4.8 TB/s, measured: GPU.md).
 * The fp32 vector rate: 0.8 like GEMMs. The host optimizer: half of the
 * host's memory bandwidth (a multi-threaded Adam streams 28 bytes per
 * parameter but rarely reaches STREAM's figure). Launch: a kernel launch
 * and the gap between kernels on one stream, some 4 us on CUDA. */
#define MEMORY_ACHIEVED 0.9
#define VECTOR_ACHIEVED 0.8
#define HOST_ACHIEVED 0.5
#define LAUNCH_S 4e-6
/* Between devices, assumed (not measured here): a ring all-reduce's bus
 * bandwidth reaches some three quarters of NVLink's rate and 0.8 of the
 * network adapters', and a message takes some 5 us on the peer links and
 * 10 us on the network. */
#define PEER_ACHIEVED 0.77
#define NETWORK_ACHIEVED 0.8
#define PEER_LATENCY_S 5e-6
#define NETWORK_LATENCY_S 10e-6
/* The disk: the drives of the node's internal NVMe array (RAID 0, as DGX
 * systems ship their cache volume) at 0.8 of their sequential rates, the
 * disk tier's large blocks; one thread's synchronous I/O is assumed to
 * reach it. */
#define DISK_ACHIEVED 0.8

static const struct {
  const char *name; /* a link preset's */
  double fp32_tflops, tf32_tflops, fp16_tflops; /* dense; bf16: the link preset's */
  double memory_tbs, device_gb;
  double host_gbs, host_gib;
  /* Between devices: a device's peer rate to the others of its node, GB/s a
   * direction; the devices of a node; the node's network, GB/s a direction
   * (all its adapters). The nodes are those the host figures are of. */
  double peer_gbs;
  int per_node;
  double network_gbs;
  /* The node's internal NVMe drives, and each one's sequential read and
   * write, GB/s. */
  int drives;
  double drive_read_gbs, drive_write_gbs;
} figures[] = {
    /* H200 SXM: 67 fp32, 494.7 tf32 and 989.4 fp16 dense; 141 GB HBM3e,
     * 4.8 TB/s. Host: 2 x Xeon 8480C, 16 channels DDR5-4800 (DGX H200).
     * DGX H200: NVLink 4 through NVSwitch, 900 GB/s a GPU both ways; 8 GPUs;
     * 8 ConnectX-7 at 400 Gb/s for the compute network.
     * Disk: DGX H200's 8 x 3.84 TB NVMe U.2 cache drives; each one's 6.9 GB/s
     * read and 4.1 GB/s write are assumed (a PCIe 4.0 U.2 drive of that
     * size: NVIDIA does not name the drive). */
    {"h200-pcie5", 67, 494.7, 989.4, 4.8, 141, 614.4, 2048, 450, 8, 400, 8, 6.9, 4.1},
    /* H100 PCIe: 51, 378, 756; 80 GB HBM2e, 2.0 TB/s.
     * Its node as DGX H100's (the host above): NVLink 4, 900 GB/s both ways,
     * 8 GPUs, 8 x 400 Gb/s. (The PCIe card's own NVLink bridge joins pairs.)
     * Disk: DGX H100's 8 x 3.84 TB NVMe U.2, each as above (assumed). */
    {"h100-pcie5", 51, 378, 756, 2.0, 80, 614.4, 2048, 450, 8, 400, 8, 6.9, 4.1},
    /* A100 80GB PCIe: 19.5, 156, 312; 1.935 TB/s. Host: 2 x EPYC 7742,
     * 16 channels DDR4-3200 (DGX A100).
     * Its node as DGX A100's (the host above): NVLink 3 through NVSwitch,
     * 600 GB/s a GPU both ways; 8 GPUs; 8 ConnectX-6 HDR at 200 Gb/s (the
     * nodes of Selene, where Megatron-LM's figures were measured).
     * Disk: DGX A100 640GB's 8 x 3.84 TB NVMe U.2 (30 TB), each as above
     * (assumed). */
    {"a100-pcie4", 19.5, 156, 312, 1.935, 80, 409.6, 1024, 300, 8, 200, 8, 6.9, 4.1},
    /* L40S: 91.6, 183, 362.05; 48 GB GDDR6, 864 GB/s.
     * No NVLink: peers over PCIe 4.0 x16 (32 GB/s a direction, the link's
     * rate); 8 GPUs; 4 x 200 Gb/s (a server of NVIDIA's L40S reference
     * configurations). Disk: 4 NVMe drives, each as above (assumed). */
    {"l40s-pcie4", 91.6, 183, 362.05, 0.864, 48, 614.4, 1024, 25.6, 8, 100, 4, 6.9, 4.1},
    /* GH200 (96 GB HBM3, 4.0 TB/s): the Hopper rates; Grace's 480 GB of
     * LPDDR5X at up to 512 GB/s is the host.
     * One superchip a node; one ConnectX-7 at 400 Gb/s. The peer figure is
     * NVLink 4's (used within a node only: none here). Disk: one E1.S NVMe
     * drive, as above (assumed). */
    {"gh200-c2c", 67, 494.7, 989.4, 4.0, 96, 512, 480, 450, 1, 50, 1, 6.9, 4.1},
    /* MI300X: 163.4 fp32, 653.7 tf32, 1307.4 fp16 dense; 192 GB HBM3,
     * 5.3 TB/s. Host: 2 x EPYC 9654, 24 channels DDR5-4800.
     * 8 GPUs fully connected by Infinity Fabric (xGMI): 7 links of 64 GB/s
     * a direction, 448 GB/s to the others; 8 x 400 Gb/s. Disk: 8 NVMe
     * drives, each as above (assumed). */
    {"mi300x-pcie5", 163.4, 653.7, 1307.4, 5.3, 192, 921.6, 2048, 448, 8, 400, 8, 6.9, 4.1},
};
#define N_FIGURES ((int)(sizeof figures / sizeof figures[0]))

int dlrt_machine_preset(const char *name, dlrt_machine *out) {
  DLRT__CHECK_ARG(name && out, "dlrt_machine_preset: name or out is NULL");
  memset(out, 0, sizeof *out);
  const dlrt_link_preset *link = NULL;
  for (int i = 0; i < dlrt_link_preset_count(); i++)
    if (strcasecmp(dlrt_link_preset_get(i)->name, name) == 0) link = dlrt_link_preset_get(i);
  int f = -1;
  for (int i = 0; link && i < N_FIGURES; i++)
    if (strcmp(figures[i].name, link->name) == 0) f = i;
  if (f < 0) {
    char names[256] = "";
    for (int i = 0; i < N_FIGURES; i++)
      snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
               figures[i].name);
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "\"%s\" is not a machine preset; the presets "
                           "are %s (or this, or a file of figures)", name, names);
  }
  double achieved = link->flops / link->peak_flops;
  snprintf(out->name, sizeof out->name, "%s", link->name);
  snprintf(out->about, sizeof out->about, "%s", link->about);
  out->matmul_flops[DLRT_F32] = achieved * figures[f].fp32_tflops * T;
  out->matmul_flops[DLRT_F16] = achieved * figures[f].fp16_tflops * T;
  out->matmul_flops[DLRT_BF16] = link->flops;
  out->vector_flops = VECTOR_ACHIEVED * figures[f].fp32_tflops * T;
  out->memory_bytes_per_s = MEMORY_ACHIEVED * figures[f].memory_tbs * T;
  out->launch_s = LAUNCH_S;
  out->link_bytes_per_s = link->bytes_per_s;
  out->link_latency_s = link->latency_s;
  out->host_bytes_per_s = HOST_ACHIEVED * figures[f].host_gbs * G;
  out->device_memory = (uint64_t)(figures[f].device_gb * G);
  out->host_memory = (uint64_t)(figures[f].host_gib * GIB);
  out->peak_matmul_flops_bf16 = link->peak_flops;
  out->peak_memory_bytes_per_s = figures[f].memory_tbs * T;
  out->peer_bytes_per_s = PEER_ACHIEVED * figures[f].peer_gbs * G;
  out->peer_latency_s = PEER_LATENCY_S;
  out->devices_per_node = figures[f].per_node;
  out->network_bytes_per_s = NETWORK_ACHIEVED * figures[f].network_gbs * G;
  out->network_latency_s = NETWORK_LATENCY_S;
  out->disk_read_bytes_per_s = DISK_ACHIEVED * figures[f].drives * figures[f].drive_read_gbs * G;
  out->disk_write_bytes_per_s = DISK_ACHIEVED * figures[f].drives * figures[f].drive_write_gbs * G;
  return DLRT_OK;
}

/* ---------------------------------------------------------------- files */

/* "791.5T", "7.9e14", "4.3TB/s", "55GB/s": a number with an optional
 * decimal prefix (k, K, M, G, T, P) and an optional unit (`unit`, say
 * "FLOP/s" or "B/s"). */
static int parse_rate(const char *text, const char *unit, double *out) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || errno || !isfinite(v) || !(v > 0)) return 0;
  static const struct { char c; double scale; } prefixes[] = {
      {'k', 1e3}, {'K', 1e3}, {'M', 1e6}, {'G', 1e9}, {'T', 1e12}, {'P', 1e15}};
  for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
    if (*end == prefixes[i].c) {
      v *= prefixes[i].scale;
      end++;
      break;
    }
  if (*end && strcmp(end, unit) != 0) return 0;
  *out = v;
  return 1;
}

/* "10us", "4e-6" (seconds), "2ms". */
static int parse_time(const char *text, double *out) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || errno || !isfinite(v) || v < 0) return 0;
  double scale = !*end ? 1 : strcmp(end, "s") == 0 ? 1 : strcmp(end, "ms") == 0 ? 1e-3
                 : strcmp(end, "us") == 0 ? 1e-6 : strcmp(end, "ns") == 0 ? 1e-9 : -1;
  if (scale < 0) return 0;
  *out = v * scale;
  return 1;
}

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
  return s;
}

enum { K_BASE, K_NAME, K_ABOUT, K_FP32, K_FP16, K_BF16, K_VECTOR, K_MEMORY, K_HOST_BW, K_LINK,
       K_LAUNCH, K_OVERHEAD, K_DEVICE_MEM, K_HOST_MEM, K_ATTENTION, K_CONV, K_REDUCE, K_PEER,
       K_PER_NODE, K_NETWORK, K_DISK_READ, K_DISK_WRITE, K_COUNT };
static const char *const keys[K_COUNT] = {
    "base", "name", "about", "matmul_fp32", "matmul_fp16", "matmul_bf16", "vector_fp32",
    "memory_bandwidth", "host_bandwidth", "link", "launch", "matmul_overhead", "device_memory",
    "host_memory", "attention", "conv", "reduce_bandwidth", "peer", "devices_per_node",
    "network", "disk_read", "disk_write"};

/* One "key = value" into m; 0 or a message in why. */
static int set_key(dlrt_machine *m, int key, const char *value, char *why, size_t size) {
  double *rate = NULL;
  const char *unit = "B/s";
  switch (key) {
  case K_BASE:
    if (dlrt_machine_preset(value, m) < 0) {
      snprintf(why, size, "%s", dlrt_last_error());
      return -1;
    }
    return 0;
  case K_NAME: snprintf(m->name, sizeof m->name, "%s", value); return 0;
  case K_ABOUT: snprintf(m->about, sizeof m->about, "%s", value); return 0;
  case K_FP32: rate = &m->matmul_flops[DLRT_F32], unit = "FLOP/s"; break;
  case K_FP16: rate = &m->matmul_flops[DLRT_F16], unit = "FLOP/s"; break;
  case K_BF16: rate = &m->matmul_flops[DLRT_BF16], unit = "FLOP/s"; break;
  case K_VECTOR: rate = &m->vector_flops, unit = "FLOP/s"; break;
  case K_MEMORY: rate = &m->memory_bytes_per_s; break;
  case K_HOST_BW: rate = &m->host_bytes_per_s; break;
  case K_REDUCE: rate = &m->reduce_bytes_per_s; break;
  case K_ATTENTION: rate = &m->attention_flops, unit = "FLOP/s"; break;
  case K_CONV: rate = &m->conv_flops, unit = "FLOP/s"; break;
  case K_DISK_READ: rate = &m->disk_read_bytes_per_s; break;
  case K_DISK_WRITE: rate = &m->disk_write_bytes_per_s; break;
  case K_PEER:
  case K_NETWORK: {
    /* A rate and a latency as --link takes them (300GB/s:5us); a preset's
     * name is a host link's, not a peer's, so it is refused. */
    dlrt_link_spec spec;
    if (dlrt_link_parse(value, &spec) < 0 || spec.none || spec.preset) {
      snprintf(why, size, "%s: \"%s\" is not a rate with an optional latency such as "
               "300GB/s:5us", keys[key], value);
      return -1;
    }
    if (key == K_PEER) m->peer_bytes_per_s = spec.bytes_per_s, m->peer_latency_s = spec.latency_s;
    else m->network_bytes_per_s = spec.bytes_per_s, m->network_latency_s = spec.latency_s;
    return 0;
  }
  case K_PER_NODE: {
    char *end;
    long v = strtol(value, &end, 10);
    if (end == value || *end || v < 1 || v > 4096) {
      snprintf(why, size, "devices_per_node: \"%s\" is not a count from 1 to 4096", value);
      return -1;
    }
    m->devices_per_node = (int)v;
    return 0;
  }
  case K_LINK: {
    dlrt_link_spec spec;
    if (dlrt_link_parse(value, &spec) < 0 || spec.none) {
      snprintf(why, size, "link: %s", spec.none ? "a machine needs a link" : dlrt_last_error());
      return -1;
    }
    m->link_bytes_per_s = spec.preset ? spec.preset->bytes_per_s : spec.bytes_per_s;
    m->link_latency_s = spec.latency_s;
    return 0;
  }
  case K_LAUNCH:
  case K_OVERHEAD:
    if (!parse_time(value, key == K_LAUNCH ? &m->launch_s : &m->matmul_overhead_s)) {
      snprintf(why, size, "%s: \"%s\" is not a time such as 4us", keys[key], value);
      return -1;
    }
    return 0;
  case K_DEVICE_MEM:
  case K_HOST_MEM:
    if (dlrt_parse_size(value, 0, key == K_DEVICE_MEM ? &m->device_memory : &m->host_memory) < 0) {
      snprintf(why, size, "%s: \"%s\" is not a size such as 141G", keys[key], value);
      return -1;
    }
    return 0;
  }
  if (!parse_rate(value, unit, rate)) {
    snprintf(why, size, "%s: \"%s\" is not a rate above zero such as %s", keys[key], value,
             strcmp(unit, "B/s") ? "791.5T or 7.9e14 (FLOP/s)" : "4.3TB/s or 4.3e12 (B/s)");
    return -1;
  }
  return 0;
}

int dlrt_machine_load(const char *path, dlrt_machine *out) {
  DLRT__CHECK_ARG(path && out, "dlrt_machine_load: path or out is NULL");
  memset(out, 0, sizeof *out);
  FILE *f = fopen(path, "r");
  if (!f)
    return dlrt__set_error(DLRT_ERR_IO, "machine file %s: %s (give a preset, this, or a file "
                           "of key = value lines)", path, strerror(errno));
  const char *slash = strrchr(path, '/');
  snprintf(out->name, sizeof out->name, "%s", slash ? slash + 1 : path);
  char line[512], why[400];
  int number = 0, rc = DLRT_OK, seen[K_COUNT] = {0};
  while (rc == DLRT_OK && fgets(line, sizeof line, f)) {
    number++;
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    char *text = trim(line);
    if (!*text) continue;
    char *eq = strchr(text, '=');
    if (!eq) {
      rc = dlrt__set_error(DLRT_ERR_INVALID_ARG, "machine file %s, line %d: \"%s\" is not "
                           "key = value", path, number, text);
      break;
    }
    *eq = '\0';
    char *key = trim(text), *value = trim(eq + 1);
    int k = -1;
    for (int i = 0; i < K_COUNT; i++)
      if (strcmp(key, keys[i]) == 0) k = i;
    if (k < 0) {
      char list[400] = "";
      for (int i = 0; i < K_COUNT; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", keys[i]);
      rc = dlrt__set_error(DLRT_ERR_INVALID_ARG, "machine file %s, line %d: unknown key \"%s\"; "
                           "the keys are %s", path, number, key, list);
    } else if (k == K_BASE && (seen[K_FP32] || seen[K_LINK] || seen[K_MEMORY])) {
      rc = dlrt__set_error(DLRT_ERR_INVALID_ARG, "machine file %s, line %d: base = must come "
                           "before the figures it is the base of", path, number);
    } else if (!*value) {
      rc = dlrt__set_error(DLRT_ERR_INVALID_ARG, "machine file %s, line %d: %s has no value",
                           path, number, key);
    } else {
      char name[64];
      snprintf(name, sizeof name, "%s", out->name);
      if (set_key(out, k, value, why, sizeof why) < 0)
        rc = dlrt__set_error(DLRT_ERR_INVALID_ARG, "machine file %s, line %d: %s", path,
                             number, why);
      /* A base keeps the file's name unless name= says otherwise. */
      if (k == K_BASE && !seen[K_NAME]) snprintf(out->name, sizeof out->name, "%s", name);
      seen[k] = 1;
    }
  }
  fclose(f);
  if (rc < 0) return rc;
  if (!seen[K_BASE]) {
    static const int needed[] = {K_FP32, K_VECTOR, K_MEMORY, K_LINK, K_DEVICE_MEM};
    for (size_t i = 0; i < sizeof needed / sizeof *needed; i++)
      if (!seen[needed[i]])
        return dlrt__set_error(DLRT_ERR_INVALID_ARG, "machine file %s: no %s (a file without "
                               "base = PRESET needs matmul_fp32, vector_fp32, memory_bandwidth, "
                               "link and device_memory)", path, keys[needed[i]]);
    /* 16-bit GEMMs at the fp32 rate unless given; the host at the device's
     * link rate unless given. */
    for (int p = DLRT_F16; p <= DLRT_BF16; p++)
      if (!out->matmul_flops[p]) out->matmul_flops[p] = out->matmul_flops[DLRT_F32];
    if (!out->host_bytes_per_s) out->host_bytes_per_s = out->memory_bytes_per_s;
  }
  if (!out->peak_matmul_flops_bf16) out->peak_matmul_flops_bf16 = out->matmul_flops[DLRT_BF16];
  if (!out->peak_memory_bytes_per_s) out->peak_memory_bytes_per_s = out->memory_bytes_per_s;
  return DLRT_OK;
}

/* ---------------------------------------------------------------- measured */

/* Seconds of the median of `tries` runs of fn after a warm-up: the step
 * times the figures are checked against are medians too, on a machine that
 * other work shares. */
typedef int (*timed_fn)(void *ctx);
static int best_time(timed_fn fn, void *ctx, dlrt_stream_t *s, int reps, int tries, double *out) {
  int rc = fn(ctx);
  if (rc == DLRT_OK) rc = dlrt_stream_synchronize(s);
  double times[16];
  if (tries > 16) tries = 16;
  for (int t = 0; t < tries && rc == DLRT_OK; t++) {
    double t0 = dlrt__now_s();
    for (int r = 0; r < reps && rc == DLRT_OK; r++) rc = fn(ctx);
    if (rc == DLRT_OK) rc = dlrt_stream_synchronize(s);
    times[t] = (dlrt__now_s() - t0) / reps;
  }
  for (int i = 1; i < tries; i++) /* insertion sort: a handful */
    for (int j = i; j > 0 && times[j] < times[j - 1]; j--) {
      double x = times[j];
      times[j] = times[j - 1], times[j - 1] = x;
    }
  *out = times[tries / 2];
  return rc;
}

typedef struct {
  dlrt_stream_t *s;
  dlrt_buffer_t *a, *b, *c;
  dlrt_gemm_desc d;
  int64_t n;
  float *host;
  size_t bytes;
} bench_ctx;

static int run_gemm(void *ctx) {
  bench_ctx *b = ctx;
  return dlrt_gemm(b->s, &b->d, b->a, 0, b->b, 0, b->c, 0);
}
static int run_h2d(void *ctx) {
  bench_ctx *b = ctx;
  return dlrt_copy_h2d(b->a, 0, b->host, b->bytes, b->s);
}

/* The rate and fixed overhead of GEMMs of `dtype` from squares of n0 and
 * n1: t = flops / rate + overhead. */
static int measure_gemm(bench_ctx *b, dlrt_dtype dtype, double *rate, double *overhead) {
  const int64_t n[2] = {128, 512}; /* around the models' GEMMs: 50 MFLOP to 2 GFLOP */
  double t[2], f[2];
  for (int i = 0; i < 2; i++) {
    b->d = dlrt_gemm_desc_make(dtype, 0, 0, n[i], n[i], n[i], 1.0f, 0.0f);
    f[i] = 2.0 * (double)n[i] * (double)n[i] * (double)n[i];
    int rc = best_time(run_gemm, b, b->s, i ? 2 : 20, 5, &t[i]);
    if (rc < 0) return rc;
  }
  *rate = t[1] > t[0] ? (f[1] - f[0]) / (t[1] - t[0]) : f[1] / t[1];
  *overhead = t[0] - f[0] / *rate;
  if (*overhead < 0) *overhead = 0;
  return DLRT_OK;
}

/* One-node graphs that time a kernel class as a model's nodes run it,
 * through the executor, at sizes like those of the models here. */
enum { BENCH_ADD, BENCH_GELU, BENCH_SUM, BENCH_ATTENTION, BENCH_CONV };

/* The median seconds of graph `kind` (forward) on dev, and the cost model's
 * count of its nodes (matmul FLOPs, vector FLOPs, bytes) in *cost. `count`:
 * the values of the stream kinds. */
static int time_graph(dlrt_device_t *dev, int kind, int64_t count, double *seconds,
                      dlrt__op_cost *cost) {
  dlrt_graph_t *g = NULL;
  dlrt_exec_t *e = NULL;
  int rc = dlrt_graph_create(&g);
  if (rc < 0) return rc;
  int64_t rows[2] = {count / 256 > 0 ? count / 256 : 1, 256};
  dlrt_tensor_t *a = NULL, *y = NULL;
  if (kind == BENCH_ATTENTION) {
    /* gpt-mini's: 8 windows of 128 positions, 4 heads of 64. */
    a = dlrt_input(g, "qkv", DLRT_F32, 3, (int64_t[]){8, 128, 768});
    y = dlrt_attention(g, a, 4, 1);
  } else if (kind == BENCH_CONV) {
    /* the cnn's second: 32 to 64 channels, 3 x 3, padding 1, on 13 x 13. */
    a = dlrt_input(g, "x", DLRT_F32, 4, (int64_t[]){16, 32, 13, 13});
    dlrt_tensor_t *w = dlrt_input(g, "w", DLRT_F32, 4, (int64_t[]){64, 32, 3, 3});
    y = dlrt_conv2d(g, a, w, NULL, 1, 1, 1);
  } else {
    a = dlrt_input(g, "a", DLRT_F32, 2, rows);
    dlrt_tensor_t *b = dlrt_input(g, "b", DLRT_F32, 2, rows);
    /* Adds in a chain of 4 into fresh tensors (b first: none in place),
     * of 8M values: a model's activations, together, are past the caches. */
    y = kind == BENCH_GELU ? dlrt_gelu(g, a) : kind == BENCH_SUM ? dlrt_sum_axis(g, a, 0) : a;
    for (int i = 0; kind == BENCH_ADD && i < 4; i++) y = dlrt_add(g, b, y);
  }
  dlrt_keep(g, y);
  rc = dlrt_graph_status(g);
  if (rc == DLRT_OK) rc = dlrt_exec_create(g, dev, 1, &e);
  memset(cost, 0, sizeof *cost);
  for (int i = 0; rc == DLRT_OK && i < g->n_nodes; i++) {
    dlrt__op_cost c;
    dlrt__node_cost(g->nodes[i], &c);
    cost->matmul_flops += c.matmul_flops;
    cost->vector_flops += c.vector_flops;
    cost->bytes_read += c.bytes_read + c.bytes_written;
    cost->launches += c.launches;
  }
  double times[5];
  const int tries = 5, reps = count < 4096 ? 50 : 3;
  for (int t = -1; t < tries && rc == DLRT_OK; t++) {
    double t0 = dlrt__now_s();
    for (int r = 0; r < reps && rc == DLRT_OK; r++) rc = dlrt_exec_run(e, DLRT_RUN_FORWARD);
    if (rc == DLRT_OK) rc = dlrt_stream_synchronize(dlrt_exec_stream(e));
    if (t >= 0) times[t] = (dlrt__now_s() - t0) / reps; /* t = -1 warms up */
  }
  for (int i = 1; i < tries; i++)
    for (int j = i; j > 0 && times[j] < times[j - 1]; j--) {
      double x = times[j];
      times[j] = times[j - 1], times[j - 1] = x;
    }
  if (rc == DLRT_OK) *seconds = times[tries / 2];
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(g);
  return rc;
}

/* Host memory as the host optimizer streams it: an Adam update of 4M
 * parameters reads 16 and writes 12 bytes of each. */
static int measure_host(double *bytes_per_s) {
  const int64_t count = (int64_t)1 << 22;
  float *mem = calloc((size_t)count * 4, sizeof(float));
  if (!mem) return dlrt__set_error(DLRT_ERR_OOM, "cannot allocate 64 MiB to time the host");
  dlrt_optimizer opt = dlrt_optimizer_defaults(DLRT_OPT_ADAM);
  double best = INFINITY;
  int rc = DLRT_OK;
  for (int t = 0; t < 4 && rc == DLRT_OK; t++) {
    double t0 = dlrt__now_s();
    rc = dlrt_host_optimizer_update(&opt, t, mem, mem + count, mem + 2 * count, mem + 3 * count,
                                    count, 1, 1.0f);
    double dt = dlrt__now_s() - t0;
    if (t > 0 && dt < best) best = dt; /* the first pays the page faults */
  }
  if (rc == DLRT_OK) *bytes_per_s = 28.0 * (double)count / best;
  free(mem);
  return rc;
}

/* The spill file's disk as the disk tier uses it (lib/mem/disk.h): one
 * thread's whole writes, then reads, of 4 slots of 16 MiB, the best of 3.
 * The page cache takes part, as it does for the disk tier's own I/O. */
static int measure_disk(double *read_bytes_per_s, double *write_bytes_per_s) {
  enum { SLOTS = 4, SLOT = 16 << 20 };
  char *buf = malloc(SLOT);
  if (!buf) return dlrt__set_error(DLRT_ERR_OOM, "cannot allocate 16 MiB to time the disk");
  memset(buf, 1, SLOT);
  dlrt__disk d = {0};
  int64_t at[SLOTS];
  int rc = dlrt__disk_open(&d);
  for (int i = 0; i < SLOTS && rc == DLRT_OK; i++) rc = dlrt__disk_reserve(&d, SLOT, &at[i]);
  double best[2] = {INFINITY, INFINITY};
  for (int t = 0; t < 3 && rc == DLRT_OK; t++) {
    for (int write = 1; write >= 0 && rc == DLRT_OK; write--) {
      double t0 = dlrt__now_s();
      for (int i = 0; i < SLOTS && rc == DLRT_OK; i++)
        rc = write ? dlrt__disk_write(&d, at[i], buf, SLOT) : dlrt__disk_read(&d, at[i], buf, SLOT);
      double dt = dlrt__now_s() - t0;
      if (dt < best[write]) best[write] = dt;
    }
  }
  dlrt__disk_close(&d);
  free(buf);
  if (rc == DLRT_OK) {
    *read_bytes_per_s = (double)SLOTS * SLOT / best[0];
    *write_bytes_per_s = (double)SLOTS * SLOT / best[1];
  }
  return rc;
}

int dlrt_machine_measure(dlrt_device_t *dev, dlrt_machine *out) {
  DLRT__CHECK_ARG(dev && out, "dlrt_machine_measure: device or out is NULL");
  memset(out, 0, sizeof *out);
  dlrt_device_props props;
  int rc = dlrt_device_props_get(dev, &props);
  if (rc < 0) return rc;
  bench_ctx b = {.s = dlrt_device_default_stream(dev), .n = (int64_t)1 << 23};
  b.bytes = (size_t)b.n * sizeof(float);
  rc = dlrt_buffer_alloc(dev, b.bytes, NULL, &b.a);
  if (rc == DLRT_OK) rc = dlrt_buffer_alloc(dev, b.bytes, NULL, &b.b);
  if (rc == DLRT_OK) rc = dlrt_buffer_alloc(dev, b.bytes, NULL, &b.c);
  if (rc == DLRT_OK) rc = dlrt_memset(b.a, 0, 0, b.bytes, b.s);
  if (rc == DLRT_OK) rc = dlrt_memset(b.b, 0, 0, b.bytes, b.s);
  if (rc == DLRT_OK) rc = dlrt_memset(b.c, 0, 0, b.bytes, b.s);
  double overhead[3] = {0};
  for (int p = DLRT_F32; p <= DLRT_BF16 && rc == DLRT_OK; p++)
    rc = measure_gemm(&b, (dlrt_dtype)p, &out->matmul_flops[p], &overhead[p]);
  out->matmul_overhead_s = overhead[DLRT_F32];
  /* Through one-node graphs, as a model's nodes run (time_graph), each
   * counted by the cost model, so the rates are in its own units: a launch
   * is a quarter of 4 adds of 32K values (each goes through the backend's
   * threads, as a model's do); the bandwidth a chain of 4 adds
   * of 8M values, each into a fresh tensor as a model's are; the vector rate
   * GELU's arithmetic (bound by it, not by memory, on a CPU), and the
   * attention and convolution kernels' rates. */
  const int64_t values = (int64_t)1 << 20;
  double t[5] = {0}, t_small = 0;
  dlrt__op_cost c[5], tiny;
  memset(c, 0, sizeof c);
  if (rc == DLRT_OK) rc = time_graph(dev, BENCH_ADD, 32768, &t_small, &tiny);
  for (int k = BENCH_ADD; k <= BENCH_CONV && rc == DLRT_OK; k++)
    if (k != BENCH_SUM) rc = time_graph(dev, k, k == BENCH_ADD ? 8 * values : values, &t[k], &c[k]);
  if (rc == DLRT_OK) {
    /* The big adds' launches are noise beside their 96 MB each; the small
     * ones (two slices each, for the backend's two threads here) are their
     * launches. */
    out->memory_bytes_per_s = c[BENCH_ADD].bytes_read / t[BENCH_ADD];
    out->launch_s = t_small / tiny.launches; /* their 384 KB in cache: near nothing */
    for (int k = BENCH_GELU; k <= BENCH_CONV; k++) /* the kernels' own time */
      if (t[k] > 2 * c[k].launches * out->launch_s) t[k] -= c[k].launches * out->launch_s;
    out->vector_flops = c[BENCH_GELU].vector_flops / t[BENCH_GELU];
    out->attention_flops = c[BENCH_ATTENTION].matmul_flops / t[BENCH_ATTENTION];
    out->conv_flops = c[BENCH_CONV].matmul_flops / t[BENCH_CONV];
  }
  dlrt_link_info link;
  if (rc == DLRT_OK && (rc = dlrt_link_get(dev, &link)) == DLRT_OK && link.active) {
    out->link_bytes_per_s = link.bytes_per_s;
    out->link_latency_s = link.latency_s;
  } else if (rc == DLRT_OK) {
    /* No model: the device's own host-to-device copies of 32 MiB, from
     * pinned memory (its latency from one of 4 KiB). */
    rc = dlrt_host_alloc(dev, b.bytes, (void **)&b.host);
    if (rc == DLRT_OK) memset(b.host, 0, b.bytes);
    double t_copy = 0, t_tiny = 0;
    if (rc == DLRT_OK) rc = best_time(run_h2d, &b, b.s, 2, 3, &t_copy);
    size_t bytes = b.bytes;
    b.bytes = 4096;
    if (rc == DLRT_OK) rc = best_time(run_h2d, &b, b.s, 50, 3, &t_tiny);
    b.bytes = bytes;
    if (rc == DLRT_OK) {
      out->link_bytes_per_s = (double)bytes / t_copy;
      out->link_latency_s = t_tiny;
    }
    if (b.host) dlrt_host_free(b.host);
  }
  if (rc == DLRT_OK) rc = measure_host(&out->host_bytes_per_s);
  if (rc == DLRT_OK) rc = measure_disk(&out->disk_read_bytes_per_s, &out->disk_write_bytes_per_s);
  dlrt_buffer_free(b.a);
  dlrt_buffer_free(b.b);
  dlrt_buffer_free(b.c);
  if (rc < 0) return dlrt__set_error(rc, "measuring %s: %s", dlrt_device_spec(dev),
                                     dlrt_last_error());
  snprintf(out->name, sizeof out->name, "this");
  snprintf(out->about, sizeof out->about, "%s (%s), measured now", dlrt_device_spec(dev),
           props.name);
  out->device_memory = props.total_memory;
  /* No datasheet here: the fastest GEMM-shaped rate measured stands for
   * the peak (MFU against what this machine reaches). */
  double peak = out->matmul_flops[DLRT_F32];
  for (int p = DLRT_F16; p <= DLRT_BF16; p++)
    if (out->matmul_flops[p] > peak) peak = out->matmul_flops[p];
  if (out->conv_flops > peak) peak = out->conv_flops;
  if (out->attention_flops > peak) peak = out->attention_flops;
  out->peak_matmul_flops_bf16 = peak;
  out->peak_memory_bytes_per_s = out->memory_bytes_per_s;
  return DLRT_OK;
}

int dlrt_machine_get(const char *spec, dlrt_device_t *dev, dlrt_machine *out) {
  DLRT__CHECK_ARG(spec && *spec && out, "dlrt_machine_get: spec is NULL or empty");
  if (strcasecmp(spec, "this") == 0 || strcasecmp(spec, "local") == 0) {
    DLRT__CHECK_ARG(dev, "dlrt_machine_get: \"%s\" needs a device to measure", spec);
    return dlrt_machine_measure(dev, out);
  }
  if (strchr(spec, '/') || strchr(spec, '.')) return dlrt_machine_load(spec, out);
  int rc = dlrt_machine_preset(spec, out);
  if (rc < 0) {
    FILE *f = fopen(spec, "r"); /* a file in the current folder */
    if (!f) return rc;
    fclose(f);
    dlrt_clear_error();
    return dlrt_machine_load(spec, out);
  }
  return rc;
}
