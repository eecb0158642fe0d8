"""Where agents run beyond this process: the runtimes' shared protocol.

- `node`: the one agent node (check a request, re-send a released report, charge the ledger
  before releasing, keep durable state) that Ray actors and Flower ClientApps wrap.
- `rules`: which mechanism and which budget each runtime can carry, decided once for the API
  and the CLI.
- `ray`: the optional Ray extra (a clear error without it; start or join a cluster).
- `flower`: a local Flower deployment (SuperLink, SuperNodes, TLS, node authentication).

The runners themselves live with their systems (`privrl.systems.<name>.local|ray|flower`).
Run output (run directories, config.json, plots, resumable sweeps) is `privrl.output`; how JAX
computes (devices, sharding, programs) is `privrl.compute`.
"""
