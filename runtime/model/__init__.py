"""The data model: frozen attrs classes for messages, stream chunks, headers, events, session
meta and the values that flow through the hooks. No behaviour beyond construction."""
