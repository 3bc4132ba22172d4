"""What operators watch (docs/design.md#running): the ids bound to log lines (`context`) and the
Prometheus series computed from the store (`metrics`)."""
