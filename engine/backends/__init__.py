"""Backends: each one folder with an allocator and one kernel table (see engine.ops)."""
