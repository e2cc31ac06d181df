"""Devices, their memory statistics and budgets.

dlrt.devices() lists every device of every backend that started (cpu, opencl,
cuda); dlrt.device("opencl:0") opens one by its spec. Devices belong to the
library and live as long as the process.
"""

import ctypes

from . import _structs as S
from ._lib import lib, text
from .errors import check

KINDS = {0: "cpu", 1: "integrated", 2: "discrete"}  # dlrt_device_kind


def parse_size(size, total=0):
    """Bytes of "256M", "1.5G", "4096" (or an int), "50%" of `total`."""
    if isinstance(size, int) and not isinstance(size, bool):
        if size < 0:
            raise ValueError("a size is >= 0, not %d" % size)
        return size
    out = ctypes.c_uint64()
    check(lib.dlrt_parse_size(str(size).encode(), total, ctypes.byref(out)))
    return out.value


def _counters(prefix, counter):
    return {prefix + ".all.current": counter.current, prefix + ".all.peak": counter.peak}


def _stats_dict(s):
    """dlrt_mem_stats as torch.cuda.memory_stats() names its figures."""
    out = {}
    out.update(_counters("allocated_bytes", s.allocated))
    out.update(_counters("requested_bytes", s.requested))
    out.update(_counters("reserved_bytes", s.reserved))
    out.update(_counters("active_bytes", s.active))
    out.update(_counters("segment", s.segments))
    out.update({
        "allocation.all.allocated": s.alloc_count,
        "allocation.all.freed": s.free_count,
        "allocation.all.current": s.alloc_count - s.free_count,
        "num_alloc_retries": s.retries,
        "num_ooms": s.oom_count,
        "num_device_alloc": s.driver_allocs,
        "num_device_free": s.driver_frees,
        # dlrt's own: the cache and the budget.
        "num_cache_hits": s.cache_hits,
        "cached_free_bytes": s.cached_free,
        "largest_free_block_bytes": s.largest_free,
        "fragmentation": s.fragmentation,
        "limit_bytes": s.limit,
    })
    return out


class Device:
    """One device: its properties, memory statistics and budget."""

    __slots__ = ("_handle", "spec")

    def __init__(self, handle):
        self._handle = ctypes.c_void_p(handle)
        self.spec = text(lib.dlrt_device_spec(self._handle))

    @property
    def handle(self):
        """The dlrt_device_t pointer (an int)."""
        return self._handle.value

    def properties(self):
        """dlrt_device_props as a dict; free_memory is read now."""
        p = S.DeviceProps()
        check(lib.dlrt_device_props_get(self._handle, ctypes.byref(p)))
        d = p.as_dict()
        d["kind"] = KINDS.get(p.kind, str(p.kind))
        d["host_addressable"] = bool(p.host_addressable)
        return d

    def _prop(self, key):
        return self.properties()[key]

    name = property(lambda self: self._prop("name"))
    vendor = property(lambda self: self._prop("vendor"))
    backend = property(lambda self: self._prop("backend"))
    driver = property(lambda self: self._prop("driver"))
    kind = property(lambda self: self._prop("kind"))
    index = property(lambda self: self._prop("index"))
    total_memory = property(lambda self: self._prop("total_memory"))
    free_memory = property(lambda self: self._prop("free_memory"))
    host_addressable = property(lambda self: self._prop("host_addressable"))

    @property
    def memory(self):
        """(total, free) bytes, free as the driver reports it now."""
        p = self.properties()
        return p["total_memory"], p["free_memory"]

    def memory_stats(self):
        """The caching allocator's figures, keyed as torch.cuda.memory_stats()
        keys them ("allocated_bytes.all.current", "reserved_bytes.all.peak",
        "num_ooms", ...), plus dlrt's cache and budget ("limit_bytes")."""
        s = S.MemStats()
        check(lib.dlrt_mem_stats_get(self._handle, ctypes.byref(s)))
        return _stats_dict(s)

    def host_memory_stats(self):
        """The same for the device's pinned host pool."""
        s = S.MemStats()
        check(lib.dlrt_host_stats_get(self._handle, ctypes.byref(s)))
        return _stats_dict(s)

    def memory_summary(self):
        """The allocator's and the pinned pool's tables, as dlinfo prints them."""
        need = check(lib.dlrt_mem_summary(self._handle, None, 0))
        buf = ctypes.create_string_buffer(need + 1)
        check(lib.dlrt_mem_summary(self._handle, buf, len(buf)))
        return text(buf.value)

    def reset_peak_memory_stats(self):
        check(lib.dlrt_mem_reset_peak(self._handle))

    def empty_cache(self):
        """Returns cached, unused memory to the driver."""
        check(lib.dlrt_mem_empty_cache(self._handle))

    @property
    def memory_limit(self):
        """The allocator's budget in bytes (0: the device's memory)."""
        return lib.dlrt_mem_get_limit(self._handle)

    @memory_limit.setter
    def memory_limit(self, size):
        self.set_memory_limit(size)

    def set_memory_limit(self, size):
        """Sets the budget: bytes, "2G", "512M" or "50%" of the device; 0 or
        None: no budget beyond the device's memory."""
        total = self.total_memory
        check(lib.dlrt_mem_set_limit(self._handle, parse_size(size or 0, total)))

    def synchronize(self):
        """Waits for the work queued on every stream of the device."""
        check(lib.dlrt_device_synchronize(self._handle))

    def dlpack_device(self):
        """(DLPack device type, id): (1, 0) cpu, (2, i) cuda, (4, i) opencl."""
        t, i = ctypes.c_int32(), ctypes.c_int32()
        check(lib.dlrt_dlpack_device(self._handle, ctypes.byref(t), ctypes.byref(i)))
        return t.value, i.value

    def __eq__(self, other):
        return isinstance(other, Device) and other.handle == self.handle

    def __hash__(self):
        return hash(self.handle)

    def __repr__(self):
        return "dlrt.Device(%r)" % self.spec


def device(spec=None):
    """The device a spec names: "cpu", "cpu:0", "opencl:1", "cuda:0", "auto";
    a Device is returned as it is; None: $DLRT_DEVICE, else auto."""
    if isinstance(spec, Device):
        return spec
    handle = ctypes.c_void_p()
    check(lib.dlrt_device_open(spec.encode() if spec else None, ctypes.byref(handle)))
    return Device(handle.value)


def devices():
    """Every device of every backend that started, in dlrt's order."""
    out = []
    for i in range(check(lib.dlrt_device_count())):
        handle = ctypes.c_void_p()
        check(lib.dlrt_device_get(i, ctypes.byref(handle)))
        out.append(Device(handle.value))
    return out


def backends():
    """{name: started} for every backend of this build ("cpu": True, ...)."""
    out = {}
    for i in range(lib.dlrt_backend_count()):
        name = text(lib.dlrt_backend_name(i))
        out[name] = check(lib.dlrt_backend_available(name.encode())) == 1
    return out


def set_cpu_threads(threads):
    """Threads of the cpu backend's kernels and GEMM (0: all cores)."""
    check(lib.dlrt_set_cpu_threads(int(threads)))
