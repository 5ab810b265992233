"""Models, one per file, with attributes named as in their checkpoints.

Each file declares its registry entry (`ENTRY`, see engine/registry.py); MODULES lists the
files the registry reads, in the order the page shows their cards.
"""
MODULES = ("mnist_cnn", "efficientnet_lite", "bert", "llama", "whisper")
