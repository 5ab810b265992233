"""Models, one per file, with attributes named as in their checkpoints."""
