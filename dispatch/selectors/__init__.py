"""Read-only queries for the console and the API (the console reads here, writes via services).

Every function takes the viewing principal and scopes by its tenant, so no page can show another
tenant's rows. Lists are keyset-paged on an indexed ordering and never count a whole table:
counts are capped (`count_capped`), so a queue of 100,000 pending rows costs the same as one
of 100.

One module per concept; callers import the module they read, this package re-exports nothing:

- `paging`: `Page`, `Count`, `COUNT_CAP`, `count_capped` and the keyset helpers every list
  pages with;
- `approvals`: the approval queue and its count, one approval with the revisions it references,
  the approval of a proposal, and the decisions (the Decided tab);
- `operations`: the operations list, the unknown outcomes and their count, one operation with
  its attempts and timeline, the operation of a proposal;
- `outcomes`: renewals of unknown outcomes (the decidable ones, one for review, the latest and
  the pending one of an operation) and how to check an operation's destination;
- `principals`: the tenant's principals and their grants (the grant forest, a caller's own);
- `contracts`: the registered contracts: their names, the one of a fingerprint, an action's
  summary sentence, how resource arguments read, the grant scope keys they require;
- `executions`: the model usage an execution records;
- `audit`: the audit's events, filters, kinds and the proposals a page of them names;
- `seals`: the sealed audit's blocks and checkpoints;
- `changes`: the "changed" and "stale" flags of proposals whose resources moved on;
- `evidence`: a publication's evidence and a question's evidence chain;
- `votes`: the votes toward an approval's quorum;
- `pauses`: the pauses in force and lifted;
- `notifications`: the notification delivery log.
"""
