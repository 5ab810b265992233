"""What a torch pickle may build here: inert stand-ins, never the objects it names, and no code run.

A torch checkpoint's pickle (`data.pkl`, or the legacy stream's object) is first walked opcode by
opcode (engine.formats.pickle_check: arguments the bytes cannot back, nesting, hashing), then unpickled
by `Unpickler`, whose `find_class` hands out stand-ins and whose `persistent_load` resolves storages
to `StorageRef`s. A stand-in cannot be changed (`StandIn`, `TorchName`, `StorageType`: BUILD and
attribute writes are refused), so nothing one file does reaches the next load; set, frozenset and
OrderedDict are each load's own, charging the keys they hash to that pickle's budget. Two policies:

- state dicts (`Unpickler`): the allowlist `GLOBALS` only: collections.OrderedDict, the tensor and
  parameter rebuild functions (they return `TensorRef` descriptors) and torch.<dtype>Storage.
  Every other global is refused (UnsafePickle) before anything is built.
- whole modules (`ModuleUnpickler`, as ultralytics saves its models: `torch.save({"model": model})`):
  the same allowlist plus builtins.set/frozenset, torch.Size, torch dtypes and devices (as names),
  and stand-ins for getattr and copyreg._reconstructor that return inert references. Every other
  global becomes a `Record` class: NEWOBJ makes an instance that keeps its arguments, BUILD keeps its
  state (a module's __dict__). Nothing is called: REDUCE of a record class or of a record, i.e. of
  anything the allowlist does not name (a function such as os.system looks like a class from here),
  is refused with UnsafePickle, and globals of the modules that reach the system (os, subprocess,
  builtins...) are refused by name even where they would stay inert.

engine.formats.module_tree then reads a module checkpoint's records.
"""
from __future__ import annotations

import pickle
from collections import OrderedDict
from typing import NamedTuple

from .. import dtypes
from ..errors import (
    InvalidHeader,
    InvalidOffsets,
    TruncatedFile,
    UnknownDtype,
    UnsafePickle,
    WeightsError,
)
from ..untrusted import INT64_MAX, shown
from .pickle_check import Budget, check_pickle

MAX_CLASSES = 10_000           # distinct classes a module pickle may name (YOLO's: about 30); each is a class here


class StandIn:
    """An allowed global as a pickle sees it: calling it calls `function`, and nothing of it can be
    changed. BUILD, the one opcode that gives an object state, is refused, and it has no attributes
    to set, so one file cannot leave state in it for the next load to find."""
    __slots__ = ("name", "function")

    def __init__(self, name: str, function):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "function", function)

    def __call__(self, *args, **kwargs):
        return self.function(*args, **kwargs)

    def __setstate__(self, state):
        raise UnsafePickle(f"refusing to give state to {self.name}: BUILD applies to records only", file=None)

    def __setattr__(self, name, value):
        raise UnsafePickle(f"refusing to set an attribute of {self.name}", file=None)

    def __delattr__(self, name):
        raise UnsafePickle(f"refusing to delete an attribute of {self.name}", file=None)

    def __repr__(self):
        return f"<stand-in for {self.name}>"


class StorageType(NamedTuple):       # stands in for torch.FloatStorage & co.
    name: str
    dtype: dtypes.DType

    def __setstate__(self, state):
        raise UnsafePickle(f"refusing to give state to torch.{self.name}", file=None)


class StorageRef(NamedTuple):        # a persistent id, resolved
    key: str                         # root storage key
    dtype: dtypes.DType
    numel: int                       # elements visible through this reference
    base: int                        # element offset in the root (old storage views)


class TensorRef(NamedTuple):         # what torch._utils._rebuild_tensor* would build
    storage: object
    offset: object
    size: object
    stride: object


def _rebuild_tensor(storage, storage_offset, size, stride):
    return TensorRef(storage, storage_offset, size, stride)


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks,
                       metadata=None):
    return TensorRef(storage, storage_offset, size, stride)


def _rebuild_parameter(data, requires_grad, backward_hooks, state=None):
    if not isinstance(data, TensorRef):        # _unpickle names the file
        raise ValueError(f"a Parameter wraps a {type(data).__name__}, not a tensor")
    return data                      # parameters load as plain tensors


STORAGES = {"FloatStorage": dtypes.float32, "DoubleStorage": dtypes.float64,
            "HalfStorage": dtypes.float16, "BFloat16Storage": dtypes.bfloat16,
            "LongStorage": dtypes.int64, "IntStorage": dtypes.int32,
            "ShortStorage": dtypes.int16, "CharStorage": dtypes.int8,
            "ByteStorage": dtypes.uint8, "BoolStorage": dtypes.bool_}


# the state dicts' whole allowlist but OrderedDict (each load's own, Unpickler.allowed): "module.name" -> stand-in
GLOBALS = {**{f"torch._utils.{f.__name__}": StandIn(f"torch._utils.{f.__name__}", f)
              for f in (_rebuild_tensor, _rebuild_tensor_v2, _rebuild_parameter)},
           **{f"torch.{name}": StorageType(name, dtype) for name, dtype in STORAGES.items()}}


def _container(kind: type, budget_of, pairs: bool):
    """A stand-in's function for set, frozenset or OrderedDict: their untrusted keys hash within the
    load's budget (engine.formats.pickle_check), from a list, tuple, set or dict only."""
    def build(*args, **kwargs):
        if len(args) > 1 or (kwargs and not pairs):
            raise ValueError(f"{kind.__name__} of {len(args)} arguments")
        keys = list(kwargs)
        if args:
            items = args[0]
            if type(items) in (dict, OrderedDict):
                keys += dict.keys(items)
            elif type(items) in (list, tuple, set, frozenset):
                keys += [item[0] for item in items if type(item) in (list, tuple) and len(item) == 2] \
                    if pairs else items
            else:
                raise ValueError(f"{kind.__name__} of a {kind_of(items)}")
        budget_of().charge(keys, _INERT)
        return kind(*args, **kwargs)
    return build


class Unpickler(pickle.Unpickler):
    """A torch pickle's unpickler for plain state dicts: globals from GLOBALS only."""

    def __init__(self, file, name: str, legacy: bool, storages: bool = True):
        super().__init__(file, encoding="utf-8")
        self.stream = file
        self.name, self.legacy, self.storages_allowed = name, legacy, storages
        self.roots: dict[str, tuple[dtypes.DType, int]] = {}    # key -> (dtype, numel)
        self.budget: Budget | None = None                        # the pickle's hashing, from its walk
        self.allowed = {**self.globals(), "collections.OrderedDict": StandIn(
            "collections.OrderedDict", _container(OrderedDict, lambda: self.budget, pairs=True))}

    def globals(self) -> dict:
        return GLOBALS

    def load(self):
        self.budget = check_pickle(self.stream, self.name)
        return super().load()

    def find_class(self, module, name):
        qualified = f"{module}.{name}"
        if qualified in self.allowed:
            return self.allowed[qualified]
        self.refuse_storage(module, name)
        raise UnsafePickle(f"refusing to load global {_cut(qualified)}: a state dict holds only tensors "
                           f"(allowed: collections.OrderedDict, torch._utils._rebuild_tensor[_v2], "
                           f"torch._utils._rebuild_parameter, torch.<dtype>Storage; whole-module "
                           f"checkpoints: engine.formats.read_module_checkpoint)", file=self.name)

    def refuse_storage(self, module, name):
        qualified = _cut(f"{module}.{name}")
        if qualified == "torch._utils._rebuild_tensor_v3":   # dtypes without a *Storage class
            raise UnknownDtype(f"{qualified}: torch writes it for dtypes the engine lacks "
                               f"(uint16/32/64, float8 ...)", file=self.name)
        if module in ("torch", "torch.storage") and name.endswith("Storage"):
            raise UnknownDtype(f"unsupported storage type {qualified} (supported: "
                               f"{', '.join(f'torch.{n}' for n in STORAGES)})", file=self.name)

    def persistent_load(self, pid):
        fields = 6 if self.legacy else 5
        if not (self.storages_allowed and isinstance(pid, tuple) and len(pid) == fields
                and pid[0] in ("storage", b"storage")):
            raise InvalidHeader(f"unexpected persistent id {shown(pid, 200)}", file=self.name)
        storage_type, key, numel = pid[1], pid[2], pid[4]
        if not isinstance(storage_type, StorageType) or not isinstance(key, str) \
                or type(numel) is not int or not 0 <= numel <= INT64_MAX:
            raise InvalidHeader(f"malformed storage reference {shown(pid, 200)}", file=self.name)
        if self.roots.setdefault(key, (storage_type.dtype, numel)) != (storage_type.dtype, numel):
            raise InvalidHeader(f"storage {shown(key)} is referenced with different types or sizes",
                                file=self.name)
        view = pid[5] if self.legacy else None
        if view is None:
            return StorageRef(key, storage_type.dtype, numel, 0)
        if not (isinstance(view, tuple) and len(view) == 3
                and all(type(v) is int and 0 <= v <= INT64_MAX for v in view[1:])):
            raise InvalidHeader(f"malformed storage view {shown(view, 200)}", file=self.name)
        _, base, view_size = view
        if base + view_size > numel:
            raise InvalidOffsets(f"storage view [{base}, {base + view_size}) runs past storage "
                                 f"{shown(key)} of {numel} elements", file=self.name)
        return StorageRef(key, storage_type.dtype, view_size, base)


def kind_of(value) -> str:
    """What `value` is, for a message: never its repr (a hostile nesting has none within the stack)."""
    if isinstance(value, Record):
        return f"record of {value.qualified_name}"
    return type(value).__name__


def _cut(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def unpickle(unpickler: Unpickler):
    try:
        return unpickler.load()
    except WeightsError as e:
        if e.file is None:               # a stand-in's refusal: it knows no file
            raise type(e)(str(e), file=unpickler.name) from None
        raise
    except MemoryError:
        raise
    except Exception as e:   # anything the untrusted bytes provoke; only stand-ins ran
        if isinstance(e, EOFError) or "truncated" in str(e):
            raise TruncatedFile(f"file truncated inside a pickle: {e}",
                                file=unpickler.name) from None
        raise InvalidHeader(f"malformed pickle: {type(e).__name__}: {_cut(str(e), 300)}",
                            file=unpickler.name) from None


# --- whole modules as inert records ------------------------------------------------------------------

# Modules that reach the system or run code: refused by name, though a record of them would be inert.
_REFUSED_MODULES = frozenset((
    "os", "posix", "nt", "posixpath", "ntpath", "subprocess", "_posixsubprocess", "sys", "builtins",
    "__builtin__", "importlib", "imp", "shutil", "socket", "pickle", "_pickle", "marshal", "ctypes",
    "runpy", "code", "codeop", "types", "functools", "operator", "io", "_io", "pty", "webbrowser",
    "multiprocessing", "asyncio", "signal", "tempfile", "pathlib", "urllib", "http", "platform", "pdb",
    "bdb", "timeit", "trace", "profile", "cProfile", "site", "gc", "inspect", "copyreg", "copy_reg",
    "commands", "popen2", "threading", "_thread", "ftplib", "smtplib", "telnetlib", "numpy"))


class _RecordClass(type):
    """The type of record classes: calling one (REDUCE) is refused, since from the file alone a
    class cannot be told from a function such as os.system; a record class is never changed."""

    def __call__(cls, *args, **kwargs):
        raise UnsafePickle(f"refusing to call {cls.qualified_name}: of the file's globals only the "
                           f"allowlist is called; other classes are built by NEWOBJ, as inert records",
                           file=cls.file)

    def __setattr__(cls, name, value):
        raise UnsafePickle(f"refusing to set an attribute of {cls.qualified_name}", file=cls.file)


class Record(metaclass=_RecordClass):
    """An instance of a class the file names, kept inert: NEWOBJ's arguments and BUILD's state."""
    __slots__ = ("args", "kwargs", "state")      # as small as a dict: a pickle makes one in 4 bytes
    qualified_name = "?"
    file = None

    def __new__(cls, *args, **kwargs):            # NEWOBJ: cls.__new__(cls, *args)
        record = object.__new__(cls)
        record.args, record.kwargs, record.state = args, kwargs, None
        return record

    def __setstate__(self, state):                # BUILD
        self.state = state

    def __call__(self, *args, **kwargs):
        raise UnsafePickle(f"refusing to call an instance of {self.qualified_name}", file=self.file)

    def __repr__(self):
        return f"<record of {self.qualified_name}>"


class AttributeRef(NamedTuple):
    """What getattr(owner, name) stands for (ultralytics: Pose.detect = Detect.forward); never looked up."""
    owner: object
    name: str

    def __call__(self, *args, **kwargs):
        raise UnsafePickle(f"refusing to call getattr(..., {self.name!r:.100})", file=None)


class TorchName(str):
    """torch.float16, torch.device('cpu') ...: kept as their names, with no state to give."""
    __slots__ = ()

    def __setstate__(self, state):
        raise UnsafePickle(f"refusing to give state to {str.__str__(self)[:100]}", file=None)


_OBJECT = TorchName("builtins.object")


def _getattr(owner, name, *default):
    if not isinstance(name, str):
        raise TypeError(f"getattr with a {type(name).__name__} name")
    return AttributeRef(owner, name)


def _reconstructor(cls, base, state):
    """copyreg._reconstructor (protocols 0-1): object.__new__ of a record class, nothing else."""
    if not (isinstance(cls, _RecordClass) and base is _OBJECT and state is None):
        raise ValueError(f"copyreg._reconstructor of {shown(cls, 100)} over {shown(base, 100)}: only "
                         f"records over builtins.object are rebuilt")
    return cls.__new__(cls)


def _size(values=()):
    if not (isinstance(values, (tuple, list)) and all(type(v) is int for v in values)):
        raise ValueError(f"torch.Size of {shown(values, 100)}")
    return tuple(values)


def _device(*args):
    if not all(isinstance(a, (str, int)) or a is None for a in args):
        raise ValueError(f"torch.device of {shown(args, 100)}")
    return TorchName(":".join(str(a) for a in args if a is not None))


_DTYPE_NAMES = ("float16", "float32", "float64", "bfloat16", "half", "float", "double", "int8", "int16",
                "int32", "int64", "uint8", "bool", "long", "int", "short")
# a whole module's allowlist but set and frozenset (each load's own, ModuleUnpickler.globals)
MODULE_GLOBALS = {**GLOBALS,
                  **{name: StandIn(name, function) for name, function in (
                      ("builtins.getattr", _getattr), ("copyreg._reconstructor", _reconstructor),
                      ("torch._utils._rebuild_parameter_with_state", _rebuild_parameter),
                      ("torch.Size", _size), ("torch.device", _device))},
                  "builtins.object": _OBJECT,
                  **{f"torch.{name}": TorchName(f"torch.{name}") for name in _DTYPE_NAMES}}
_INERT = (Record, _RecordClass, StandIn, TorchName, StorageType)     # hashed by identity, or fixed values


class ModuleUnpickler(Unpickler):
    """A torch pickle's unpickler for whole modules: MODULE_GLOBALS, and every other class a Record."""

    def __init__(self, file, name: str, legacy: bool, storages: bool = True):
        super().__init__(file, name, legacy, storages)
        self.classes: dict[str, type] = {}

    def globals(self) -> dict:
        return {**MODULE_GLOBALS, **{f"builtins.{kind.__name__}": StandIn(
            f"builtins.{kind.__name__}", _container(kind, lambda: self.budget, pairs=False)) for kind in (set, frozenset)}}

    def find_class(self, module, name):
        # Python 2's names, as pickle's own find_class maps them for protocols < 3 (torch writes 2)
        module = {"__builtin__": "builtins", "copy_reg": "copyreg"}.get(module, module)
        qualified = f"{module}.{name}"
        if qualified in self.allowed:
            return self.allowed[qualified]
        self.refuse_storage(module, name)
        if module.split(".")[0] in _REFUSED_MODULES or qualified.startswith(("torch._C", "torch.jit",
                                                                             "torch.ops", "torch.hub")):
            raise UnsafePickle(f"refusing to load global {_cut(qualified)}: it reaches the system or runs "
                               f"code", file=self.name)
        if qualified not in self.classes:
            if len(self.classes) >= MAX_CLASSES:
                raise InvalidHeader(f"the pickle names over {MAX_CLASSES} classes; a model names tens",
                                    file=self.name)
            self.classes[qualified] = _RecordClass("Record", (Record,), {"qualified_name": _cut(qualified),
                                                                         "file": self.name, "__slots__": ()})
        return self.classes[qualified]

    def persistent_load(self, pid):
        # a legacy stream names each module's class as ('module', class, source file, source): the class
        if self.legacy and isinstance(pid, tuple) and len(pid) == 4 and pid[0] in ("module", b"module"):
            if not isinstance(pid[1], _RecordClass):
                raise InvalidHeader(f"a module persistent id names a {kind_of(pid[1])}, not a class",
                                    file=self.name)
            return pid[1]
        return super().persistent_load(pid)
