/* registry.h — the compiled backends and their devices (internal). */
#ifndef DLRT_DEVICE_REGISTRY_H
#define DLRT_DEVICE_REGISTRY_H

#include "device/device.h"

/* Makes sure dlrt_init() ran; returns its status. */
int dlrt__ensure_init(void);

#endif
