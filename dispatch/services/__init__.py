"""The one write path (docs/design.md#one-write-path): every state change goes through a function in
this package."""
