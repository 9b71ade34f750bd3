"""The actors: LoopActor (one per loop instance), CompactionActor and CodecActor."""

# The runtime package wires these actors (Runtime is its composition root); loading it first
# makes `import actorloop.actors.<module>` work in either import order.
from actorloop import runtime as _runtime  # noqa: F401
