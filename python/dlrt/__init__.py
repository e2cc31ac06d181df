"""dlrt from Python: devices and their memory, tensors shared through DLPack,
the memory planner and the trainer, over the C library libdlrt (ctypes).

    import dlrt
    dlrt.devices()                        # every device of every backend
    dlrt.device("cpu").memory_stats()     # as torch.cuda.memory_stats() keys it
    dlrt.plan(model="gpt3-175b", batch=1, precision="bf16", device_memory="40G")
    t = dlrt.Trainer(model="mlp", data="generated", limit=2048, threads=2)
    for m in t.fit(epochs=1): print(m)

The library is found through $DLRT_LIBRARY (a path to libdlrt.so), pkg-config's
dlrt.pc, or the default loader path; dlrt.library_path says which was loaded.
"""

from ._lib import LibraryNotFound, path as library_path, version
from .errors import (ApiVersion, BackendError, BadSpec, DeviceLost, Diverged, Error,
                     InvalidArgument, IOFailure, NoDevice, NotFound, OutOfMemory, OutOfRange,
                     StateError, SystemFailure, Unsupported, WrongDevice, statuses)
from .device import Device, backends, device, devices, parse_size, set_cpu_threads
from .tensor import (DTYPES, CopyWarning, Tensor, empty, from_dlpack, full, tensor, zeros)
from .plan import gpt_presets, plan
from .trainer import Trainer

__version__ = "0.1.0"

__all__ = [
    "ApiVersion", "BackendError", "BadSpec", "CopyWarning", "DTYPES", "Device", "DeviceLost",
    "Diverged", "Error", "IOFailure", "InvalidArgument", "LibraryNotFound", "NoDevice",
    "NotFound", "OutOfMemory", "OutOfRange", "StateError", "SystemFailure", "Tensor",
    "Trainer", "Unsupported", "WrongDevice", "backends", "device", "devices", "empty",
    "from_dlpack", "full", "gpt_presets", "library_path", "parse_size", "plan",
    "set_cpu_threads", "statuses", "tensor", "version", "zeros",
]
