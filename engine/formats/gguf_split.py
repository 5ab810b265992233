"""GGUF split files: one model in several GGUFs (`name-00001-of-00003.gguf`, ...), as one mapping.

llama.cpp's `gguf-split` tool cuts a model that is too big for one file (or for a host's file
limit) into complete GGUF files, each with its own header and some of the tensors. Facts taken
from llama.cpp (examples/gguf-split, src/llama-model-loader.cpp):

- the files are named `<prefix>-%05d-of-%05d.gguf`, numbered from 1;
- each carries `split.no` (u16, numbered from 0), `split.count` (u16) and
  `split.tensors.count` (i32, the tensors of all files together);
- the first holds the model's metadata; the others hold only the split keys (and the
  GGUF's own); every tensor is in exactly one file.

`open_splits(first, open_file)` checks all of that, opening every other file through
`open_file(filename)` (a sibling of the first: a path, a URL, a site's cache), and returns a
`GGUFSplits`: a lazy mapping of every tensor, with the first file's metadata.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from ..errors import InvalidHeader, MissingShard, MissingTensor, SourceNotFound
from .safetensors import _LazyWeights

SPLIT_NAME = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
MAX_SPLITS = 9999                # what the five-digit names allow


def split_count(metadata) -> int:
    """How many files the model is split into (1 for a GGUF that is not a split)."""
    count = metadata.get("split.count", 1)
    return count if isinstance(count, int) and not isinstance(count, bool) else -1


def split_names(filename: str, count: int) -> list[str]:
    """The names of all `count` files of the split whose one file is `filename`."""
    m = SPLIT_NAME.match(filename)
    if m is None:
        return []
    return [f"{m['prefix']}-{n:05d}-of-{count:05d}.gguf" for n in range(1, count + 1)]


def _number(metadata, key: str, lo: int, hi: int, file: str) -> int:
    value = metadata.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidHeader(f"{key} = {value!r}: a split GGUF gives an integer in [{lo}, {hi}]", file=file, tensor=key)
    return value


def first_split(file) -> tuple[int, list[str]]:
    """(count, the other files' names) of a split's first file; an error naming the file when it
    is not the first, or its keys and name disagree."""
    name = file.name.replace("\\", "/").rsplit("/", 1)[-1].split("?")[0]
    count = _number(file.metadata, "split.count", 1, MAX_SPLITS, file.name)
    number = _number(file.metadata, "split.no", 0, count - 1, file.name)
    names = split_names(name, count)
    if number != 0:
        first = f" ({names[0]})" if names else ""
        raise InvalidHeader(f"this is file {number + 1} of a GGUF split into {count}: open the first{first}",
                            file=file.name, tensor="split.no")
    if not names or names[0] != name:
        raise InvalidHeader(f"a GGUF split into {count} files is named <prefix>-00001-of-{count:05d}.gguf and so "
                            f"on, so that the others can be found; this one is named {name!r}", file=file.name)
    return count, names[1:]


class GGUFSplits(_LazyWeights):
    """A split GGUF as one lazy Mapping[str, Tensor | QuantizedTensor]: `metadata` is the first
    file's, `files` the opened files in order; a tensor reads from the file that holds it."""

    def __init__(self, files: list):
        self.files = files
        self.name = files[0].name
        self.metadata = files[0].metadata
        self.version, self.alignment = files[0].version, files[0].alignment
        self._where: dict[str, object] = {}
        count = len(files)
        for number, file in enumerate(files):
            if file is not files[0]:
                if _number(file.metadata, "split.count", 1, MAX_SPLITS, file.name) != count:
                    raise InvalidHeader(f"split.count is {file.metadata['split.count']}, but the first file says "
                                        f"{count}", file=file.name, tensor="split.count")
                if _number(file.metadata, "split.no", 0, count - 1, file.name) != number:
                    raise InvalidHeader(f"split.no is {file.metadata['split.no']} in the file named as number "
                                        f"{number + 1}", file=file.name, tensor="split.no")
            for tensor in file:
                if tensor in self._where:
                    raise InvalidHeader("the tensor is in two files of the split", file=file.name, tensor=tensor)
                self._where[tensor] = file
        total = self.metadata.get("split.tensors.count")
        if total is not None and total != len(self._where):
            raise InvalidHeader(f"split.tensors.count is {total}, but the {count} files hold {len(self._where)} "
                                f"tensors", file=self.name, tensor="split.tensors.count")

    @property
    def _names(self) -> dict:
        return self._where

    def file_of(self, name: str):
        try:
            return self._where[name]
        except KeyError:
            raise MissingTensor("no such tensor in any file of the split", file=self.name, tensor=name) from None

    def info(self, name: str):
        return self.file_of(name).info(name)

    def __getitem__(self, name: str):
        return self.file_of(name)[name]

    def get_many(self, names: Iterable[str] | None = None) -> dict:
        """Several tensors (all by default): one coalesced read per file."""
        names = list(self._where if names is None else names)
        groups: dict[int, list[str]] = {}
        for name in names:
            groups.setdefault(id(self.file_of(name)), []).append(name)
        found: dict = {}
        for file in self.files:
            if id(file) in groups:
                found.update(file.get_many(groups[id(file)]))
        return {name: found[name] for name in names}

    def close(self) -> None:
        for file in self.files:
            file.close()


def open_splits(first, open_file: Callable[[str], object]) -> GGUFSplits:
    """The whole model of which `first` (an opened GGUF) is the first file: the others opened
    by `open_file(filename)`, each checked (a missing one is MissingShard naming it)."""
    _, others = first_split(first)
    files = [first]
    try:
        for name in others:
            try:
                files.append(open_file(name))
            except SourceNotFound as e:
                raise MissingShard(f"file {name!r} of the split is missing (looked for {e.file})",
                                   file=first.name) from None
        return GGUFSplits(files)
    except BaseException:
        for file in files[1:]:
            file.close()
        raise
