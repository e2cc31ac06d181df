/* process_registry.h — the file each dlrt process keeps of what its device
 * allocators hold, so that dlinfo can list every process of every device, as
 * nvidia-smi does for CUDA (internal; the reader is dlrt_process_list).
 *
 * The file is <folder>/<pid>, the folder $XDG_RUNTIME_DIR/dlrt, else
 * /tmp/dlrt-<uid>, made 0700 and used only while it is a real folder of
 * ours that nobody else may enter. A thread of the registry polls the
 * allocators' counters every 200 ms (the allocator itself does nothing
 * more per allocation) and, when they changed or 2 s have passed, writes
 * the file whole to a temporary name and renames it over the last one, so a
 * reader never sees half of one. Text, version 1:
 *
 *   dlrt-process 1
 *   pid 4242
 *   start 8815310                  (clock ticks after boot, /proc/PID/stat; 0: unknown)
 *   name dltrain
 *   device cpu cpu:0 RESERVED ALLOCATED PEAK UPDATED_MS NAME OF THE DEVICE
 *   end
 *
 * one `device` line per device whose allocator ever held memory (bytes;
 * UPDATED_MS: Unix time of the write in ms; the name runs to the end of the
 * line). The file goes when the last device closes (dlrt_shutdown); a reader
 * removes the file of a process that has gone (or whose pid now names a
 * later process). Nothing here ever fails the caller's work: an unusable
 * folder or a failed write is reported once on stderr and the process goes
 * unlisted. DLRT_PROCESS_REGISTRY=0 turns the registry off. */
#ifndef DLRT_MEM_PROCESS_REGISTRY_H
#define DLRT_MEM_PROCESS_REGISTRY_H

#include "mem/caching_allocator.h"

/* Lists `alloc` (device memory of the device `props` describes) in this
 * process's file from now on. DLRT_ERR_INVALID_ARG when DLRT_PROCESS_REGISTRY
 * is neither 0 nor 1; DLRT_OK otherwise, whether or not a file can be kept. */
int dlrt__procreg_add(dlrt__allocator *alloc, const dlrt_device_props *props);
/* Stops listing `alloc` (before it is destroyed): the file is rewritten
 * without it, or removed with the last one. A NULL or unknown one is a no-op. */
void dlrt__procreg_remove(dlrt__allocator *alloc);

/* What the writer and the reader (process_list.c) share. */
#define DLRT__PROCREG_MAGIC "dlrt-process 1"
/* The longest file a reader accepts, bytes (a line per device is ~200). */
#define DLRT__PROCREG_MAX_FILE (64 * 1024)

/* The folder: $XDG_RUNTIME_DIR/dlrt for an absolute XDG_RUNTIME_DIR, else
 * /tmp/dlrt-<uid>. */
void dlrt__procreg_folder(char *buf, size_t size);
/* Opens the folder (made 0700 first when `create` and absent) once it is
 * known to be a folder, not a symbolic link, owned by this user, that no
 * one else may enter (no group or other bits); returns the descriptor, or
 * -1 with *absent set (it does not exist, and `create` is 0), or -1 with
 * `why` (naming the folder and the fix). */
int dlrt__procreg_folder_open(int create, int *absent, char *why, size_t size);
/* A process's state letter ('R', 'S', 'Z', ...) and start time (clock ticks
 * after boot) from /proc/PID/stat: 0, or -1 where it cannot be read. */
int dlrt__proc_stat(int pid, char *state, uint64_t *start);

#endif
