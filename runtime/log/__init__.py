"""The session log and what reads it: the validated `Session` and its folds, crash repair,
requests and their digests, verification, rebuilds, usage and cache health."""
