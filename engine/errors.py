"""One error hierarchy: every failure a user can cause derives from EngineError."""
from __future__ import annotations

from .untrusted import shown


def _placed(message: str, file: str | None, **named) -> str:
    """`message (file F, tensor 'T')`: the message with where it happened, as far as known.
    Names come from the files themselves, so a long one is cut (shown)."""
    where = ([f"file {file}"] if file else []) + [f"{k} {shown(v, 200)}" for k, v in named.items() if v is not None]
    return f"{message} ({', '.join(where)})" if where else message


class EngineError(Exception):
    """Base of every error the engine raises on bad input or configuration."""


class BackendError(EngineError):
    """Unknown or unavailable device/backend."""


class KernelFault(BackendError):
    """A kernel trapped on the browser's kernel pool (a helper thread or the calling one): that
    call's result is void, and the kernels run on one thread from then on."""


class PoolMemoryFull(BackendError, MemoryError):
    """The browser's kernel pool could not grow its memory for what it was placing there (named
    in the message); that work runs on one thread instead, so the page keeps working."""


class DeviceLost(BackendError):
    """The GPU device went away mid-run (driver reset, another tab, device.destroy()); the
    tensors it held are gone. Pipelines rebuild on the next best backend and carry on."""


class InputError(EngineError, ValueError):
    """Bad user input: an image that cannot be read, wrong arguments."""


class ContractError(EngineError):
    """A model lacks what its task needs of it (engine/tasks/contracts.py): the message names the
    model, the contract and every member missing."""


class WeightsError(EngineError):
    """A weights file or tensor is missing, malformed or does not fit the model.

    `file` and `tensor` name the offender where known; both appear in the message.
    """

    def __init__(self, message: str, *, file=None, tensor: str | None = None):
        self.file = None if file is None else str(file)
        self.tensor = tensor
        super().__init__(_placed(message, self.file, tensor=tensor))


class TruncatedFile(WeightsError):
    pass


class HeaderTooLarge(WeightsError):
    pass


class InvalidHeader(WeightsError):
    pass


class UnknownDtype(WeightsError):
    pass


class InvalidOffsets(WeightsError):
    pass


class SizeMismatch(WeightsError):
    pass


class MissingShard(WeightsError):
    pass


class MissingTensor(WeightsError, KeyError):
    def __str__(self) -> str:          # KeyError would repr() the message
        return self.args[0] if self.args else ""


class UnexpectedTensor(WeightsError):
    pass


class ShapeMismatch(WeightsError):
    pass


class DtypeMismatch(WeightsError):
    pass


class IntegrityError(WeightsError):
    """Bytes that arrived do not match the recorded checksum."""


class ModelTooLarge(WeightsError):
    """The model would not fit in the memory it must live in (a page's WebAssembly heap);
    said before any of its weights are downloaded."""


class FetchError(WeightsError):
    """A byte source could not deliver (network failure, short read)."""


class SourceNotFound(FetchError, FileNotFoundError):
    """The file or URL does not exist (so callers can tell it from a broken one)."""


class NeedsAwait(FetchError):
    """A blocking call needed the browser (a fetch, the Cache API) but this runtime cannot block
    on a JavaScript promise: no JavaScript Promise Integration, or Python was not entered
    asynchronously. The message names the awaitable form to use instead."""


class UnsafePickle(WeightsError):
    """A pickled checkpoint asks for a global outside the allowlist; nothing of it ran."""


class TokenizerError(InputError):
    """A tokenizer.json that is malformed or names a component the engine does not implement.

    `file` and `field` (a dotted path such as "normalizer.type") name the offender where known.
    """

    def __init__(self, message: str, *, file=None, field: str | None = None):
        self.file = None if file is None else str(file)
        self.field = field
        super().__init__(_placed(message, self.file, field=field))


class AudioError(InputError):
    """Bad or unsupported audio: a WAV file that is malformed or in a format the reader does
    not implement, or a container that cannot be decoded here. `file` names it where known."""

    def __init__(self, message: str, *, file=None):
        self.file = None if file is None else str(file)
        super().__init__(_placed(message, self.file))
