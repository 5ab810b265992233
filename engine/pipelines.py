"""engine.pipeline(task): a model with its pre- and post-processing behind one call.

    clf = engine.pipeline("digit-classification")
    clf("seven.png")            # [{"label": "7", "score": 0.98}, ...]
    clf = engine.pipeline("image-classification")
    clf("cat.jpg", top_k=3)     # [{"label": "tabby cat", "index": 281, "score": 0.71}, ...]
    emb = engine.pipeline("sentence-embedding")
    emb(["A man is eating.", "Someone eats."])     # (2, 384) float32 unit vectors
    emb.rank("Who is eating?", ["A man is eating.", "A cat sleeps."])
    chat = engine.pipeline("text-generation")
    chat.chat("What is the capital of France?")     # "The capital of France is Paris."

Which model serves a task, where its weights are and which class below runs it is the
registry's business (engine/registry.py; each model file declares its entry). The classes
here are generic over the models of a kind: image classification, sentence embedding, text
generation.
"""
from __future__ import annotations

import os
import warnings

import numpy as np

from . import registry
from .errors import DeviceLost, InputError, WeightsError
from .io.checkpoint import Checkpoint, location_of


def _as_image(item) -> np.ndarray:
    """A path, bytes, PIL image or NumPy array -> NumPy image array."""
    from .vision import from_pillow, read_image
    if isinstance(item, (str, os.PathLike, bytes, bytearray)):
        return read_image(item)
    if hasattr(item, "mode") and hasattr(item, "size") and hasattr(item, "convert"):   # a PIL image
        return from_pillow(item)
    if isinstance(item, np.ndarray):
        return item
    raise InputError(f"expected an image path, bytes, a PIL image or a NumPy array, got {type(item).__name__}")


def softmax_rows(logits: np.ndarray) -> np.ndarray:
    """(N, classes) logits -> probabilities."""
    shifted = np.exp(logits - logits.max(1, keepdims=True))
    return shifted / shifted.sum(1, keepdims=True)


def open_checkpoint(entry: registry.Model, weights) -> Checkpoint:
    """What `weights=` names, as a Checkpoint: None (the registry's default: in the browser the
    site's copy, fetched by Range), a location (file, index, folder, URL), a mapping of tensors,
    or a Checkpoint as is."""
    if isinstance(weights, Checkpoint):
        return weights
    if weights is None:
        if registry.in_browser():                  # the site's copy, by Range (engine.web.loader)
            from .io.rows import wait
            from .web.loader import load_checkpoint
            return wait(load_checkpoint(entry))
        default = registry.default_location(entry)
        return Checkpoint(default, location=default)
    location = location_of(weights)
    if location is None or location.endswith((".pth", ".pt")):     # no processor files beside those
        try:
            fallback = registry.default_location(entry)
        except WeightsError:                                       # not built: a missing file says so
            fallback = None
        return Checkpoint(weights, fallback=fallback)
    return Checkpoint(weights, location=location)


class _Pipeline:
    """Shared by every pipeline: the model on a backend, rebuilt from its checkpoint on the next
    best backend when the GPU goes away (`notice` says so)."""

    notice: str | None = None                   # set when the pipeline had to change backend

    def __init__(self, entry: registry.Model, device: str | None, weights):
        self.entry, self.task = entry, entry.tasks[0]
        self.checkpoint = open_checkpoint(entry, weights)
        self.device = device

    def build(self, device: str | None):
        """The model on `device`, from this pipeline's checkpoint."""
        return self.entry.load(self.checkpoint.tensors, device)

    def run(self, fn):
        """fn(model) -> NumPy result; on a lost GPU, once more on the next best backend."""
        try:
            return fn(self.model)
        except DeviceLost as e:
            self._fall_back(e)
            return fn(self.model)

    def _fall_back(self, error: DeviceLost) -> None:
        from .device import best_available
        device = best_available()               # a lost device is no longer available
        self.notice = f"{error}; continuing on {device}"
        warnings.warn(self.notice, RuntimeWarning, stacklevel=3)
        self.model, self.device = self.build(device), device

    def to(self, device: str):
        """Move the model to another backend (weights are not downloaded again)."""
        try:
            self.model.to(device)
        except DeviceLost:                      # its tensors are gone: build it again
            self.model = self.build(device)
        self.device = device
        return self


class ImageClassification(_Pipeline):
    """Images -> top-k classes with softmax scores: batches of `batch_size`, the model's own
    preprocessing (entry.options["preprocess"]: image -> (C, H, W) float32).

    labels: a list of class names or a JSON file of them; default the entry's own list, else
    labels.json beside the weights (or beside the default weights).
    """

    def __init__(self, entry, device: str | None = None, weights=None, labels=None):
        super().__init__(entry, device, weights)
        options = entry.options
        self.with_index = options.get("with_index", True)      # entries carry the class index
        self.batch_size = options.get("batch_size", 8)         # images per forward pass (bounds memory)
        self._preprocess = options["preprocess"]
        self.model = self.build(device)
        self.labels = self._labels(labels)
        classes = options.get("num_classes") or len(self.labels)
        if len(self.labels) != classes:
            raise InputError(f"{len(self.labels)} class names for a model with {classes} classes")

    def _labels(self, labels) -> list[str]:
        import json
        if labels is None and "labels" in self.entry.options:
            return list(self.entry.options["labels"])
        if labels is not None and not isinstance(labels, (str, os.PathLike)):
            return [str(name) for name in labels]
        where = os.fspath(labels) if labels is not None else None
        data = Checkpoint(None, location=where).file(os.path.basename(where)) if where \
            else self.checkpoint.file("labels.json")
        try:
            names = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise InputError(f"cannot read the class names ({e})") from None
        if not (isinstance(names, list) and names and all(isinstance(n, str) for n in names)):
            raise InputError("class names must be a JSON list of strings")
        return names

    def preprocess(self, images) -> np.ndarray:
        """Images -> (N, C, H, W) float32 batch."""
        return np.stack([self._preprocess(_as_image(im)) for im in images])

    def logits(self, batch: np.ndarray) -> np.ndarray:
        from .tensor import from_numpy
        x = np.ascontiguousarray(batch, np.float32)
        return self.run(lambda model: model(from_numpy(x, self.device)).numpy())

    def probabilities(self, images) -> np.ndarray:
        """(N, classes) class probabilities for a list of images."""
        chunks = [images[i:i + self.batch_size] for i in range(0, len(images), self.batch_size)]
        return softmax_rows(np.concatenate([self.logits(self.preprocess(chunk)) for chunk in chunks]))

    def _top(self, probs: np.ndarray, top_k: int) -> list[dict]:
        order = np.argsort(-probs, kind="stable")[:top_k]
        if self.with_index:
            return [{"label": self.labels[i], "index": int(i), "score": float(probs[i])} for i in order]
        return [{"label": self.labels[i], "score": float(probs[i])} for i in order]

    def __call__(self, inputs, top_k: int = 5):
        """One image -> its predictions; a list of images -> a list of predictions."""
        single = not isinstance(inputs, (list, tuple))
        items = [inputs] if single else list(inputs)
        if not items:
            return []
        if not 1 <= top_k <= len(self.labels):
            raise InputError(f"top_k must be between 1 and {len(self.labels)}, got {top_k}")
        results = [self._top(p, top_k) for p in self.probabilities(items)]
        return results[0] if single else results


class SentenceEmbedding(_Pipeline):
    """Texts -> (N, D) float32 unit vectors (a sentence-transformers model: its tokenizer,
    the encoder, its pooling and normalisation); `rank` orders candidates by cosine.

    max_length: tokens per text, [CLS] and [SEP] included (default the model's
    max_seq_length); longer texts are truncated with a warning, and `truncated` lists them.
    """

    batch_size = 32                             # texts per forward pass

    def __init__(self, entry, device: str | None = None, weights=None, max_length: int | None = None):
        import json

        from .text import Tokenizer
        super().__init__(entry, device, weights)
        self.tokenizer = Tokenizer.from_buffer(self.checkpoint.file("tokenizer.json"),
                                               file=f"{entry.name}/tokenizer.json")
        self.config = entry.module.Config.from_json(self.checkpoint.file("config.json"))
        pooling = json.loads(self.checkpoint.file("1_Pooling/config.json", required=False) or b"{}")
        modes = [k for k, v in pooling.items() if k.startswith("pooling_mode_") and v]
        if modes not in ([], ["pooling_mode_mean_tokens"]):
            raise InputError(f"{entry.name}: pooling {modes} is not supported (mean pooling only)")
        sbert = json.loads(self.checkpoint.file("sentence_bert_config.json", required=False) or b"{}")
        limit = self.config.max_position_embeddings
        self.max_length = int(max_length or sbert.get("max_seq_length") or entry.options.get("max_length", limit))
        if not 2 < self.max_length <= limit:
            raise InputError(f"max_length must be between 3 and {limit}, got {self.max_length}")
        self.truncated: list[int] = []          # indices of the texts the last call truncated
        self.model = self.build(device)

    def build(self, device):
        return self.entry.load(self.checkpoint.tensors, device, config=self.config)

    @property
    def dim(self) -> int:
        return self.config.hidden_size

    def tokenize(self, texts) -> dict:
        """Token arrays padded to the longest text: input_ids, attention_mask, token_type_ids (N, L)."""
        single = isinstance(texts, str)
        items = [texts] if single else texts
        if not isinstance(items, (list, tuple)):
            raise InputError(f"expected a string or a list of strings, got {type(texts).__name__}")
        if not items:
            raise InputError("expected at least one text, got an empty list")
        batch = self.tokenizer.encode_batch_arrays(list(items), max_length=self.max_length)
        self.truncated = [i for i, cut in enumerate(batch.truncated) if cut]
        if self.truncated:
            warnings.warn(f"{len(self.truncated)} text(s) longer than {self.max_length} tokens were truncated "
                          f"(indices {self.truncated[:10]})", UserWarning, stacklevel=3)
        return dict(batch)

    async def prepare(self, texts) -> dict:
        """Tokenize and fetch the word-embedding rows they need (in the browser: by Range,
        without blocking); then `embed(batch)` runs without waiting for the network."""
        batch = self.tokenize(texts)
        await self.fetch_rows(batch["input_ids"])
        return batch

    async def fetch_rows(self, input_ids) -> None:
        """Fetch the rows these token ids need of the model's row tables (engine.io.rows), where
        the checkpoint serves them by rows; elsewhere the whole table is at hand."""
        tables = getattr(self.checkpoint.tensors, "tables", {})     # engine.io.site's row tables
        for name in self.entry.row_tensors:
            if name in tables:
                await tables[name].fetch(input_ids)

    def embed(self, batch: dict) -> np.ndarray:
        """(N, D) unit vectors of a tokenized batch, `batch_size` texts per forward pass."""
        embed = self.entry.module.embed
        n, out = len(batch["input_ids"]), []
        for i in range(0, n, self.batch_size):
            part = {k: v[i:i + self.batch_size] for k, v in batch.items()}
            width = int(part["attention_mask"].sum(1).max())         # this chunk's own longest text
            part = {k: np.ascontiguousarray(v[:, :width]) for k, v in part.items()}
            out.append(self.run(lambda model: embed(model, part)))
        return np.concatenate(out)

    def __call__(self, texts) -> np.ndarray:
        """A string -> (D,); a list of strings -> (N, D) float32 unit vectors."""
        vectors = self.embed(self.tokenize(texts))
        return vectors[0] if isinstance(texts, str) else vectors

    @staticmethod
    def similarity(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Cosine similarity of every row of `a` with every row of `b`: (N, M)."""
        a, b = np.atleast_2d(a).astype(np.float32), np.atleast_2d(b).astype(np.float32)
        a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
        b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
        return a @ b.T

    def rank(self, query: str, candidates, top_k: int | None = None) -> list[dict]:
        """The candidates ordered by cosine similarity to `query`, best first:
        [{"index", "text", "score"}, ...] (the first `top_k` of them)."""
        if not isinstance(query, str):
            raise InputError(f"the query must be a string, got {type(query).__name__}")
        if not isinstance(candidates, (list, tuple)) or not candidates:
            raise InputError("expected a non-empty list of candidate texts")
        vectors = self([query, *candidates])
        scores = self.similarity(vectors[:1], vectors[1:])[0]
        order = np.argsort(-scores, kind="stable")[:top_k]
        return [{"index": int(i), "text": candidates[i], "score": float(scores[i])} for i in order]


class TextGeneration(_Pipeline):
    """Chat with a causal language model from a GGUF (its tokenizer and chat template come from
    the file's metadata), streaming, over one KV cache that later turns reuse.

        chat = engine.pipeline("text-generation")
        chat.chat("What is the capital of France?")             # one user message -> the answer
        for piece in chat.stream(messages, temperature=0.7, seed=1):
            print(piece, end="")
        chat("Once upon a time", max_new_tokens=20)             # plain continuation, no template
        chat.stats      # prompt/reused/new tokens, ttft_s, prefill_tok_s, decode_tok_s, stop_reason

    messages: a str (one user message) or a list of {"role", "content"}; the template adds the
    model's default system message when the first is not "system". Options (here or as defaults
    at construction): engine.generation.GenerationConfig's fields. capacity: the context length
    the cache holds (prompt + answer); SmolLM2's cache takes 46 KB a position (47 MB for 1024).
    """

    def __init__(self, entry, device: str | None = None, weights=None, capacity: int = 1024, **defaults):
        from .device import best_for_quantized
        from .generation import GenerationConfig, Generator
        from .text import ChatTemplate, Tokenizer
        device = device or best_for_quantized()           # not NumPy's reference kernels (30x slower)
        super().__init__(entry, device, weights)
        self.model = self.build(device)
        metadata = getattr(self.model, "metadata", None) or {}
        self.tokenizer = Tokenizer.from_gguf(metadata)
        template = self.tokenizer.chat_template
        self.template = ChatTemplate(template) if template else None
        eos = {metadata.get(k) for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id")}
        if self.template is not None:                     # ChatML ends a turn with <|im_end|>
            eos.add(self.tokenizer.token_to_id("<|im_end|>"))
        GenerationConfig.of(defaults)                     # bad defaults fail here, not at the first call
        self.defaults = defaults
        if isinstance(capacity, bool) or not isinstance(capacity, int) or not 2 <= capacity <= self.model.config.max_position_embeddings:
            raise InputError(f"capacity must be an integer in [2, {self.model.config.max_position_embeddings}], "
                             f"got {capacity!r}")
        self.generator = Generator(self.model, self.tokenizer, capacity, {i for i in eos if isinstance(i, int)})

    def _config(self, options: dict):
        from .generation import GenerationConfig
        return GenerationConfig.of({**self.defaults, **options})

    def prompt_ids(self, messages) -> list[int]:
        """The token ids of a conversation rendered by the chat template, ready for the answer."""
        if self.template is None:
            raise InputError(f"{self.entry.name} has no chat template: call it with a plain prompt instead")
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        text = self.template.render(messages, add_generation_prompt=True)
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def stream(self, messages, cancel=None, **options):
        """The answer to a conversation, as text pieces while it is generated."""
        return self.generator.stream(self.prompt_ids(messages), self._config(options), cancel)

    def chat(self, messages, callback=None, cancel=None, **options) -> str:
        """The whole answer; callback(piece) is called with each piece as it comes."""
        return _joined(self.stream(messages, cancel, **options), callback)

    def stream_text(self, prompt: str, cancel=None, **options):
        """The continuation of a plain text prompt (no chat template), as text pieces."""
        if not isinstance(prompt, str) or not prompt:
            raise InputError(f"the prompt must be a non-empty string, got {prompt!r}")
        return self.generator.stream(self.tokenizer.encode(prompt).ids, self._config(options), cancel)

    def __call__(self, prompt: str, callback=None, cancel=None, **options) -> str:
        """The continuation of a plain text prompt (no chat template)."""
        return _joined(self.stream_text(prompt, cancel, **options), callback)

    def cancel(self) -> None:
        """Stop the running generation before its next token."""
        self.generator.cancel()

    def reset(self) -> None:
        """A new conversation: nothing of the cached one is reused."""
        self.generator.reset()

    @property
    def stats(self) -> dict:
        return dict(self.generator.stats)

    def to(self, device: str):
        super().to(device)
        self.generator.bind(self.model)
        return self


def _joined(pieces, callback) -> str:
    out = []
    for piece in pieces:
        out.append(piece)
        if callback is not None:
            callback(piece)
    return "".join(out)


# which class runs a registry entry (its `pipeline` field)
PIPELINES = {"image-classification": ImageClassification, "sentence-embedding": SentenceEmbedding,
             "text-generation": TextGeneration}


def pipeline(task: str, device: str | None = None, weights=None, **options):
    """A ready-to-call pipeline for `task` (see engine.registry.tasks()) on `device`;
    `options` go to the pipeline (image classification: labels=; sentence embedding: max_length=)."""
    entry = registry.for_task(task)
    from .device import get_backend
    get_backend(device)                       # a clear error for an unknown device, before loading
    pipe = PIPELINES[entry.pipeline](entry, device=device, weights=weights, **options)
    pipe.task = task
    return pipe
