"""Sentence embedding: texts -> unit vectors, and candidates ranked by cosine similarity.

    emb = engine.pipeline("sentence-embedding")
    emb(["A man is eating.", "Someone eats."])     # (2, 384) float32 unit vectors
    emb.rank("Who is eating?", ["A man is eating.", "A cat sleeps."])

    python -m engine embed "A man is eating." --json
    python -m engine similarity "Who is eating?" "A man is eating." "A cat sleeps."
"""
from __future__ import annotations

import functools
import json
import sys
import time
import warnings

import numpy as np

from ..errors import EngineError, InputError
from . import state
from . import contracts
from .base import Command, Pipeline, add_device_argument

CARD = 4                     # where its card stands on the page (engine.tasks.card_order)


class SentenceEmbedding(Pipeline):
    """Texts -> (N, D) float32 unit vectors (a sentence-transformers model: its tokenizer,
    the encoder, its pooling and normalisation); `rank` orders candidates by cosine.

    max_length: tokens per text, [CLS] and [SEP] included (default the model's
    max_seq_length); longer texts are truncated with a warning, and `truncated` lists them.
    """
    MODEL = contracts.SentenceEncoder


    batch_size = 32                             # texts per forward pass

    def __init__(self, entry, device: str | None = None, weights=None, max_length: int | None = None):
        from ..text import Tokenizer
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

    def load_model(self, device):
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
        """Fetch the rows these token ids need of the model's row tables (engine.rows), where
        the checkpoint serves them by rows; elsewhere the whole table is at hand."""
        tables = getattr(self.checkpoint.tensors, "tables", {})     # engine.site.folders's row tables
        for name in self.entry.row_tensors:
            if name in tables:
                await tables[name].fetch(input_ids)

    def embed(self, batch: dict) -> np.ndarray:
        """(N, D) unit vectors of a tokenized batch, `batch_size` texts per forward pass."""
        n, out = len(batch["input_ids"]), []
        for i in range(0, n, self.batch_size):
            part = {k: v[i:i + self.batch_size] for k, v in batch.items()}
            width = int(part["attention_mask"].sum(1).max())         # this chunk's own longest text
            part = {k: np.ascontiguousarray(v[:, :width]) for k, v in part.items()}
            out.append(self.run(lambda model: self._encode(model, part)))
        return np.concatenate(out)

    def _encode(self, model, part: dict) -> np.ndarray:
        """One chunk's (N, D) unit vectors. Where the model file splits its `embed` into host arrays
        and a pass over them (`embed_inputs`, `pooled`: models/bert.py), the pass is captured per
        (N, L) and replayed where the backend replays a whole pass (engine.graph.Passes: webgpu),
        else run eagerly; otherwise the file's `embed`."""
        from ..graph import Passes
        module = self.entry.module
        if not hasattr(module, "pooled"):
            return module.embed(model, part)
        passes = self.__dict__.setdefault("_passes", Passes())                    # dropped by to() as forward's
        return passes.run((id(model), "embed"), functools.partial(module.pooled, model),
                          module.embed_inputs(model, part), self.device).numpy()

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


PIPELINE = SentenceEmbedding


# --- the command line -----------------------------------------------------------------------------
def _add_model_options(p) -> None:
    p.add_argument("--weights", default=None, help="a sentence-transformers folder, or a safetensors file, index "
                                                   "or URL with its tokenizer.json and config.json beside it "
                                                   "(default: dist/models/all-MiniLM-L6-v2, built by build.py)")
    p.add_argument("--max-length", type=int, default=None, help="tokens per text (default: the model's, 256)")
    add_device_argument(p)


def _add_embed_arguments(p) -> None:
    p.add_argument("texts", nargs="*", metavar="TEXT")
    p.add_argument("--file", default=None, help="read the texts from this file, one per line ('-': stdin)")
    p.add_argument("--json", action="store_true", help='one JSON object per line: {"input", "embedding"}')
    _add_model_options(p)


def _add_similarity_arguments(p) -> None:
    p.add_argument("query", metavar="QUERY")
    p.add_argument("candidates", nargs="+", metavar="CANDIDATE")
    p.add_argument("--json", action="store_true", help='one JSON object per line: {"index", "text", "score"}')
    _add_model_options(p)


def _texts(args) -> list[str]:
    texts = list(args.texts)
    if args.file is not None:
        try:
            source = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")
            with source:
                texts += [line.rstrip("\r\n") for line in source]
        except UnicodeDecodeError as e:
            raise EngineError(f"{args.file}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if not texts:
        raise EngineError("no texts: give them as arguments or with --file")
    return texts


def _embedder(args) -> SentenceEmbedding:
    from . import pipeline
    pipe = pipeline("sentence-embedding", device=args.device, weights=args.weights, max_length=args.max_length)
    warnings.filterwarnings("ignore", message=".*were truncated")     # said once per text below instead
    return pipe


def _note_truncated(pipe, texts) -> None:
    for i in pipe.truncated:
        print(f"note: text {i + 1} is longer than {pipe.max_length} tokens; its embedding is of the first "
              f"{pipe.max_length} ({texts[i][:40]!r}...)", file=sys.stderr)


def _embed(args) -> int:
    texts = _texts(args)
    pipe = _embedder(args)
    vectors = pipe(texts)
    _note_truncated(pipe, texts)
    for text, vector in zip(texts, vectors):
        if args.json:
            print(json.dumps({"input": text, "embedding": [round(float(v), 7) for v in vector]},
                             ensure_ascii=False))
        else:
            print(f"{text[:60]!r}: [{', '.join(f'{v:.4f}' for v in vector[:6])}, ...] ({len(vector)} dims)")
    return 0


def _similarity(args) -> int:
    pipe = _embedder(args)
    ranked = pipe.rank(args.query, args.candidates)
    _note_truncated(pipe, [args.query, *args.candidates])
    for r in ranked:
        if args.json:
            print(json.dumps({"index": r["index"], "text": r["text"], "score": round(r["score"], 6)},
                             ensure_ascii=False))
        else:
            print(f"{r['score']:.4f}  {r['text']}")
    return 0


COMMANDS = {
    "embed": Command(
        help="sentence embeddings (all-MiniLM-L6-v2): one unit vector per text",
        description="Embed each text as a unit vector (sentence-embedding task). Texts longer than the model's "
                    "limit are truncated, with a note on stderr.",
        add_arguments=_add_embed_arguments, run=_embed),
    "similarity": Command(
        help="rank candidate texts by cosine similarity to a query",
        description="Rank the candidates by the cosine similarity of their sentence embeddings to the query's, "
                    "best first.",
        add_arguments=_add_similarity_arguments, run=_similarity),
}


# --- the page's worker ----------------------------------------------------------------------------
async def embed_texts(texts, task: str = "sentence-embedding") -> str:
    """Texts -> their unit vectors, the cosine similarity of every pair, the texts truncated,
    the rows fetched for them and timing."""
    pipe = state.loaded(task)
    texts = list(state.py(texts))
    async with state.lock:
        t0 = time.perf_counter()
        with warnings.catch_warnings():              # truncation is reported in the result instead
            warnings.simplefilter("ignore", UserWarning)
            batch = await pipe.prepare(texts)        # word-embedding rows by Range, without blocking
        t1 = time.perf_counter()
        vectors = pipe.embed(batch)                  # falls back by itself if the GPU is lost
        ms = (time.perf_counter() - t1) * 1e3
        notice = state.notice(pipe)
    similarity = pipe.similarity(vectors, vectors)
    return json.dumps({"embeddings": np.round(vectors, 7).tolist(), "similarity": np.round(similarity, 6).tolist(),
                       "truncated": pipe.truncated, "max_length": pipe.max_length,
                       "tokens": int(batch["attention_mask"].sum()),
                       "fetch_ms": round((t1 - t0) * 1e3, 2), "ms": round(ms, 2), "device": state.current["device"],
                       "rows": _row_stats(pipe), "cache_error": _fetch_stats(pipe).get("cache_error"), **notice})


def _fetch_stats(pipe) -> dict:
    """What the loader of the pipeline's weights counted (the row tables' fetches included)."""
    return getattr(getattr(pipe.checkpoint.tensors, "tensors", pipe.checkpoint.tensors), "fetch_stats", {})


def _row_stats(pipe) -> dict:
    tables = getattr(pipe.checkpoint.tensors, "tables", {})
    return {name: {"fetched_rows": t.fetched_rows, "rows": t.shape[0]} for name, t in tables.items()}


WORKER = (embed_texts,)
