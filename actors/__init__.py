"""The actors: `LoopActor` (one per loop instance), `CompactionActor` and `CodecActor`.

This package sits above the data model, codecs and kernel and below the `Runtime` facade;
importing it loads nothing (docs/ARCHITECTURE.md).
"""
