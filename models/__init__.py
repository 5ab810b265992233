"""Models, one per file (or one family per file), with attributes named as in their checkpoints.

Each model file declares its registry entry (`ENTRY`, or `ENTRIES` for several checkpoints of one
architecture; see engine/registry.py), which finds it: every module here that declares one is a
model file, read in the order of the files' names. The other modules are their helpers.
"""
