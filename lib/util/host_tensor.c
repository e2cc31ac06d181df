/* host_tensor.c — host tensors, the plain arrays that cross the API: the
 * executor exports them (lib/exec) and the file formats read them
 * (lib/data); both free them here, below both. */
#include "config.h"

#include <stdlib.h>

#include "dlrt.h"

void dlrt_host_tensors_free(dlrt_host_tensor *tensors, int n) {
  for (int i = 0; tensors && i < n; i++) free(tensors[i].data);
  free(tensors);
}
