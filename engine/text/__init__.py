"""Text tokenizers from a Hugging Face tokenizer.json, in pure Python (stdlib + NumPy).

    from engine.text import Tokenizer
    tok = Tokenizer.from_file("tokenizer.json")
    tok.encode("Hello world!").tokens       # ['[CLS]', 'hello', 'world', '!', '[SEP]', ...]

Implemented today: the BERT / WordPiece family (BertNormalizer, BertPreTokenizer, WordPiece,
TemplateProcessing / BertProcessing, the WordPiece decoder), added tokens, truncation, padding.
"""
from .encoding import Encoding
from .tokenizer import BatchArrays, Padding, Tokenizer, Truncation

__all__ = ["Tokenizer", "Encoding", "BatchArrays", "Truncation", "Padding"]
