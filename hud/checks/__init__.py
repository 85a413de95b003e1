"""hud.checks: job → check run on the upstream PR; the `crcr/gate` gate; re-runs; on-call comments.

What reaches GitHub (CRCR.md, "Check runs on the upstream PR", "L4 blocking"):

* one check run per job (per attempt row), for L4 always and for L3 when the PR carries
  `ciflow/crcr/<device>`; created when the job first reports and updated in place when it
  completes. Per-job check runs carry the raw conclusion and are informational;
* one `crcr/gate` check per dispatched head SHA that applies the L4 rule (`gate_decision`, the
  same function `GET /api/v1/gate/<sha>` answers with);
* re-runs of downstream runs when a reviewer re-requests a check run or the check suite;
* one comment per (PR, backend) pinging the backend's on-calls on a failure, edited in place.

Convergence follows relay part 1: every row that mirrors something (CheckRunMirror, GateCheck,
OncallComment, RerunRequest) stores what GitHub should show (`desired_hash`) and what it
confirmed (`sent_hash`). A sync first claims its row with a conditional UPDATE (a lease), so
one worker at a time talks to GitHub for it; a sync that finds the row claimed marks it
`resync` and the holder takes one more pass before releasing. Creating is not idempotent on
GitHub, so it is never retried blindly: the row records that a create was attempted, creates go
through a client without in-client retries, and a later attempt first looks the run up by name
(`list_check_runs_for_ref`) and adopts it. `reconcile` re-enqueues whatever a lost enqueue, a
crashed worker or a GitHub outage left behind, so each PR converges to exactly one check run per
job and per gate, with one create and, per job, at most one update.

Where things are: `mirror` (the entry points tasks and the relay call, and every public name
re-exported), `scope` (which jobs are mirrored), `check_runs` (per-job check runs), `gate` (the
L4 rule and its check run), `state` (what pages and the API show), `reruns`, `oncall`,
`reconcile`, `sync` (claim, send, retry: shared by all of them), `text` (inert markdown).
"""
