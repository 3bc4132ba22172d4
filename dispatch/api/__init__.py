"""The agents' REST API (docs/rest-api.md#calls): thin DRF views over `dispatch.services`."""
