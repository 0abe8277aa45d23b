# SPDX-License-Identifier: MIT
"""Host kernel libraries: `link_with = "name.o"` -> `name.so`.

Resolution order: the current working directory, then each directory of
AIR_EMU_LIB_PATH (colon-separated).  Arguments are passed in declared order:
memrefs as their buffer's data pointer (ctypes.c_void_p), integer scalars as
C integers of their width, f32/f64 scalars as float/double.
"""

import ctypes
import os

from ..ir import F32Type, F64Type, IndexType, IntegerType, MemRefType
from .errors import LibraryError, UnsupportedError

_LIBS = {}


def library_name(obj_name):
    base = os.path.basename(obj_name)
    stem, ext = os.path.splitext(base)
    if ext != ".o":
        stem = base
    return stem + ".so"


def search_dirs():
    dirs = [os.getcwd()]
    for d in os.environ.get("AIR_EMU_LIB_PATH", "").split(":"):
        if d:
            dirs.append(d)
    return dirs


def resolve_library(obj_name, who):
    so = library_name(obj_name)
    dirs = search_dirs()
    for d in dirs:
        path = os.path.join(d, so)
        if os.path.isfile(path):
            return os.path.abspath(path)
    raise LibraryError(
        f'{who}: link_with = "{obj_name}" needs the host library "{so}", found in neither the '
        f"working directory {os.getcwd()} nor AIR_EMU_LIB_PATH "
        f"({os.environ.get('AIR_EMU_LIB_PATH', '') or 'unset'}); build the host kernel library "
        f"and put its directory on AIR_EMU_LIB_PATH"
    )


def ctype_of(t, who):
    if isinstance(t, MemRefType):
        return ctypes.c_void_p
    if isinstance(t, IndexType):
        return ctypes.c_int64
    if isinstance(t, IntegerType):
        table = {
            8: ctypes.c_int8,
            16: ctypes.c_int16,
            32: ctypes.c_int32,
            64: ctypes.c_int64,
        }
        if t.is_unsigned:
            table = {
                8: ctypes.c_uint8,
                16: ctypes.c_uint16,
                32: ctypes.c_uint32,
                64: ctypes.c_uint64,
            }
        if t.width in table:
            return table[t.width]
    if isinstance(t, F32Type):
        return ctypes.c_float
    if isinstance(t, F64Type):
        return ctypes.c_double
    raise UnsupportedError(
        f"{who}: argument type {t} cannot be passed to a host kernel"
    )


def _library(path, who):
    lib = _LIBS.get(path)
    if lib is None:
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise LibraryError(f"{who}: cannot load host library {path}: {e}") from None
        _LIBS[path] = lib
    return lib


def control_registers(path):
    """(get, set) of the loaded library's one rounding / saturation state (the host aie_api's
    aie_host_control_registers), which the engines save and restore per core (call_on_core): on the
    device each core has its own. None for a library built without it."""
    lib = _LIBS[path]
    if not hasattr(lib, "aie_host_control_registers"):
        return None
    get, put = lib.aie_host_control_registers, lib.aie_host_set_control_registers
    get.argtypes, get.restype = [], ctypes.c_uint
    put.argtypes, put.restype = [ctypes.c_uint], None
    return get, put


def call_on_core(fn, args, regs, control):
    """fn(*args) with a core's control registers in place of the library's (regs: control_registers'
    pair, or None); returns the registers as the call left them, the core's from now on.
    """
    if regs is None:
        fn(*args)
        return control
    regs[1](control)
    fn(*args)
    return regs[0]()


def load_function(path, symbol, arg_types, who):
    lib = _library(path, who)
    try:
        # a function object of the caller's own (lib[symbol], not the attribute ctypes caches): the
        # emulator and the simulator each set its argument types
        fn = lib[symbol]
    except AttributeError:
        raise LibraryError(
            f"{who}: symbol '{symbol}' not found in {path} (is it declared extern \"C\"?)"
        ) from None
    fn.argtypes = [ctype_of(t, who) for t in arg_types]
    fn.restype = None
    return fn
