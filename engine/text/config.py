"""Reading tokenizer.json: fields checked as they are read, components found by their "type".

Every error names the file and the dotted field ("post_processor.single[1].Sequence.type_id"),
so a bad or unsupported tokenizer.json says where it went wrong.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from ..errors import TokenizerError

_REQUIRED = object()
U32_MAX = (1 << 32) - 1          # ids and type ids are u32 in the reference, and must fit NumPy's int64
_TYPE_NAMES = {str: "a string", int: "an integer", bool: "true or false", list: "a list",
               dict: "an object", float: "a number", type(None): "null"}


class Section:
    """One JSON object of tokenizer.json together with where it sits (file and dotted path)."""

    __slots__ = ("data", "path", "file")

    def __init__(self, data: dict, path: str = "", file: str = "<string>"):
        self.data, self.path, self.file = data, path, file

    def where(self, key: str | int | None = None) -> str:
        if key is None:
            return self.path or "(top level)"
        if isinstance(key, int):
            return f"{self.path}[{key}]"
        return f"{self.path}.{key}" if self.path else key

    def error(self, message: str, key: str | int | None = None) -> TokenizerError:
        return TokenizerError(message, file=self.file, field=self.where(key))

    def get(self, key: str, kinds: type | tuple = object, default: Any = _REQUIRED, *,
            at_most: int | None = None) -> Any:
        """data[key], checked to be of `kinds`; `default` when absent (absent and no default: an error).
        With `at_most`, an integer must lie in [0, at_most]."""
        if key not in self.data:
            if default is _REQUIRED:
                raise self.error("missing field", key)
            return default
        return self.check(self.data[key], kinds, key, at_most=at_most)

    def check(self, value: Any, kinds: type | tuple, key: str | int, *, at_most: int | None = None) -> Any:
        kinds = kinds if isinstance(kinds, tuple) else (kinds,)
        if object in kinds:
            return value
        # JSON true/false arrive as bool, a subclass of int: an integer field must not take them
        ok = any(type(value) is bool if k is bool else (isinstance(value, k) and type(value) is not bool)
                 for k in kinds)
        if not ok:
            wanted = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
            raise self.error(f"expected {wanted}, got {_TYPE_NAMES.get(type(value), type(value).__name__)}", key)
        if at_most is not None and type(value) is int and not 0 <= value <= at_most:
            raise self.error(f"must not be negative, got {value}" if value < 0 else
                             f"must be at most {at_most}, got {value}", key)
        return value

    def section(self, key: str, optional: bool = False) -> Section | None:
        """The object at data[key] as a Section (None for null or, if optional, absent)."""
        value = self.get(key, (dict, type(None)), None if optional else _REQUIRED)
        return None if value is None else Section(value, self.where(key), self.file)

    def required_section(self, key: str) -> Section:
        """The object at data[key] as a Section: absent, null or anything else is an error."""
        return Section(self.get(key, dict), self.where(key), self.file)

    def sections(self, key: str) -> list[Section]:
        """The list of objects at data[key], each as a Section."""
        items = self.get(key, list)
        here = self.where(key)
        return [Section(_object(item, here, i, self.file), f"{here}[{i}]", self.file)
                for i, item in enumerate(items)]

    def choice(self, key: str, choices: dict[str, Any], default: Any = _REQUIRED) -> Any:
        """The value that `choices` gives for the string data[key] ("LongestFirst" -> ...)."""
        name = self.get(key, str, _REQUIRED if default is _REQUIRED else None)
        if name is None:
            return default
        if name not in choices:
            raise self.error(f"unknown value {name!r}; expected one of {', '.join(choices)}", key)
        return choices[name]


def _object(item: Any, path: str, index: int, file: str) -> dict:
    if not isinstance(item, dict):
        raise TokenizerError(f"expected an object, got {_TYPE_NAMES.get(type(item), type(item).__name__)}",
                             file=file, field=f"{path}[{index}]")
    return item


class Registry:
    """The components of one kind ("normalizer", "model", ...) by their tokenizer.json "type"."""

    def __init__(self, kind: str):
        self.kind = kind
        self.types: dict[str, Callable[[Section], Any]] = {}

    def register(self, name: str):
        def add(cls):
            self.types[name] = cls
            return cls
        return add

    def build(self, section: Section | None):
        """The component a Section describes; None for a null one."""
        if section is None:
            return None
        name = section.get("type", str)
        cls = self.types.get(name)
        if cls is None:
            raise section.error(f"unknown {self.kind} type {name!r}; this engine implements "
                                f"{', '.join(sorted(self.types)) or 'none'}", "type")
        return cls.from_config(section)


def code_points(ranges: str) -> list[tuple[int, int]]:
    """unicode_tables ranges ("0021-002F 003A ...") as (first, last) code points, inclusive."""
    out = []
    for word in ranges.split():
        first, _, last = word.partition("-")
        out.append((int(first, 16), int(last or first, 16)))
    return out


def char_class(ranges: str) -> str:
    """A regex character class body ("\\U00000021-\\U0000002f...") from unicode_tables ranges."""
    return "".join(f"\\U{first:08x}" + (f"-\\U{last:08x}" if last != first else "")
                   for first, last in code_points(ranges))


def compile_class(ranges: str, suffix: str = "") -> re.Pattern:
    return re.compile(f"[{char_class(ranges)}]{suffix}")
