"""Pure data <-> bytes: JSON value discipline, canonical JSON, the cattrs converter, framing."""

# The converter registers hooks for runtime's plain data classes; loading the runtime package
# first makes `import actorloop.codecs.converter` work in either import order.
from actorloop import runtime as _runtime  # noqa: F401
