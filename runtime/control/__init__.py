"""How a loop is configured and steered from outside it: `AgentOptions` and `Tool`, the hook
registry, the `Agent` handle, and the collector policy a runtime applies."""
