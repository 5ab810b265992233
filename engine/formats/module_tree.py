"""A whole-module checkpoint's records, read: tensors by module path, each module's type and plain
settings, the checkpoint's plain top-level entries (engine.formats.pickled makes the records, nothing of
the file runs). It walks iteratively, within MAX_MODULE_DEPTH levels and MAX_VALUE_DEPTH for
settings, so no hostile nesting reaches Python's recursion limit; each record is visited once, so
shared or cyclic references cannot multiply work.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from ..errors import InvalidHeader
from ..untrusted import shown
from .pickled import Record, TensorRef, TorchName, kind_of

MAX_MODULE_DEPTH = 64          # module nesting: YOLO's deepest path is 7 levels (model.22.m.0.m.0.cv1.conv)
MAX_VALUE_DEPTH = 32           # a setting's nesting: a model's yaml dict nests 4 levels
MAX_TENSOR_SETTING = 64        # tensor settings up to this many elements (Detect.stride) become lists


class ModuleRecord(NamedTuple):
    type: str            # the class's qualified name, e.g. "ultralytics.nn.modules.block.C3k2"
    attrs: dict          # its plain settings: public __dict__ entries of plain values


class ModuleTree(NamedTuple):
    tensors: OrderedDict     # module path -> TensorRef: parameters, then buffers, then children
    settings: dict           # (module path, attribute) -> TensorRef of a small tensor setting
    modules: dict            # module path -> ModuleRecord
    meta: dict               # the checkpoint's plain top-level entries


def _is_module(value) -> bool:
    return isinstance(value, Record) and isinstance(value.state, dict) and (
        "_modules" in value.state or "_parameters" in value.state)


_CONTAINERS = (list, tuple, dict, OrderedDict)


class _NotPlain(Exception):
    pass


class _Walker:
    """plain() over one checkpoint, with one memo: a container shared by many records (a memo GET is
    two bytes) is converted once, so the work stays within the file's size."""

    def __init__(self, file: str):
        self.file = file
        self.memo: dict[int, tuple] = {}         # id(container) -> (its plain copy or _NotPlain, height)

    def scalar(self, value):
        if value is None or type(value) in (bool, float, str):
            return value
        if type(value) is int and -(1 << 63) <= value < (1 << 64):
            return value
        if isinstance(value, TorchName):
            return str(value)
        raise _NotPlain

    def plain(self, value, where: str):
        """`value` when it is None/bool/int/float/str or lists, tuples, dicts of those; _NotPlain
        otherwise; InvalidHeader for a container inside itself or nesting over MAX_VALUE_DEPTH levels
        (its height, whatever path reached it: memo references can stack converted containers).
        Iterative, so a hostile nesting never reaches Python's recursion limit."""
        if type(value) not in _CONTAINERS:
            return self.scalar(value)
        path: set[int] = set()                  # ids of the containers being converted
        stack = [(value, False)]
        while stack:
            node, children_done = stack.pop()
            if id(node) in self.memo and not children_done:
                continue
            items = list(dict.items(node)) if isinstance(node, dict) else list(node)
            values = [v for _, v in items] if isinstance(node, dict) else items
            if not children_done:
                if id(node) in path:
                    raise InvalidHeader(f"{where} contains itself", file=self.file)
                if len(path) >= MAX_VALUE_DEPTH:
                    raise InvalidHeader(f"{where} nests deeper than {MAX_VALUE_DEPTH} levels", file=self.file)
                path.add(id(node))
                stack.append((node, True))
                stack.extend((v, False) for v in values if type(v) in _CONTAINERS and id(v) not in self.memo)
                continue
            path.discard(id(node))
            height = 1 + max((self.memo[id(v)][1] for v in values if type(v) in _CONTAINERS), default=0)
            if height > MAX_VALUE_DEPTH:
                raise InvalidHeader(f"{where} nests deeper than {MAX_VALUE_DEPTH} levels", file=self.file)
            try:
                def convert(v):
                    if type(v) not in _CONTAINERS:
                        return self.scalar(v)
                    if self.memo[id(v)][0] is _NotPlain:
                        raise _NotPlain
                    return self.memo[id(v)][0]
                if isinstance(node, dict):
                    result = {self.scalar(k): convert(v) for k, v in items}
                else:
                    result = [convert(v) for v in items]
                    result = tuple(result) if type(node) is tuple else result
            except _NotPlain:
                result = _NotPlain
            self.memo[id(node)] = (result, height)
        if self.memo[id(value)][0] is _NotPlain:
            raise _NotPlain
        return self.memo[id(value)][0]


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _small_size(size) -> bool:
    return (type(size) is tuple and len(size) <= 8 and all(type(n) is int and 0 <= n <= MAX_TENSOR_SETTING
                                                            for n in size)
            and int(np.prod(size, dtype=np.int64)) <= MAX_TENSOR_SETTING)


def model_of(obj):
    """The module record a checkpoint holds: obj["model"], else obj["ema"], else obj; None if none is."""
    if type(obj) in (dict, OrderedDict):
        return next((dict.get(obj, key) for key in ("model", "ema") if _is_module(dict.get(obj, key))), None)
    return obj if _is_module(obj) else None


def module_tree(obj, file: str) -> ModuleTree:
    """The module checkpoint's tensors, modules and plain entries: the model is obj["model"], else
    obj["ema"], else obj itself. Each record is visited once (a module shared by two parents is read
    at its first path, as torch's named_modules does); module paths nest at most MAX_MODULE_DEPTH."""
    walker = _Walker(file)
    meta, root = {}, model_of(obj)
    if type(obj) in (dict, OrderedDict):
        if root is None:
            kinds = {key: kind_of(dict.get(obj, key)) for key in ("model", "ema")}
            raise InvalidHeader(f"the checkpoint holds no module: its 'model' is a {kinds['model']}, its 'ema' a "
                                f"{kinds['ema']}", file=file)
        for key, value in dict.items(obj):
            if isinstance(key, str) and value is not root:
                try:
                    meta[str(key)] = walker.plain(value, f"checkpoint entry {shown(key)}")
                except _NotPlain:
                    pass
    elif not _is_module(root):
        raise InvalidHeader(f"the checkpoint holds a {kind_of(root)}, not a torch module", file=file)

    tensors, settings, modules, seen = OrderedDict(), {}, {}, set()

    def fail(message: str, path: str, tensor: str | None = None):
        return InvalidHeader(f"module {shown(path or '<root>', 200)}: {message}", file=file, tensor=tensor)

    def entries(state: dict, group: str, path: str) -> list:
        found = dict.get(state, group)
        if found is None:
            return []
        if type(found) not in (dict, OrderedDict):
            raise fail(f"its {group} is a {kind_of(found)}, not a dict", path)
        for name in dict.keys(found):
            if not isinstance(name, str):
                raise fail(f"a name in its {group} is a {kind_of(name)}, not a str", path)
        return list(dict.items(found))

    stack = [("", root, 0)]
    while stack:
        path, record, depth = stack.pop()
        if id(record) in seen:
            continue
        seen.add(id(record))
        if path in modules:
            raise fail("two modules have this path", path)
        state = record.state
        for group in ("_parameters", "_buffers"):
            for name, value in entries(state, group, path):
                if value is None:
                    continue
                full = _join(path, name)
                if not isinstance(value, TensorRef):
                    raise fail(f"{group[1:-1]} {shown(name)} is a {kind_of(value)}, not a tensor", path, full)
                if full in tensors:
                    raise fail("two tensors have this path", path, full)
                tensors[full] = value
        attrs = {}
        for key, value in dict.items(state):
            if not isinstance(key, str) or key.startswith("_"):
                continue
            if isinstance(value, TensorRef):
                if _small_size(value.size):
                    settings[(path, key)] = value
                continue
            try:
                attrs[key] = walker.plain(value, f"module {shown(path or '<root>', 200)}'s {shown(key)}")
            except _NotPlain:
                pass
        modules[path] = ModuleRecord(record.qualified_name, attrs)
        children = entries(state, "_modules", path)
        if children and depth >= MAX_MODULE_DEPTH:
            raise fail(f"modules nest deeper than {MAX_MODULE_DEPTH} levels", path)
        for name, child in reversed(children):
            if child is None:
                continue
            if not _is_module(child):
                raise fail(f"submodule {shown(name)} is a {kind_of(child)}, not a torch module", path)
            stack.append((_join(path, name), child, depth + 1))
    return ModuleTree(tensors, settings, modules, meta)
