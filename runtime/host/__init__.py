"""What hosts the loops: the `Runtime` composition root, subagent tools, and the
OpenTelemetry spans built around them."""
