"""Every denial the service layer owns, from realistic input, and nothing changed by it: one
module per kind of refusal."""
