"""The agents' REST API (DESIGN §7): thin DRF views over `dispatch.services`."""
