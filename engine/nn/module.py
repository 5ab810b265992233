"""Module: a tree of named tensors (parameters and buffers) and submodules.

Parameters start as zeros of their declared shape and dtype; real values come
from `load_state_dict`, which checks every name, shape and dtype.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import NamedTuple

from .. import dtypes
from ..errors import MissingTensor, UnexpectedTensor
from ..functions import zeros
from ..layout import Layout
from ..tensor import Tensor, parse_to_args
from ..weights import Weights


class IncompatibleKeys(NamedTuple):
    missing_keys: list
    unexpected_keys: list


class Module:
    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_persistent", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", False)

    # --- registration -----------------------------------------------------------------
    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError("call Module.__init__() before assigning attributes")
        params, buffers, modules = self._parameters, self._buffers, self._modules
        tensor = isinstance(value, Tensor) or getattr(value, "is_quantized", False)   # QuantizedTensor too
        if tensor or isinstance(value, Module):
            self.__dict__.pop(name, None)        # e.g. a `bias = None` set before: the table wins
        if isinstance(value, Module):
            params.pop(name, None)
            buffers.pop(name, None)
            modules[name] = value
        elif tensor or (value is None and (name in params or name in buffers)):
            modules.pop(name, None)
            (buffers if name in buffers else params)[name] = value
        else:
            for table in (params, buffers, modules):
                table.pop(name, None)
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        for table in ("_parameters", "_buffers", "_modules"):
            d = self.__dict__.get(table)
            if d is not None and name in d:
                return d[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        self._parameters.pop(name, None)
        self._buffers[name] = tensor
        if persistent:
            self._persistent.add(name)
        else:
            self._persistent.discard(name)

    @staticmethod
    def param(*shape, dtype=dtypes.float32) -> Tensor:
        """A placeholder parameter of the given shape, replaced by load_state_dict: zeros that take
        no memory (one element, viewed with zero strides), so that a model costs nothing before its
        weights come (a 135M-parameter model would otherwise allocate 540 MB of zeros first)."""
        one = zeros((1,), dtype=dtype)
        return one._view(Layout(shape, strides=(0,) * len(shape)))

    # --- traversal --------------------------------------------------------------------
    def named_modules(self, prefix: str = ""):
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(f"{prefix}.{name}" if prefix else name)

    def named_children(self):
        return ((n, m) for n, m in self._modules.items() if m is not None)

    def children(self):
        return (m for _, m in self.named_children())

    def modules(self):
        return (m for _, m in self.named_modules())

    def _named(self, table: str, prefix: str, recurse: bool):
        for mp, m in (self.named_modules(prefix) if recurse else [(prefix, self)]):
            for n, t in getattr(m, table).items():
                if t is not None:
                    yield (f"{mp}.{n}" if mp else n), t

    def named_parameters(self, prefix: str = "", recurse: bool = True):
        return self._named("_parameters", prefix, recurse)

    def parameters(self, recurse: bool = True):
        return (p for _, p in self.named_parameters(recurse=recurse))

    def named_buffers(self, prefix: str = "", recurse: bool = True):
        return self._named("_buffers", prefix, recurse)

    def buffers(self, recurse: bool = True):
        return (b for _, b in self.named_buffers(recurse=recurse))

    def _state_entries(self):
        """(full name, owning module, attribute) for every parameter and persistent buffer."""
        for mp, m in self.named_modules():
            for table, persistent_only in ((m._parameters, False), (m._buffers, True)):
                for n, t in table.items():
                    if t is not None and (not persistent_only or n in m._persistent):
                        yield (f"{mp}.{n}" if mp else n), m, n

    def state_dict(self) -> "OrderedDict[str, Tensor]":
        return OrderedDict((name, getattr(m, attr)) for name, m, attr in self._state_entries())

    def load_state_dict(self, state_dict, strict: bool = True) -> IncompatibleKeys:
        """Take each tensor by name from a mapping (or a Weights loader), checking shape and dtype.

        strict: every tensor the model declares must be present and nothing else.
        A lazy mapping (engine.load_safetensors) is read only for the names needed.
        """
        weights = state_dict if isinstance(state_dict, Weights) else Weights(state_dict)
        entries = list(self._state_entries())
        wanted = {name for name, _, _ in entries}
        missing = [name for name in wanted if name not in weights]
        unexpected = [k for k in weights.keys() if k not in wanted]
        if strict and missing:
            raise MissingTensor(f"missing tensor(s) for {type(self).__name__}: {', '.join(sorted(missing))}",
                                file=weights.file, tensor=sorted(missing)[0])
        if strict and unexpected:
            raise UnexpectedTensor(f"unexpected tensor(s) for {type(self).__name__}: "
                                   f"{', '.join(sorted(unexpected))}", file=weights.file,
                                   tensor=sorted(unexpected)[0])
        for name, m, attr in entries:
            if name in missing:
                continue
            old = getattr(m, attr)
            new = weights.get(name, old.shape, old.dtype)
            (m._buffers if attr in m._buffers else m._parameters)[attr] = new.to(old.device)
        return IncompatibleKeys(sorted(missing), sorted(unexpected))

    # --- state ------------------------------------------------------------------------
    def to(self, *args, dtype=None, device=None) -> "Module":
        """Move every parameter and buffer to `device`; cast the floating ones to `dtype`."""
        dtype, device = parse_to_args(args, dtype, device)
        for m in self.modules():
            for table in (m._parameters, m._buffers):
                for n, t in table.items():
                    if t is not None:
                        cast = dtype if dtype is not None and t.dtype.is_floating_point and not \
                            getattr(t, "is_quantized", False) else None     # quantized weights stay so
                        table[n] = t.to(dtype=cast, device=device)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def train(self, mode: bool = True) -> "Module":
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"({n}): " + repr(m).replace("\n", "\n  ") for n, m in self.named_children()]
        head = f"{type(self).__name__}({self.extra_repr()}"
        return head + (")" if not lines else "\n  " + "\n  ".join(lines) + "\n)")


class _Indexed(Module):
    """Submodules named "0", "1", ...: indexable, sized and iterable like a list."""

    def __getitem__(self, i: int) -> Module:
        return list(self._modules.values())[i]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())


class Sequential(_Indexed):
    def __init__(self, *modules: Module):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], Mapping):
            for name, m in modules[0].items():
                setattr(self, name, m)
        else:
            for i, m in enumerate(modules):
                setattr(self, str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x


class ModuleList(_Indexed):
    def __init__(self, modules=()):
        super().__init__()
        for i, m in enumerate(modules):
            setattr(self, str(i), m)

    def append(self, m: Module) -> "ModuleList":
        setattr(self, str(len(self._modules)), m)
        return self
