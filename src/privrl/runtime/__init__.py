"""What every system's runners share.

- `devices`: one XLA CPU device per core, and the persistent compilation cache.
- `sharding`: independent trials vmapped and split over those devices.
- `output`: run directories that never overwrite, config.json, JSON and plots, resumable sweeps.
- `ray`: the optional Ray extra (a clear error without it; start or join a cluster).
- `node`: one agent node, the release protocol of every distributed runtime's agents (check
  the request, re-send a released report, charge the ledger before releasing, durable state).
- `rules`: what every system's runtime rules share (each system's `runtimes.check_runtime`,
  called by its API entry points and its CLI alike).

The runners themselves live with their systems: `privrl.systems.<name>.local` (vectorized, in
this process) and `privrl.systems.<name>.ray` (Ray actors, for PGC-A3C and FedPG-Dec).
"""
