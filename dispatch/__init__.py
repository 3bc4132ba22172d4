"""The enforcing runtime: operation store, dispatcher, the handler port, extensions and tasks."""
