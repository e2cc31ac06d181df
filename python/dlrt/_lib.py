"""Finding and loading libdlrt, and the C functions the package calls.

The library is found, in this order, through
  1. $DLRT_LIBRARY, a path to libdlrt.so (a build tree's .libs/libdlrt.so);
  2. pkg-config's dlrt.pc (its libdir), as `make install` leaves it;
  3. the default loader path (ld.so.cache, LD_LIBRARY_PATH): libdlrt.so.0.
Every function used is declared here with its argument and result types, so
that ctypes converts (and checks) each argument as the C header says.
"""

import ctypes
import ctypes.util
import os
import shutil
import subprocess

from . import _structs as S

c_int, c_int32, c_int64, c_uint64 = ctypes.c_int, ctypes.c_int32, ctypes.c_int64, ctypes.c_uint64
c_size_t, c_float, c_double = ctypes.c_size_t, ctypes.c_float, ctypes.c_double
c_char_p, c_void_p = ctypes.c_char_p, ctypes.c_void_p
P = ctypes.POINTER

SONAME = "libdlrt.so.0"


class LibraryNotFound(ImportError):
    """libdlrt could not be loaded from any of the places tried."""


def _pkg_config_libdir():
    """dlrt.pc's libdir, or None when pkg-config or dlrt.pc is missing."""
    exe = shutil.which("pkg-config")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--variable=libdir", "dlrt"], capture_output=True, text=True,
                             timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    libdir = out.stdout.strip()
    return libdir if out.returncode == 0 and libdir else None


def _candidates():
    """(where it came from, what to dlopen) in the order tried."""
    env = os.environ.get("DLRT_LIBRARY")
    if env:
        # Named explicitly: that one or nothing, so that a wrong path is an
        # error rather than another libdlrt loaded silently.
        return [("$DLRT_LIBRARY", env)]
    found = []
    libdir = _pkg_config_libdir()
    if libdir:
        for name in (SONAME, "libdlrt.so"):
            path = os.path.join(libdir, name)
            if os.path.exists(path):
                found.append(("pkg-config dlrt (libdir %s)" % libdir, path))
                break
    name = ctypes.util.find_library("dlrt")
    if name:
        found.append(("the loader's cache", name))
    found.append(("the default loader path", SONAME))
    return found


def _load():
    tried = []
    for where, path in _candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s: %s (%s)" % (where, path, e))
    raise LibraryNotFound(
        "libdlrt not found; tried " + "; ".join(tried) + ". Set DLRT_LIBRARY to the path of "
        "libdlrt.so (a build's .libs/libdlrt.so), or install dlrt (make install) so that "
        "pkg-config finds dlrt.pc (PKG_CONFIG_PATH) and the loader finds the library "
        "(ldconfig or LD_LIBRARY_PATH)")


lib, path = _load()

# Callback types of the C API.
PROGRESS_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int64, c_int64, P(S.EpochStats))
IS_VALID_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_char_p)
GET_POINTER_FN = ctypes.CFUNCTYPE(c_void_p, c_void_p, c_char_p)

# name: (result type, argument types), as lib/dlrt/*.h declares them.
_SIGNATURES = {
    # status and library
    "dlrt_version_string": (c_char_p, []),
    "dlrt_strerror": (c_char_p, [c_int]),
    "dlrt_err_name": (c_char_p, [c_int]),
    "dlrt_last_error": (c_char_p, []),
    "dlrt_clear_error": (None, []),
    "dlrt_init": (c_int, []),
    "dlrt_parse_size": (c_int, [c_char_p, c_uint64, P(c_uint64)]),
    "dlrt_set_cpu_threads": (c_int, [c_int]),
    "dlrt_dtype_size": (c_size_t, [c_int]),
    "dlrt_dtype_name": (c_char_p, [c_int]),
    # backends and devices
    "dlrt_backend_count": (c_int, []),
    "dlrt_backend_name": (c_char_p, [c_int]),
    "dlrt_backend_available": (c_int, [c_char_p]),
    "dlrt_device_count": (c_int, []),
    "dlrt_device_get": (c_int, [c_int, P(c_void_p)]),
    "dlrt_device_open": (c_int, [c_char_p, P(c_void_p)]),
    "dlrt_device_props_get": (c_int, [c_void_p, P(S.DeviceProps)]),
    "dlrt_device_spec": (c_char_p, [c_void_p]),
    "dlrt_device_synchronize": (c_int, [c_void_p]),
    "dlrt_device_kind_name": (c_char_p, [c_int]),
    "dlrt_device_default_stream": (c_void_p, [c_void_p]),
    "dlrt_stream_synchronize": (c_int, [c_void_p]),
    # memory
    "dlrt_buffer_alloc": (c_int, [c_void_p, c_size_t, c_void_p, P(c_void_p)]),
    "dlrt_buffer_free": (None, [c_void_p]),
    "dlrt_buffer_retain": (c_int, [c_void_p]),
    "dlrt_buffer_wrap_host": (c_int, [c_void_p, c_void_p, c_size_t, P(c_void_p)]),
    "dlrt_buffer_size": (c_size_t, [c_void_p]),
    "dlrt_buffer_device": (c_void_p, [c_void_p]),
    "dlrt_buffer_host_ptr": (c_void_p, [c_void_p]),
    "dlrt_mem_set_limit": (c_int, [c_void_p, c_uint64]),
    "dlrt_mem_get_limit": (c_uint64, [c_void_p]),
    "dlrt_mem_empty_cache": (c_int, [c_void_p]),
    "dlrt_mem_stats_get": (c_int, [c_void_p, P(S.MemStats)]),
    "dlrt_host_stats_get": (c_int, [c_void_p, P(S.MemStats)]),
    "dlrt_mem_reset_peak": (c_int, [c_void_p]),
    "dlrt_mem_summary": (c_int, [c_void_p, c_char_p, c_size_t]),
    # copies and kernels
    "dlrt_copy_h2d": (c_int, [c_void_p, c_size_t, c_void_p, c_size_t, c_void_p]),
    "dlrt_copy_d2h": (c_int, [c_void_p, c_void_p, c_size_t, c_size_t, c_void_p]),
    "dlrt_copy_d2d": (c_int, [c_void_p, c_size_t, c_void_p, c_size_t, c_size_t, c_void_p]),
    "dlrt_memset": (c_int, [c_void_p, c_size_t, c_int, c_size_t, c_void_p]),
    "dlrt_elementwise": (c_int, [c_void_p, c_int, c_int, c_int64, c_float, c_void_p, c_size_t,
                                 c_void_p, c_size_t, c_void_p, c_size_t]),
    # DLPack
    "dlrt_dlpack_device": (c_int, [c_void_p, P(c_int32), P(c_int32)]),
    "dlrt_dlpack_export": (c_int, [c_void_p, c_size_t, c_int, c_int, P(c_int64), c_int,
                                   c_uint64, P(c_void_p)]),
    "dlrt_dlpack_capsule_name": (c_void_p, [c_int]),
    "dlrt_dlpack_capsule_calls": (c_int, [IS_VALID_FN, GET_POINTER_FN]),
    # data
    "dlrt_dataset_load_splits": (c_int, [c_char_p, c_int, P(S.Dataset)]),
    "dlrt_dataset_generate": (c_int, [c_int64, c_int, c_uint64, P(S.Dataset)]),
    "dlrt_dataset_free": (None, [P(S.Dataset)]),
    "dlrt_tokens_load": (c_int, [c_char_p, P(S.Tokens)]),
    "dlrt_tokens_split": (c_int, [P(S.Tokens), c_int, P(S.Tokens)]),
    "dlrt_tokens_free": (None, [P(S.Tokens)]),
    "dlrt_dataset_from_tokens": (c_int, [P(S.Tokens), c_int64, P(S.Dataset)]),
    # models, the trainer and the planner
    "dlrt_optimizer_defaults": (S.Optimizer, [c_int]),
    "dlrt_optimizer_name": (c_char_p, [c_int]),
    "dlrt_loss_scaler_defaults": (S.LossScaler, []),
    "dlrt_gpt_preset": (c_int, [c_char_p, P(S.GptConfig)]),
    "dlrt_gpt_preset_name": (c_char_p, [c_int]),
    "dlrt_gpt_override": (None, [P(S.GptConfig), P(S.GptConfig)]),
    "dlrt_gpt_check": (c_int, [P(S.GptConfig)]),
    "dlrt_gpt_params": (c_int64, [P(S.GptConfig)]),
    "dlrt_lr_at": (c_float, [P(S.TrainerConfig), c_int64]),
    "dlrt_trainer_create": (c_int, [c_void_p, P(S.TrainerConfig), c_int64, c_int64, c_int,
                                    P(c_void_p)]),
    "dlrt_trainer_destroy": (None, [c_void_p]),
    "dlrt_trainer_epoch_from": (c_int, [c_void_p, P(S.Dataset), c_int, c_int64, c_int64,
                                        PROGRESS_FN, c_void_p, P(S.EpochStats)]),
    "dlrt_trainer_set_progress_every": (c_int, [c_void_p, c_int64]),
    "dlrt_trainer_epoch_updates": (c_int64, [c_void_p, P(S.Dataset)]),
    "dlrt_trainer_evaluate": (c_int, [c_void_p, P(S.Dataset), P(S.EpochStats)]),
    "dlrt_trainer_save": (c_int, [c_void_p, c_char_p, c_int]),
    "dlrt_trainer_load": (c_int, [c_void_p, c_char_p, P(c_int)]),
    "dlrt_trainer_info": (c_int, [c_void_p, P(S.ExecInfo)]),
    "dlrt_trainer_loss_scale": (c_int, [c_void_p, P(S.LossScaleState)]),
    "dlrt_save_path_check": (c_int, [c_char_p]),
    "dlrt_plan_memory": (c_int, [P(S.TrainerConfig), c_int64, c_int64, c_int64, c_int,
                                 P(S.MemoryPlan)]),
    "dlrt_plan_max_batch": (c_int, [P(S.TrainerConfig), c_int64, c_int64, c_int64, c_int,
                                    c_uint64, P(S.MemoryPlan)]),
    "dlrt_plan_what_if": (c_int, [c_double, c_uint64, P(S.WhatIf), P(c_int)]),
    "dlrt_machine_get": (c_int, [c_char_p, c_void_p, P(S.Machine)]),
    "dlrt_split_search": (c_int, [P(S.TrainerConfig), c_int64, P(S.SplitLimits),
                                  P(S.Machine), P(S.Split), c_int, P(c_int), P(c_int),
                                  P(c_int)]),
    "dlrt_simulate_step": (c_int, [P(S.TrainerConfig), c_int64, c_int64, c_int64, c_int,
                                   P(S.Machine), c_void_p, P(S.SimulatedStep)]),
    "dlrt_plan_placement": (c_int, [P(S.TrainerConfig), c_int64, c_int64, c_int64, c_int,
                                    c_uint64, c_uint64, P(S.Machine), P(S.Placement)]),
    "dlrt_placement_apply": (None, [P(S.Placement), P(S.TrainerConfig)]),
}

for _name, (_res, _args) in _SIGNATURES.items():
    _f = getattr(lib, _name)  # AttributeError names a library older than this package
    _f.restype = _res
    _f.argtypes = _args

# The PyCapsule destructor, in C (lib/mem/dlpack.c): its address is what
# PyCapsule_New takes.
capsule_destructor = ctypes.cast(lib.dlrt_dlpack_capsule_destructor, c_void_p).value


def text(value):
    """A C string the library returned, as str ('' for NULL)."""
    return value.decode("utf-8", "replace") if value else ""


def version():
    """The library's version string ("0.1.0")."""
    return text(lib.dlrt_version_string())
