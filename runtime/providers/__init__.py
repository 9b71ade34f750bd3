"""Model providers: the seam, deterministic test providers, simulated and HTTP adapters."""
