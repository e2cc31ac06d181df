"""dlrt's status codes as Python exceptions.

Every failing call raises a subclass of dlrt.Error carrying the status
(`status`, the negative code; `name`, "DLRT_ERR_OOM") and the library's
message for it (dlrt_last_error: what went wrong and how to fix it).
"""

from ._lib import lib, text


class Error(Exception):
    """A dlrt call failed: .status (negative), .name ("DLRT_ERR_..."), .message."""

    def __init__(self, status, message, name=None):
        self.status = status
        self.name = name or text(lib.dlrt_err_name(status))
        self.message = message
        super().__init__("%s: %s" % (self.name, message) if message else self.name)


class InvalidArgument(Error, ValueError):
    """DLRT_ERR_INVALID_ARG"""


class OutOfMemory(Error, MemoryError):
    """DLRT_ERR_OOM: the device, or its budget, cannot hold it."""


class NoDevice(Error, LookupError):
    """DLRT_ERR_NO_DEVICE: a well-formed spec that names no device here."""


class BadSpec(InvalidArgument):
    """DLRT_ERR_BAD_SPEC: a malformed device spec."""


class BackendError(Error):
    """DLRT_ERR_BACKEND: a driver or vendor library call failed."""


class Unsupported(Error):
    """DLRT_ERR_UNSUPPORTED: the device cannot do this."""


class OutOfRange(Error, IndexError):
    """DLRT_ERR_OUT_OF_RANGE: an offset or size outside the buffer."""


class WrongDevice(Error):
    """DLRT_ERR_WRONG_DEVICE: an object of another device."""


class NotFound(Error, LookupError):
    """DLRT_ERR_NOT_FOUND"""


class ApiVersion(Error):
    """DLRT_ERR_API_VERSION"""


class IOFailure(Error, OSError):
    """DLRT_ERR_IO: an unreadable, truncated or corrupt file."""


class StateError(Error):
    """DLRT_ERR_STATE: the object is in the wrong state for this call."""


class SystemFailure(Error, OSError):
    """DLRT_ERR_SYSTEM: an operating-system call failed."""


class Diverged(Error, ArithmeticError):
    """DLRT_ERR_DIVERGED: training diverged (a loss of inf or NaN)."""


class DeviceLost(Error):
    """DLRT_ERR_DEVICE_LOST: the device's context cannot be used again."""


# By the names of lib/dlrt/core.h's DLRT_STATUS_MAP, so that the codes come
# from the library itself.
_BY_NAME = {
    "DLRT_ERR_INVALID_ARG": InvalidArgument, "DLRT_ERR_OOM": OutOfMemory,
    "DLRT_ERR_NO_DEVICE": NoDevice, "DLRT_ERR_BAD_SPEC": BadSpec,
    "DLRT_ERR_BACKEND": BackendError, "DLRT_ERR_UNSUPPORTED": Unsupported,
    "DLRT_ERR_OUT_OF_RANGE": OutOfRange, "DLRT_ERR_WRONG_DEVICE": WrongDevice,
    "DLRT_ERR_NOT_FOUND": NotFound, "DLRT_ERR_API_VERSION": ApiVersion,
    "DLRT_ERR_IO": IOFailure, "DLRT_ERR_STATE": StateError,
    "DLRT_ERR_SYSTEM": SystemFailure, "DLRT_ERR_DIVERGED": Diverged,
    "DLRT_ERR_DEVICE_LOST": DeviceLost,
}


def statuses():
    """{name: code} of every status the library knows ("DLRT_OK": 0, ...)."""
    out = {"DLRT_OK": 0}
    code = -1
    while True:
        name = text(lib.dlrt_err_name(code))
        if name == "DLRT_UNKNOWN":
            return out
        out[name] = code
        code -= 1


def error_for(status, message=None):
    """The exception for a negative status, with the thread's last message."""
    if message is None:
        message = text(lib.dlrt_last_error())
    name = text(lib.dlrt_err_name(status))
    return _BY_NAME.get(name, Error)(status, message, name)


def check(status):
    """status when >= 0; raises the matching dlrt.Error when negative."""
    if status < 0:
        raise error_for(status)
    return status
