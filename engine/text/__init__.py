"""Text tokenizers from a Hugging Face tokenizer.json or a GGUF's metadata, in pure Python
(stdlib + NumPy), so that they run in Pyodide too.

    from engine.text import Tokenizer, ChatTemplate
    tok = Tokenizer.from_file("tokenizer.json")
    tok.encode("Hello world!").tokens       # ['[CLS]', 'hello', 'world', '!', '[SEP]', ...]
    tok = Tokenizer.from_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)   # or:
    prompt = ChatTemplate(tok.chat_template, special_tokens=tok.special_tokens).render(messages, True)
    stream = tok.decode_stream()            # stream.step(id) -> the text that id completes

Implemented: the BERT / WordPiece family (BertNormalizer, BertPreTokenizer, WordPiece,
TemplateProcessing / BertProcessing, the WordPiece decoder), byte-level BPE (ByteLevel, Split
and Digits pre-tokenizers, BPE, the ByteLevel decoder; from tokenizer.json or from a GGUF),
added tokens, truncation, padding, streaming decoding, and chat templates (rendered with jinja2,
in a bounded sandbox: chat.py, template_sandbox.py).
"""
from .chat import ChatTemplate
from .encoding import Encoding
from .stream import StreamDecoder
from .tokenizer import BatchArrays, Padding, Tokenizer, Truncation

__all__ = ["Tokenizer", "Encoding", "BatchArrays", "Truncation", "Padding", "StreamDecoder", "ChatTemplate"]
