/* process_list.c — the reader of the process registry (dlrt_process_list):
 * every live process's file, parsed; the files of gone processes removed.
 * The format is in process_registry.h. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mem/process_registry.h"
#include "util/status.h"

typedef struct {
  dlrt_process_usage *items;
  int count, capacity;
} usage_list;

/* A whole decimal number in [1, INT_MAX] spelled exactly by `s` (no sign,
 * no leading zero), e.g. the name of a process's file. */
static int parse_pid(const char *s, int *pid) {
  long long v = 0;
  if (*s < '1' || *s > '9') return 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9' || (v = v * 10 + (*s - '0')) > INT_MAX) return 0;
  }
  *pid = (int)v;
  return 1;
}

/* The pid of a writer's temporary file ".PID.tmp". */
static int parse_temp_name(const char *name, int *pid) {
  char digits[16];
  size_t len = strlen(name);
  if (len < 6 || len - 5 >= sizeof digits || name[0] != '.' || strcmp(name + len - 4, ".tmp"))
    return 0;
  memcpy(digits, name + 1, len - 5);
  digits[len - 5] = '\0';
  return parse_pid(digits, pid);
}

static int parse_u64(const char *s, uint64_t *out) {
  uint64_t v = 0;
  if (!*s) return 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9' || v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10) return 0;
    v = v * 10 + (uint64_t)(*s - '0');
  }
  *out = v;
  return 1;
}

/* The next space-separated word of *p (NUL-terminated in place), or NULL. */
static char *next_word(char **p) {
  char *w = *p;
  if (!*w || *w == ' ') return NULL;
  char *space = strchr(w, ' ');
  if (space) {
    *space = '\0';
    *p = space + 1;
  } else {
    *p = w + strlen(w);
  }
  return w;
}

/* Whether `pid` still runs as the process that wrote a file recording its
 * start time `start` (0: not recorded). A zombie has given its memory back;
 * a different start time means the pid now names a later process. Without
 * /proc, kill(2)'s answer stands. */
static int still_running(int pid, uint64_t start) {
  if (kill(pid, 0) < 0 && errno != EPERM) return 0;
  char state;
  uint64_t now_start;
  if (dlrt__proc_stat(pid, &state, &now_start) < 0) return 1;
  return state != 'Z' && state != 'X' && (!start || now_start == start);
}

static int list_push(usage_list *list, const dlrt_process_usage *u) {
  if (list->count == list->capacity) {
    int cap = list->capacity ? 2 * list->capacity : 16;
    dlrt_process_usage *grown = realloc(list->items, (size_t)cap * sizeof *grown);
    if (!grown) return -1;
    list->items = grown;
    list->capacity = cap;
  }
  list->items[list->count++] = *u;
  return 0;
}

/* One `device` line ("device BACKEND SPEC RESERVED ALLOCATED PEAK MS NAME"). */
static int parse_device_line(char *p, dlrt_process_usage *u) {
  char *backend = next_word(&p), *spec = next_word(&p);
  char *numbers[4];
  uint64_t values[4];
  for (int i = 0; i < 4; i++)
    if (!(numbers[i] = next_word(&p)) || !parse_u64(numbers[i], &values[i])) return 0;
  if (!backend || !spec || !*p || strlen(backend) >= sizeof u->backend ||
      strlen(spec) >= sizeof u->spec)
    return 0;
  snprintf(u->backend, sizeof u->backend, "%s", backend);
  snprintf(u->spec, sizeof u->spec, "%s", spec);
  snprintf(u->device, sizeof u->device, "%s", p);
  u->reserved = values[0];
  u->allocated = values[1];
  u->peak = values[2];
  u->updated = (double)values[3] / 1000.0;
  return 1;
}

/* Parses a whole file of process `pid` into `found` (entries with pid and
 * name set); 1 when it is complete and well formed, 0 otherwise. */
static int parse_file(char *text, int pid, uint64_t *start, usage_list *found) {
  dlrt_process_usage u;
  memset(&u, 0, sizeof u);
  u.pid = pid;
  char *save = NULL;
  int line_no = 0, file_pid = 0, complete = 0;
  for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    line_no++;
    if (complete) return 0; /* nothing may follow "end" */
    if (line_no == 1) {
      if (strcmp(line, DLRT__PROCREG_MAGIC)) return 0;
    } else if (!strncmp(line, "pid ", 4)) {
      if (!parse_pid(line + 4, &file_pid) || file_pid != pid) return 0;
    } else if (!strncmp(line, "start ", 6)) {
      if (!parse_u64(line + 6, start)) return 0;
    } else if (!strncmp(line, "name ", 5)) {
      snprintf(u.process, sizeof u.process, "%s", line + 5);
    } else if (!strncmp(line, "device ", 7)) {
      if (!file_pid || !parse_device_line(line + 7, &u) || list_push(found, &u) < 0) return 0;
    } else if (!strcmp(line, "end")) {
      complete = 1;
    } else {
      return 0;
    }
  }
  return complete && file_pid == pid;
}

/* Reads the file of process `pid` in the folder `dir`; 1 with its text
 * (malloc'd, NUL-terminated) when it is a regular file of ours that is not
 * too long, else 0. */
static int read_file(int dir, const char *name, char **text) {
  int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st;
  char *buf = NULL;
  size_t used = 0;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      st.st_size > DLRT__PROCREG_MAX_FILE || !(buf = malloc(DLRT__PROCREG_MAX_FILE + 1)))
    goto fail;
  for (;;) {
    ssize_t n = read(fd, buf + used, DLRT__PROCREG_MAX_FILE + 1 - used);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) goto fail;
    if (n == 0) break;
    used += (size_t)n;
    if (used > DLRT__PROCREG_MAX_FILE) goto fail;
  }
  close(fd);
  buf[used] = '\0';
  *text = buf;
  return 1;
fail:
  free(buf);
  close(fd);
  return 0;
}

/* Adds the devices of process `pid`'s file to `list`, or removes the file
 * when the process has gone. */
static int read_process(int dir, const char *name, int pid, usage_list *list) {
  char *text = NULL;
  if (!read_file(dir, name, &text)) return 0;
  usage_list found = {0};
  uint64_t start = 0;
  int ok = parse_file(text, pid, &start, &found);
  free(text);
  int rc = 0;
  if (!still_running(pid, ok ? start : 0)) {
    unlinkat(dir, name, 0);
  } else if (ok) {
    for (int i = 0; i < found.count && rc == 0; i++) rc = list_push(list, &found.items[i]);
  }
  /* A malformed file of a live process stays: it is not ours to judge. */
  free(found.items);
  return rc;
}

/* By pid, then spec: a process lists a device once. */
static int by_pid_spec(const void *a, const void *b) {
  const dlrt_process_usage *x = a, *y = b;
  return x->pid != y->pid ? (x->pid > y->pid) - (x->pid < y->pid) : strcmp(x->spec, y->spec);
}

int dlrt_process_list(dlrt_process_usage **out, int *count) {
  DLRT__CHECK_ARG(out && count, "out or count is NULL");
  *out = NULL;
  *count = 0;
  char why[4400];
  int absent;
  int fd = dlrt__procreg_folder_open(0, &absent, why, sizeof why);
  if (fd < 0)
    return absent ? DLRT_OK : dlrt__set_error(DLRT_ERR_SYSTEM, "process registry: %s", why);
  DIR *d = fdopendir(fd);
  if (!d) {
    int err = errno;
    close(fd);
    return dlrt__set_error(DLRT_ERR_SYSTEM, "process registry: cannot list its folder: %s",
                           strerror(err));
  }
  usage_list list = {0};
  int rc = 0;
  for (struct dirent *e; rc == 0 && (e = readdir(d));) {
    int pid;
    if (parse_pid(e->d_name, &pid))
      rc = read_process(dirfd(d), e->d_name, pid, &list);
    else if (parse_temp_name(e->d_name, &pid) && !still_running(pid, 0))
      unlinkat(dirfd(d), e->d_name, 0); /* left by a writer that was killed */
  }
  closedir(d);
  if (rc < 0) {
    free(list.items);
    return dlrt__set_error(DLRT_ERR_OOM, "out of host memory listing processes");
  }
  if (list.count > 1) /* qsort's array may not be NULL, even of 0 entries */
    qsort(list.items, (size_t)list.count, sizeof *list.items, by_pid_spec);
  *out = list.items;
  *count = list.count;
  return DLRT_OK;
}

void dlrt_process_list_free(dlrt_process_usage *list) { free(list); }

int dlrt_process_registry_dir(char *buf, size_t size) {
  DLRT__CHECK_ARG(buf && size, "buf is NULL or size 0");
  char path[4096];
  dlrt__procreg_folder(path, sizeof path);
  if (strlen(path) >= size)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "the registry folder %s needs %zu bytes, "
                           "not %zu", path, strlen(path) + 1, size);
  memcpy(buf, path, strlen(path) + 1);
  return DLRT_OK;
}
