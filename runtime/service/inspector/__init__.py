"""The session inspector: web pages for sessions, timelines, fork trees, exact requests and
prompt-cache health, served by `actorloop serve` at `/` (docs/inspector.md). Needs the
`serve` extra; nothing is imported until a module of the package is.

`routes.inspector_routes(service)` are the Starlette routes; `views` gathers what each page
shows, `timeline`, `tree` and `chart` compute it, `templating` renders it; `command.inspect`
is `actorloop inspect`.
"""
