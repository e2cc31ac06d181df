/* ptrmap.h — open-addressing hash map from pointers to pointers (internal).
 * Not thread-safe: callers hold their own lock. */
#ifndef DLRT_UTIL_PTRMAP_H
#define DLRT_UTIL_PTRMAP_H

#include <stddef.h>

typedef struct {
  void **keys;   /* NULL: empty slot; TOMBSTONE: deleted */
  void **values;
  size_t capacity; /* power of two, or 0 */
  size_t used;     /* live + tombstones */
  size_t live;
} dlrt__ptrmap;

/* 0 on success, -1 when out of memory. Replaces an existing key's value. */
int dlrt__ptrmap_put(dlrt__ptrmap *m, void *key, void *value);
/* The value, or NULL when absent. */
void *dlrt__ptrmap_get(const dlrt__ptrmap *m, const void *key);
/* Removes and returns the value, or NULL when absent. */
void *dlrt__ptrmap_remove(dlrt__ptrmap *m, const void *key);
void dlrt__ptrmap_clear(dlrt__ptrmap *m);

#endif
