"""The people's side: login, approval queue and decisions, unknown outcomes, grants, audit."""
