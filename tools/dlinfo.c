/* dlinfo — dlrt's backends and devices with their memory, like nvidia-smi for
 * every vendor; public API only. Exit status: 0 success (also when --watch is
 * interrupted), 1 a dlrt call failed, 2 usage error or a spec that opens nothing. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

#include "dlrt.h"
#include "dlinfo.h"

const char tool_name[] = "dlinfo";

static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig) {
  (void)sig;
  stop_requested = 1;
}

static void human_size(uint64_t bytes, char *buf, size_t size) {
  double mib = (double)bytes / (1024.0 * 1024.0);
  snprintf(buf, size, mib >= 1024 ? "%.1f GiB" : "%.0f MiB", mib >= 1024 ? mib / 1024 : mib);
}

static uint64_t used_memory(const dlrt_device_props *p) {
  return p->total_memory > p->free_memory ? p->total_memory - p->free_memory : 0;
}

/* Backend i: its name, whether it started and how many devices it has. */
static int backend_info(int i, const char **name, int *available, int *ndev) {
  if (!(*name = dlrt_backend_name(i)))
    return tool_fail("cannot read the backend list", DLRT_ERR_INVALID_ARG);
  if ((*available = dlrt_backend_available(*name)) < 0)
    return tool_fail(*name, *available);
  if ((*ndev = dlrt_backend_device_count(*name)) < 0)
    return tool_fail(*name, *ndev);
  return 0;
}

/* The processes of the registry (dlrt_process_list) for one refresh, each
 * with the index of the device it uses among those shown (-1: none). */
typedef struct {
  dlrt_process_usage *list;
  int *device;
  int count;
  int rc;            /* the listing's status: < 0, the registry could not be read */
  char folder[4096]; /* where the registry lies */
} process_table;

/* The device a registry entry names: the same spec and device name. */
static int device_index(const dlrt_process_usage *u, const dlrt_device_props *props, int ndev) {
  for (int i = 0; i < ndev; i++)
    if (!strcmp(u->spec, props[i].spec) && !strcmp(u->device, props[i].name))
      return i;
  return -1;
}

static int processes_read(process_table *t, const dlrt_device_props *props, int ndev) {
  memset(t, 0, sizeof *t);
  if (dlrt_process_registry_dir(t->folder, sizeof t->folder) < 0)
    snprintf(t->folder, sizeof t->folder, "?");
  t->rc = dlrt_process_list(&t->list, &t->count);
  if (t->rc < 0)
    return 0; /* shown in place of the processes: the devices still are */
  if (t->count && !(t->device = malloc((size_t)t->count * sizeof *t->device))) {
    dlrt_process_list_free(t->list);
    return tool_fail("cannot list processes", DLRT_ERR_OOM);
  }
  for (int k = 0; k < t->count; k++)
    t->device[k] = device_index(&t->list[k], props, ndev);
  return 0;
}

static void processes_free(process_table *t) {
  dlrt_process_list_free(t->list);
  free(t->device);
}

/* One process entry as JSON members; `where`: also the device it names. */
static void print_json_process(const dlrt_process_usage *u, int where) {
  printf("{\"pid\": %d, \"name\": ", u->pid);
  tool_json_string(stdout, u->process);
  if (where) {
    const char *keys[] = {"backend", "spec", "device"};
    const char *vals[] = {u->backend, u->spec, u->device};
    printf(", ");
    tool_json_strings(stdout, keys, vals, 3);
  } else {
    printf(", ");
  }
  printf("\"reserved\": %" PRIu64 ", \"allocated\": %" PRIu64 ", \"peak\": %" PRIu64
         ", \"updated\": %.3f}",
         u->reserved, u->allocated, u->peak, u->updated);
}

/* The processes of device `dev` (-1: those of no device shown) as a JSON array. */
static void print_json_processes(const process_table *t, int dev) {
  int first = 1;
  printf("[");
  for (int k = 0; k < t->count; k++) {
    if (t->device[k] != dev)
      continue;
    printf("%s\n      ", first ? "" : ",");
    print_json_process(&t->list[k], dev < 0);
    first = 0;
  }
  printf("%s]", first ? "" : "\n    ");
}

/* A device's host link model (dlrt_link_get) with its line
 * (dlrt_link_describe). */
typedef struct {
  dlrt_link_info info;
  char text[160];
} device_link;

static void print_json_link(const device_link *l) {
  if (!l->info.active) {
    printf("null");
    return;
  }
  printf("{\"spec\": ");
  tool_json_string(stdout, l->info.spec);
  printf(", \"preset\": ");
  if (l->info.preset)
    tool_json_string(stdout, l->info.preset->name);
  else
    printf("null");
  printf(", \"bytes_per_s\": %.6g, \"latency_s\": %.6g, \"device_flops\": %.6g,"
         " \"copies\": [%" PRIu64 ", %" PRIu64 "], \"description\": ",
         l->info.bytes_per_s, l->info.latency_s, l->info.device_flops, l->info.copies[0],
         l->info.copies[1]);
  tool_json_string(stdout, l->text);
  printf("}");
}

static int print_json(const dlrt_device_props *props, const device_link *links, int ndev, int nb,
                      const process_table *t, int all) {
  printf("{\n  \"version\": ");
  tool_json_string(stdout, dlrt_version_string());
  printf(",\n  \"backends\": [");
  for (int i = 0; i < nb; i++) {
    const char *name;
    int available, n;
    if (backend_info(i, &name, &available, &n))
      return STATUS_FAIL;
    printf("%s\n    {\"name\": ", i ? "," : "");
    tool_json_string(stdout, name);
    printf(", \"available\": %s, \"devices\": %d}", available ? "true" : "false", n);
  }
  printf("\n  ],\n  \"devices\": [");
  for (int i = 0; i < ndev; i++) {
    const dlrt_device_props *p = &props[i];
    const char *keys[] = {"spec", "backend", "name", "vendor", "kind", "driver"};
    const char *vals[] = {p->spec,   p->backend, p->name,
                          p->vendor, dlrt_device_kind_name(p->kind), p->driver};
    printf("%s\n    {", i ? "," : "");
    tool_json_strings(stdout, keys, vals, sizeof keys / sizeof *keys);
    printf("\"total_memory\": %" PRIu64 ", \"free_memory\": %" PRIu64
           ", \"used_memory\": %" PRIu64 ", \"alignment\": %zu"
           ", \"host_addressable\": %s, \"compute_units\": %d,\n     \"processes\": ",
           p->total_memory, p->free_memory, used_memory(p), p->alignment,
           p->host_addressable ? "true" : "false", p->compute_units);
    print_json_processes(t, i);
    printf(",\n     \"link\": ");
    print_json_link(&links[i]);
    printf("}");
  }
  /* Processes on devices not shown here (another DLRT_BACKEND): listed when
   * every device is, so that none goes unseen. */
  printf("\n  ],\n  \"other_processes\": ");
  if (all)
    print_json_processes(t, -1);
  else
    printf("[]");
  printf(",\n  \"process_registry\": {\"folder\": ");
  tool_json_string(stdout, t->folder);
  printf(", \"error\": ");
  if (t->rc < 0)
    tool_json_string(stdout, tool_error_text(t->rc));
  else
    printf("null");
  printf("}\n}\n");
  return 0;
}

enum { MAX_COLS = 9, CELL = 128, NCOL = 9, FIRST_MEM_COL = 5, LAST_MEM_COL = 7, NPCOL = 6 };
typedef char row_cells[MAX_COLS][CELL];

/* Prints rows of `cols` cells in columns as wide as their widest cell: the
 * columns whose bit is set in `right` right-aligned, the last (when left-
 * aligned) unpadded. */
static void print_columns(row_cells *rows, int nrow, int cols, unsigned right) {
  int width[MAX_COLS] = {0};
  for (int i = 0; i < nrow; i++)
    for (int j = 0; j < cols; j++) {
      int len = (int)strlen(rows[i][j]);
      width[j] = len > width[j] ? len : width[j];
    }
  for (int i = 0; i < nrow; i++)
    for (int j = 0; j < cols; j++) {
      if (j == cols - 1 && !(right >> j & 1))
        printf("%s\n", rows[i][j]);
      else if (j == cols - 1)
        printf("%*s\n", width[j], rows[i][j]);
      else
        printf(right >> j & 1 ? "%*s  " : "%-*s  ", width[j], rows[i][j]);
    }
}

/* The table's cells for one device, or its headings when p is NULL. */
static void table_cells(const dlrt_device_props *p, char cells[MAX_COLS][CELL]) {
  static const char *const heads[NCOL] = {"SPEC", "BACKEND", "NAME", "VENDOR", "KIND",
                                          "TOTAL", "USED", "FREE", "DRIVER"};
  if (!p) {
    for (int j = 0; j < NCOL; j++)
      snprintf(cells[j], CELL, "%s", heads[j]);
    return;
  }
  const char *kind = dlrt_device_kind_name(p->kind);
  const char *text[] = {p->spec, p->backend, p->name, p->vendor, kind ? kind : "?"};
  for (int j = 0; j < FIRST_MEM_COL; j++)
    snprintf(cells[j], CELL, "%s", text[j]);
  human_size(p->total_memory, cells[5], CELL);
  human_size(used_memory(p), cells[6], CELL);
  human_size(p->free_memory, cells[7], CELL);
  snprintf(cells[8], CELL, "%s", *p->driver ? p->driver : "-");
}

/* A process's bytes, finer than the devices' whole MiB: a small model's
 * megabytes are what one watches grow. */
static void process_size(uint64_t bytes, char *buf, size_t size) {
  double kib = (double)bytes / 1024.0;
  if (kib < 1024)
    snprintf(buf, size, "%.0f KiB", kib);
  else if (kib < 1024.0 * 1024)
    snprintf(buf, size, "%.1f MiB", kib / 1024);
  else
    snprintf(buf, size, "%.2f GiB", kib / (1024.0 * 1024));
}

/* The processes under the devices, as nvidia-smi's table: those of each
 * device shown in the devices' order, then (`all`) those of devices not shown. */
static int print_processes(const process_table *t, int ndev, int all) {
  printf("\nProcesses (from %s):", t->folder);
  if (t->rc < 0) {
    printf(" cannot be read: %s\n", tool_error_text(t->rc));
    return 0;
  }
  row_cells *rows = calloc((size_t)t->count + 1, sizeof *rows);
  if (!rows)
    return tool_fail("cannot list processes", DLRT_ERR_OOM);
  static const char *const heads[NPCOL] = {"DEVICE", "PID",       "NAME",
                                           "RESERVED", "ALLOCATED", "PEAK"};
  for (int j = 0; j < NPCOL; j++)
    snprintf(rows[0][j], CELL, "%s", heads[j]);
  int nrow = 1;
  for (int dev = 0; dev <= ndev; dev++)
    for (int k = 0; k < t->count; k++) {
      int on = t->device[k];
      if (dev < ndev ? on != dev : on >= 0 || !all)
        continue;
      const dlrt_process_usage *u = &t->list[k];
      snprintf(rows[nrow][0], CELL, "%s", u->spec);
      snprintf(rows[nrow][1], CELL, "%d", u->pid);
      snprintf(rows[nrow][2], CELL, "%s", u->process);
      process_size(u->reserved, rows[nrow][3], CELL);
      process_size(u->allocated, rows[nrow][4], CELL);
      process_size(u->peak, rows[nrow][5], CELL);
      nrow++;
    }
  if (nrow == 1)
    printf(" no dlrt process holds device memory\n");
  else {
    putchar('\n');
    print_columns(rows, nrow, NPCOL, 1u << 1 | 1u << 3 | 1u << 4 | 1u << 5);
  }
  free(rows);
  return 0;
}

/* The devices' host link models, when any has one. */
static void print_links(const dlrt_device_props *props, const device_link *links, int ndev) {
  int any = 0;
  for (int i = 0; i < ndev; i++) any |= links[i].info.active;
  if (!any) return;
  printf("\nHost link models (copies between host and device memory take their time):\n");
  for (int i = 0; i < ndev; i++)
    printf("  %-10s %s\n", props[i].spec, links[i].info.active ? links[i].text : "none");
}

static int print_table(const dlrt_device_props *props, const device_link *links, int ndev,
                       int nb, int stamp, const process_table *t, int all) {
  char when[40] = "";
  time_t now = time(NULL);
  struct tm *local = localtime(&now);
  if (stamp && local) /* --watch: when this refresh was taken */
    strftime(when, sizeof when, "    %Y-%m-%d %H:%M:%S", local);
  printf("dlrt %s%s\n", dlrt_version_string(), when);
  for (int i = 0; i < nb; i++) {
    const char *name;
    int available, n;
    if (backend_info(i, &name, &available, &n))
      return STATUS_FAIL;
    if (available)
      printf("  %-8s started, %d device%s\n", name, n, n == 1 ? "" : "s");
    else
      printf("  %-8s not available (no driver/platform%s)\n", name,
             getenv("DLRT_BACKEND") ? ", or left out by DLRT_BACKEND" : "");
  }
  putchar('\n');
  row_cells *rows = calloc((size_t)ndev + 1, sizeof *rows);
  if (!rows)
    return tool_fail("cannot list devices", DLRT_ERR_OOM);
  for (int i = -1; i < ndev; i++)
    table_cells(i < 0 ? NULL : &props[i], rows[i + 1]);
  unsigned memory_columns = ((1u << (LAST_MEM_COL + 1)) - 1) & ~((1u << FIRST_MEM_COL) - 1);
  print_columns(rows, ndev + 1, NCOL, memory_columns);
  free(rows);
  print_links(props, links, ndev);
  return print_processes(t, ndev, all);
}

/* One refresh: reads every device's properties and the process registry
 * now, then prints them. */
static int report(dlrt_device_t *only, int json, int stamp) {
  int ndev = only ? 1 : dlrt_device_count();
  int nb = dlrt_backend_count();
  if (ndev < 0 || nb < 0)
    return tool_fail("cannot list devices", ndev < 0 ? ndev : nb);
  dlrt_device_props *props = calloc((size_t)ndev + 1, sizeof *props);
  device_link *links = calloc((size_t)ndev + 1, sizeof *links);
  int status = !props || !links ? tool_fail("cannot list devices", DLRT_ERR_OOM) : 0;
  for (int i = 0; i < ndev && !status; i++) {
    dlrt_device_t *dev = only;
    int rc = only ? DLRT_OK : dlrt_device_get(i, &dev);
    if (rc == DLRT_OK)
      rc = dlrt_device_props_get(dev, &props[i]);
    if (rc == DLRT_OK)
      rc = dlrt_link_get(dev, &links[i].info);
    if (rc == DLRT_OK && links[i].info.active)
      rc = dlrt_link_describe(dev, links[i].text, sizeof links[i].text);
    if (rc < 0)
      status = tool_fail("cannot read device properties", rc);
  }
  process_table procs;
  if (!status && !(status = processes_read(&procs, props, ndev))) {
    status = json ? print_json(props, links, ndev, nb, &procs, !only)
                  : print_table(props, links, ndev, nb, stamp, &procs, !only);
    processes_free(&procs);
  }
  free(props);
  free(links);
  return status;
}

/* SIGINT and SIGTERM end --watch. They stay blocked except inside pselect(),
 * so that none can arrive between the flag check and the sleep. Installed
 * before dlrt_init: one that comes while the backends start (seconds for a
 * driver under load) waits, blocked, for the first pselect() and ends the
 * watch there, instead of killing dlinfo (exit 130); the threads the
 * backends start inherit the mask, so it reaches the main thread. */
static void watch_signals(sigset_t *wait_mask) {
  static const int stop_signals[] = {SIGINT, SIGTERM};
  struct sigaction sa = {.sa_handler = on_stop_signal};
  sigset_t stop_set;
  sigemptyset(&sa.sa_mask);
  sigemptyset(&stop_set);
  for (int i = 0; i < 2; i++) {
    sigaction(stop_signals[i], &sa, NULL);
    sigaddset(&stop_set, stop_signals[i]);
  }
  sigprocmask(SIG_BLOCK, &stop_set, wait_mask);
}

int main(int argc, char **argv) {
  dlinfo_options o;
  int status = 0, rc;
  dlrt_device_t *only = NULL;
  sigset_t wait_mask;

  if ((status = dlinfo_parse_options(argc, argv, &o)) != 0) {
    if (status == TOOL_HELP) dlinfo_usage(stdout);
    if (status == TOOL_VERSION) dlinfo_version(stdout);
    return status < 0 ? 0 : tool_usage_fail(o.error);
  }
  int json = o.json;
  double watch = o.watch;
  const char *spec = o.spec;

  if (watch > 0)
    watch_signals(&wait_mask);
  if ((rc = dlrt_init()) != DLRT_OK) {
    status = tool_fail("cannot start dlrt", rc);
    goto done;
  }
  if (spec && (rc = dlrt_device_open(spec, &only)) != DLRT_OK) {
    tool_fail(NULL, rc);
    fputs("dlinfo: run dlinfo to list devices\n", stderr);
    status = STATUS_USAGE;
    goto done;
  }
  /* --link: on the devices shown (a preset measures each one's GEMM rate). */
  for (int i = 0; o.link && i < (only ? 1 : dlrt_device_count()); i++) {
    dlrt_device_t *dev = only;
    if ((only || (rc = dlrt_device_get(i, &dev)) == DLRT_OK) &&
        (rc = dlrt_link_set(dev, o.link)) == DLRT_OK)
      continue;
    fprintf(stderr, "dlinfo: --link %s: %s\n", o.link, dlrt_last_error());
    status = rc == DLRT_ERR_INVALID_ARG ? STATUS_USAGE : STATUS_FAIL;
    goto done;
  }
  for (;;) {
    if (watch > 0 && isatty(STDOUT_FILENO))
      fputs("\033[H\033[2J", stdout); /* cursor home, clear screen */
    status = report(only, json, watch > 0);
    fflush(stdout);
    if (status || watch <= 0 || stop_requested)
      break;
    struct timespec interval = {(time_t)watch,
                                (long)((watch - (double)(time_t)watch) * 1e9)};
    pselect(0, NULL, NULL, NULL, &interval, &wait_mask);
    if (stop_requested)
      break;
  }

done:
  dlrt_shutdown();
  return status;
}
