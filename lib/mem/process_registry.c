/* process_registry.c — the writer of this process's registry file (the
 * format and the rules are in process_registry.h), and the folder and
 * /proc helpers it shares with the reader (process_list.c).
 *
 * Locks: `lifecycle` (add and remove: starting and joining the thread) is
 * taken before `preg.lock` (the list, the file), which is taken before an
 * allocator's lock (dlrt__allocator_usage). No allocator path takes either,
 * so an allocation never waits for the registry, nor the registry for I/O
 * other than its own. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mem/process_registry.h"
#include "util/clock.h"
#include "util/status.h"

enum {
  POLL_MS = 200,      /* how often the thread reads the counters */
  HEARTBEAT_MS = 2000 /* the file is rewritten this often even when nothing changed */
};

/* One device's allocator, and its counters as last written. */
typedef struct tracked {
  dlrt__allocator *alloc;
  char backend[16], spec[32], name[128];
  uint64_t reserved, allocated, peak;
  struct tracked *next;
} tracked;

static pthread_mutex_t lifecycle = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t setup_once = PTHREAD_ONCE_INIT;

static struct {
  pthread_mutex_t lock; /* everything below */
  pthread_cond_t wake;  /* the thread's sleep, on CLOCK_MONOTONIC */
  tracked *devices;
  pthread_t thread;
  int running, stop;
  int dir_fd;           /* the folder, -1 until the first write opens it */
  int off;              /* the folder is unusable: no file until the last device goes */
  int forked;           /* a child of fork(): the file and the thread are the parent's */
  int warned;           /* a failure was reported on stderr (once a process) */
  int have_file, dirty; /* dirty: the counters changed since the last write that worked */
  double last_write_ms; /* CLOCK_MONOTONIC */
  uint64_t start;       /* this process's start time, clock ticks after boot (0: unknown) */
  char name[64];        /* this process's name */
} preg = {.lock = PTHREAD_MUTEX_INITIALIZER, .dir_fd = -1};

/* ---------------------------------------------------------------- shared helpers */

void dlrt__procreg_folder(char *buf, size_t size) {
  const char *run = getenv("XDG_RUNTIME_DIR");
  if (run && run[0] == '/')
    snprintf(buf, size, "%s/dlrt", run);
  else
    snprintf(buf, size, "/tmp/dlrt-%lu", (unsigned long)geteuid());
}

int dlrt__procreg_folder_open(int create, int *absent, char *why, size_t size) {
  char path[4096];
  struct stat st;
  *absent = 0;
  dlrt__procreg_folder(path, sizeof path);
  int made = create && mkdir(path, 0700) == 0;
  /* O_NOFOLLOW: a link in the folder's place is refused, not followed; the
   * checks then hold for the folder the descriptor names, whatever is
   * renamed afterwards. */
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT && !create) {
      *absent = 1;
    } else if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
      snprintf(why, size, "%s is a symbolic link, which could lead anywhere: remove it (or "
               "point XDG_RUNTIME_DIR at a folder of your own)", path);
    } else {
      snprintf(why, size, "cannot open the folder %s: %s", path, strerror(err));
    }
    return -1;
  }
  if (made) fchmod(fd, 0700); /* whatever the umask took */
  const char *wrong = NULL;
  if (fstat(fd, &st) < 0) wrong = strerror(errno);
  else if (st.st_uid != geteuid()) wrong = "it belongs to another user";
  else if (st.st_mode & 077) wrong = "others may enter it (its mode is not 0700)";
  else if ((st.st_mode & 0700) != 0700) wrong = "its owner cannot use it (mode 0700 needed)";
  if (wrong) {
    snprintf(why, size, "%s cannot hold the registry: %s; remove it (a new one is made "
             "0700), or point XDG_RUNTIME_DIR at a folder of your own", path, wrong);
    close(fd);
    return -1;
  }
  return fd;
}

int dlrt__proc_stat(int pid, char *state, uint64_t *start) {
  char path[64], text[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "re");
  if (!f) return -1;
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  /* "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses, so
   * the fields are counted from the last ')'. The start time is field 22. */
  char *p = strrchr(text, ')');
  if (!p || p[1] != ' ' || !p[2]) return -1;
  *state = p[2];
  p += 3;
  for (int field = 4; field < 22; field++) {
    p = strchr(p + 1, ' ');
    if (!p) return -1;
  }
  char *end;
  errno = 0;
  unsigned long long v = strtoull(p + 1, &end, 10);
  if (errno || end == p + 1) return -1;
  *start = v;
  return 0;
}

/* ---------------------------------------------------------------- the writer */

/* Copies `src` with control characters (newlines above all) made '?', so a
 * name cannot break the file's lines. */
static void copy_printable(char *dst, size_t size, const char *src) {
  snprintf(dst, size, "%s", src);
  for (char *c = dst; *c; c++)
    if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
  if (!*dst) snprintf(dst, size, "?");
}

/* Reported on stderr once a process: the registry never fails the caller's
 * work, but a person who expects dlinfo to list the process learns why not. */
DLRT__PRINTF(1, 2) static void warn_once(const char *fmt, ...) {
  if (preg.warned) return;
  preg.warned = 1;
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  fprintf(stderr, "dlrt: process registry: %s; dlinfo will not list this process "
          "(DLRT_PROCESS_REGISTRY=0 turns the registry off)\n", text);
}

static int write_all(int fd, const char *text, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, text, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    text += n;
    len -= (size_t)n;
  }
  return 0;
}

/* The file's text for the devices that ever held memory (malloc'd, or NULL
 * when there is none or no room). */
static char *compose_locked(size_t *len) {
  size_t lines = 0;
  for (tracked *t = preg.devices; t; t = t->next) lines += t->reserved || t->peak;
  if (!lines) return NULL;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  uint64_t unix_ms = (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000;
  /* Room enough: a device line is at most ~270 bytes (backend 15, spec 31,
   * four 20-digit numbers, name 127), the rest under 256 with the name. */
  size_t cap = 256 + sizeof preg.name + lines * 320, used = 0;
  char *text = malloc(cap);
  if (!text) return NULL;
  used += (size_t)snprintf(text + used, cap - used,
                           DLRT__PROCREG_MAGIC "\npid %ld\nstart %" PRIu64 "\nname %s\n",
                           (long)getpid(), preg.start, preg.name);
  for (tracked *t = preg.devices; t; t = t->next)
    if (t->reserved || t->peak)
      used += (size_t)snprintf(text + used, cap - used,
                               "device %s %s %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64
                               " %s\n", t->backend, t->spec, t->reserved, t->allocated,
                               t->peak, unix_ms, t->name);
  used += (size_t)snprintf(text + used, cap - used, "end\n");
  *len = used;
  return text;
}

/* Writes the file whole under a temporary name and renames it over the last
 * one (removes it when no device holds memory). 0 when the file is as the
 * counters say (or the registry is off), -1 to try again later. */
static int write_locked(void) {
  char why[4400], file[32], temp[40];
  int absent;
  if (preg.off || preg.forked) return 0;
  if (preg.dir_fd < 0 && (preg.dir_fd = dlrt__procreg_folder_open(1, &absent, why,
                                                                  sizeof why)) < 0) {
    preg.off = 1;
    warn_once("%s", why);
    return 0;
  }
  snprintf(file, sizeof file, "%ld", (long)getpid());
  snprintf(temp, sizeof temp, ".%ld.tmp", (long)getpid());
  size_t len = 0;
  char *text = compose_locked(&len);
  if (!text) {
    /* No device holds memory: no line to write, and no file to keep. */
    if (preg.have_file) unlinkat(preg.dir_fd, file, 0);
    preg.have_file = 0;
    return 0;
  }
  int fd = openat(preg.dir_fd, temp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
                  0600);
  int ok = fd >= 0 && write_all(fd, text, len) == 0;
  int err = errno;
  if (fd >= 0 && close(fd) < 0 && ok) ok = 0, err = errno;
  if (ok && renameat(preg.dir_fd, temp, preg.dir_fd, file) < 0) ok = 0, err = errno;
  free(text);
  if (!ok) {
    if (fd >= 0) unlinkat(preg.dir_fd, temp, 0);
    char folder[4096];
    dlrt__procreg_folder(folder, sizeof folder);
    warn_once("cannot write %s/%s: %s", folder, file, strerror(err));
    return -1;
  }
  preg.have_file = 1;
  preg.last_write_ms = dlrt__now_ms();
  return 0;
}

/* Reads every allocator's counters; writes the file when they changed, when
 * the last write failed, or when the heartbeat is due. */
static void refresh_locked(void) {
  for (tracked *t = preg.devices; t; t = t->next) {
    uint64_t reserved, allocated, peak;
    dlrt__allocator_usage(t->alloc, &reserved, &allocated, &peak);
    if (reserved != t->reserved || allocated != t->allocated || peak != t->peak) preg.dirty = 1;
    t->reserved = reserved;
    t->allocated = allocated;
    t->peak = peak;
  }
  int due = preg.have_file && dlrt__now_ms() - preg.last_write_ms >= HEARTBEAT_MS;
  if ((preg.dirty || due) && write_locked() == 0) preg.dirty = 0;
}

static void *poll_loop(void *arg) {
  (void)arg;
  pthread_mutex_lock(&preg.lock);
  while (!preg.stop) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += POLL_MS * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    while (!preg.stop && pthread_cond_timedwait(&preg.wake, &preg.lock, &until) != ETIMEDOUT) {
    }
    if (!preg.stop) refresh_locked();
  }
  pthread_mutex_unlock(&preg.lock);
  return NULL;
}

/* fork(): both locks are held across it, so the child's copies are
 * consistent; the child has no registry thread and keeps no file (its pid
 * is not the one the parent's file names, and its memory is a copy). */
static void fork_prepare(void) {
  pthread_mutex_lock(&lifecycle);
  pthread_mutex_lock(&preg.lock);
}

static void fork_parent(void) {
  pthread_mutex_unlock(&preg.lock);
  pthread_mutex_unlock(&lifecycle);
}

static void fork_child(void) {
  while (preg.devices) {
    tracked *t = preg.devices;
    preg.devices = t->next;
    free(t);
  }
  if (preg.dir_fd >= 0) close(preg.dir_fd);
  preg.dir_fd = -1;
  preg.running = preg.have_file = 0;
  preg.forked = 1;
  pthread_mutex_unlock(&preg.lock);
  pthread_mutex_unlock(&lifecycle);
}

/* Once a process: the condition variable on the monotonic clock, the fork
 * handlers, and what the file says of the process. */
static void setup(void) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&preg.wake, &attr);
  pthread_condattr_destroy(&attr);
  pthread_atfork(fork_prepare, fork_parent, fork_child);
  char state, comm[64] = "";
  if (dlrt__proc_stat((int)getpid(), &state, &preg.start) < 0) preg.start = 0;
  FILE *f = fopen("/proc/self/comm", "re");
  if (f) {
    if (!fgets(comm, sizeof comm, f)) comm[0] = '\0';
    fclose(f);
    comm[strcspn(comm, "\n")] = '\0';
  }
  copy_printable(preg.name, sizeof preg.name, *comm ? comm : program_invocation_short_name);
}

/* Starts the thread with every signal blocked, so that signals meant for the
 * program's own threads (a SIGINT handler's) never land on it. */
static void start_thread_locked(void) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  preg.stop = 0;
  preg.running = pthread_create(&preg.thread, NULL, poll_loop, NULL) == 0;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (!preg.running) warn_once("cannot start its thread");
}

int dlrt__procreg_add(dlrt__allocator *alloc, const dlrt_device_props *props) {
  const char *env = getenv("DLRT_PROCESS_REGISTRY");
  if (env && *env && strcmp(env, "1") != 0) {
    if (strcmp(env, "0") == 0) return DLRT_OK;
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "DLRT_PROCESS_REGISTRY=\"%s\" is neither 0 "
                           "(no registry file) nor 1 (the default: dlinfo lists the "
                           "process)", env);
  }
  tracked *t = calloc(1, sizeof *t);
  if (!t) return DLRT_OK; /* unlisted, as for any other registry failure */
  t->alloc = alloc;
  copy_printable(t->backend, sizeof t->backend, props->backend);
  copy_printable(t->spec, sizeof t->spec, props->spec);
  copy_printable(t->name, sizeof t->name, props->name);
  /* Spaces would split the words a reader counts. */
  for (char *c = t->backend; *c; c++) *c = *c == ' ' ? '_' : *c;
  for (char *c = t->spec; *c; c++) *c = *c == ' ' ? '_' : *c;
  pthread_once(&setup_once, setup);
  pthread_mutex_lock(&lifecycle);
  pthread_mutex_lock(&preg.lock);
  if (preg.forked) {
    free(t);
  } else {
    t->next = preg.devices;
    preg.devices = t;
    if (!preg.running) start_thread_locked();
  }
  pthread_mutex_unlock(&preg.lock);
  pthread_mutex_unlock(&lifecycle);
  return DLRT_OK;
}

void dlrt__procreg_remove(dlrt__allocator *alloc) {
  if (!alloc) return;
  pthread_mutex_lock(&lifecycle);
  pthread_mutex_lock(&preg.lock);
  tracked **link = &preg.devices;
  while (*link && (*link)->alloc != alloc) link = &(*link)->next;
  if (!*link) goto out;
  tracked *gone = *link;
  *link = gone->next;
  free(gone);
  if (preg.devices) {
    /* The file must not list a device that closes. */
    preg.dirty = 1;
    refresh_locked();
    goto out;
  }
  /* The last device: stop the thread, remove the file. */
  int running = preg.running;
  preg.stop = 1;
  pthread_cond_broadcast(&preg.wake);
  pthread_mutex_unlock(&preg.lock);
  if (running) pthread_join(preg.thread, NULL);
  pthread_mutex_lock(&preg.lock);
  preg.running = 0;
  if (preg.dir_fd >= 0) {
    char file[32];
    snprintf(file, sizeof file, "%ld", (long)getpid());
    if (preg.have_file) unlinkat(preg.dir_fd, file, 0);
    close(preg.dir_fd);
    preg.dir_fd = -1;
  }
  preg.have_file = preg.dirty = preg.off = 0;
out:
  pthread_mutex_unlock(&preg.lock);
  pthread_mutex_unlock(&lifecycle);
}
