"""Status codes of libmooncake.so and the Python exceptions for them.

The values are those of abi/include/mooncake/common.h and store.h (a test
checks them against the headers). mc_store_ functions return upstream
Mooncake Store's ErrorCode values (-704 OBJECT_NOT_FOUND, ...) except the
few that a common code already has (see store.h).

MooncakeError carries .code (the negative status) and .message (the
library's mc_last_error text); error_for(code, message) picks the subclass.
"""

OK = 0

# common.h
ERR_INVALID_ARGUMENT = -1
ERR_TOO_MANY_REQUESTS = -2
ERR_ADDRESS_NOT_REGISTERED = -3
ERR_BATCH_BUSY = -4
ERR_DEVICE_NOT_FOUND = -6
ERR_ADDRESS_OVERLAPPED = -7
ERR_DNS = -101
ERR_SOCKET = -102
ERR_MALFORMED_JSON = -103
ERR_REJECT_HANDSHAKE = -104
ERR_METADATA = -200
ERR_ENDPOINT = -201
ERR_CONTEXT = -202
ERR_NUMA = -300
ERR_CLOCK = -301
ERR_MEMORY = -302
ERR_UNSUPPORTED = -303
ERR_INTERNAL = -1000
ERR_INVALID_HANDLE = -1001
ERR_NOT_FOUND = -1002
ERR_CLOSED = -1003
ERR_TIMEOUT = -1004

# store.h
STORE_ERR_BUFFER_OVERFLOW = -10
STORE_ERR_INVALID_KEY = -400
STORE_ERR_WRITE_FAIL = -500
STORE_ERR_INVALID_PARAMS = -600
STORE_ERR_ILLEGAL_CLIENT = -601
STORE_ERR_INVALID_WRITE = -700
STORE_ERR_INVALID_READ = -701
STORE_ERR_INVALID_REPLICA = -702
STORE_ERR_REPLICA_IS_NOT_READY = -703
STORE_ERR_OBJECT_NOT_FOUND = -704
STORE_ERR_OBJECT_ALREADY_EXISTS = -705
STORE_ERR_OBJECT_HAS_LEASE = -706
STORE_ERR_LEASE_EXPIRED = -707
STORE_ERR_TRANSFER_FAIL = -800
STORE_ERR_RPC_FAIL = -900
STORE_ERR_RPC_TIMEOUT = -901
STORE_ERR_SEGMENT_NOT_FOUND = -1101
STORE_ERR_SEGMENT_ALREADY_EXISTS = -1102
STORE_ERR_CLIENT_NOT_FOUND = -1103
STORE_ERR_NO_AVAILABLE_HANDLE = -1200

_NAMES = {v: k for k, v in globals().items() if k.startswith(("ERR_", "STORE_ERR_")) and isinstance(v, int)}
_NAMES[OK] = "OK"


def code_name(code):
    """The header name of a status code without its MC_ prefix, e.g.
    "STORE_ERR_OBJECT_NOT_FOUND", or "code <n>" for an unknown one."""
    return _NAMES.get(code, f"code {code}")


class MooncakeError(Exception):
    """A failed libmooncake.so call: .code is the negative status, .message
    the library's reason (mc_last_error), .call the C function."""

    def __init__(self, code, message="", call=None):
        self.code = code
        self.message = message
        self.call = call
        super().__init__(code, message)

    def __str__(self):
        where = f"{self.call}: " if self.call and not self.message.startswith(self.call) else ""
        return f"{where}{self.message or 'failed'} [{code_name(self.code)} ({self.code})]"


class InvalidArgumentError(MooncakeError, ValueError):
    """A bad argument: NULL/empty, zero length, bad value, or a key the pool rejects."""


class InvalidHandleError(MooncakeError):
    """The handle is unknown or was closed."""


class NotFoundError(MooncakeError, LookupError):
    """No object under that key (or no such named object)."""


class AlreadyExistsError(MooncakeError):
    """The key exists (puts report this as success; see store.h)."""


class NoSpaceError(MooncakeError):
    """The pool has no room now (NO_AVAILABLE_HANDLE): back off and retry, or evict."""


class LeaseExpiredError(MooncakeError):
    """A read finished after its lease: the bytes read are undefined."""


class BufferOverflowError(MooncakeError):
    """A buffer (the caller's, or the client's local buffer) is too small for the value."""


class UnsupportedError(MooncakeError, NotImplementedError):
    """A feature, protocol or mode mooncake-go does not implement."""


class NotRegisteredError(MooncakeError):
    """A zero-copy range outside every buffer registered on the handle."""


_CLASSES = {
    ERR_INVALID_ARGUMENT: InvalidArgumentError,
    STORE_ERR_INVALID_PARAMS: InvalidArgumentError,
    STORE_ERR_INVALID_KEY: InvalidArgumentError,
    ERR_INVALID_HANDLE: InvalidHandleError,
    ERR_NOT_FOUND: NotFoundError,
    STORE_ERR_OBJECT_NOT_FOUND: NotFoundError,
    STORE_ERR_OBJECT_ALREADY_EXISTS: AlreadyExistsError,
    STORE_ERR_NO_AVAILABLE_HANDLE: NoSpaceError,
    STORE_ERR_LEASE_EXPIRED: LeaseExpiredError,
    STORE_ERR_BUFFER_OVERFLOW: BufferOverflowError,
    ERR_UNSUPPORTED: UnsupportedError,
    ERR_ADDRESS_NOT_REGISTERED: NotRegisteredError,
}


def error_for(code, message="", call=None):
    """The MooncakeError (subclass) for a negative status code."""
    return _CLASSES.get(code, MooncakeError)(code, message, call)
