"""`actorloop serve`: the runtime as an HTTP/SSE service (docs/serve.md, docs/spec/runtime.md
§15). Needs the `serve` extra; nothing is imported until a module of the package is.

`app.create_app(service)` is the ASGI app, `service.SessionService` what it does with the
runtime, `profiles` the agent profiles and `AppConfig`, `server.serve` the Hypercorn trio
worker with the drain; `command.serve` is the click command.
"""
