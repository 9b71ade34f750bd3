"""Pure data <-> bytes: JSON value discipline, canonical JSON, the cattrs converter, framing.

The bottom of the package with the data model it encodes: importing a codec loads no
actor, no provider and no HTTP client (docs/ARCHITECTURE.md).
"""
