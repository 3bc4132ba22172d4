"""The demo: contracts, handlers, destinations, commands and seed data
(docs/design.md#demo, #running).

A runtime extension (`demo.extension`, loaded through `settings.DISPATCH_EXTENSIONS`) and a
Django app (`demo`, for its management commands). The runtime (`dispatch`) and the console
never import it. This package's own import is Django-free, so that `python -m
demo.destinations` runs the destinations without settings.
"""
