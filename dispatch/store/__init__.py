"""The store's hand-written statements (docs/design.md#statement-layer), behind one fence.

Every statement of ours that the ORM does not write lives in this package, as a typed function
with keyword arguments whose SQL names its parameters (`%(name)s`); `sql` holds what they share
(the declared `STATEMENTS`, the pipeline, the fixed inserts and loads). Only `dispatch.services`
imports it (an import-linter contract), and only this folder may format SQL text (ruff's S608
is ignored here and nowhere else). Every value is a bound parameter; only our own table and
column names are formatted in.

- `audit`: the audit table's one insert, and its part of the one-round-trip statements;
- `operations`: an operation's claim, moves and attempts, and the worker's load of it;
- `claims`: the claim's locks and, on PostgreSQL, its one round trip;
- `approvals`: an approval request's lock and its one conditional move;
- `resources`: a resource's compare-and-swap, derived from the registered kinds' tables;
- `loads`: the loads a request's checks read, a proposal for its dispatch, an approval for its
  decision, a revision for an admission;
- `principals`: a bearer token's load, with its principal and user;
- `notifications`: the approvers' addresses and an agent's webhook endpoints;
- `pauses`: a tenant's count of pauses in force, share-locked;
- `executions`: whether an execution is a workflow run (its adapter's prefix), and a run-tree
  node share-locked;
- `grants`: a grant's ancestry, share-locked inside a claim or a decision;
- `budgets`: the budget counters' conditional upsert;
- `ceilings`: an action's run and open scope, and the actions in flight;
"""
