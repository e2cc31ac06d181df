/* ptrmap.c — linear-probing hash map keyed by pointer. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>

#include "util/ptrmap.h"

static char tombstone_byte;
#define TOMBSTONE ((void *)&tombstone_byte)

static size_t hash_ptr(const void *p) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return (size_t)x;
}

static size_t find_slot(const dlrt__ptrmap *m, const void *key) {
  size_t mask = m->capacity - 1, i = hash_ptr(key) & mask;
  while (m->keys[i] && m->keys[i] != key) i = (i + 1) & mask;
  return i;
}

static int grow(dlrt__ptrmap *m) {
  size_t cap = m->capacity ? m->capacity * 2 : 64;
  /* Mostly tombstones: rehash at the same size. */
  if (m->capacity && m->live * 4 < m->capacity) cap = m->capacity;
  dlrt__ptrmap n = {calloc(cap, sizeof(void *)), calloc(cap, sizeof(void *)), cap, 0, 0};
  if (!n.keys || !n.values) {
    free(n.keys);
    free(n.values);
    return -1;
  }
  for (size_t i = 0; i < m->capacity; i++)
    if (m->keys[i] && m->keys[i] != TOMBSTONE) {
      size_t j = find_slot(&n, m->keys[i]);
      n.keys[j] = m->keys[i];
      n.values[j] = m->values[i];
      n.used++;
      n.live++;
    }
  free(m->keys);
  free(m->values);
  *m = n;
  return 0;
}

int dlrt__ptrmap_put(dlrt__ptrmap *m, void *key, void *value) {
  if ((m->used + 1) * 4 > m->capacity * 3 && grow(m) < 0) return -1;
  size_t mask = m->capacity - 1, i = hash_ptr(key) & mask, reuse = SIZE_MAX;
  for (; m->keys[i]; i = (i + 1) & mask) {
    if (m->keys[i] == key) {
      m->values[i] = value;
      return 0;
    }
    if (m->keys[i] == TOMBSTONE && reuse == SIZE_MAX) reuse = i;
  }
  if (reuse != SIZE_MAX) i = reuse;
  else m->used++;
  m->keys[i] = key;
  m->values[i] = value;
  m->live++;
  return 0;
}

void *dlrt__ptrmap_get(const dlrt__ptrmap *m, const void *key) {
  if (!m->capacity || !key) return NULL;
  size_t i = find_slot(m, key);
  return m->keys[i] ? m->values[i] : NULL;
}

void *dlrt__ptrmap_remove(dlrt__ptrmap *m, const void *key) {
  if (!m->capacity || !key) return NULL;
  size_t i = find_slot(m, key);
  if (!m->keys[i]) return NULL;
  void *v = m->values[i];
  m->keys[i] = TOMBSTONE;
  m->values[i] = NULL;
  m->live--;
  return v;
}

void dlrt__ptrmap_clear(dlrt__ptrmap *m) {
  free(m->keys);
  free(m->values);
  *m = (dlrt__ptrmap){0};
}
