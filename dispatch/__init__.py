"""The enforcing runtime: operation store, dispatcher, handlers, destinations and tasks."""
