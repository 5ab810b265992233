"""Models, one per file, with attributes named as in their checkpoints.

Each file declares its registry entry (`ENTRY`, or `ENTRIES` for several checkpoints of one
architecture; see engine/registry.py); MODULES lists the
files the registry reads, in the order the page shows their cards.
"""
MODULES = ("mnist_cnn", "efficientnet_lite", "yolo", "bert", "llama", "whisper")
