"""One package per published system, each readable top to bottom: `algorithm` (config and
pure JAX functions), `local` (the vectorized runner and what a run writes), `ray` where it
has one, `reproduce` (the paper's tables) and `cli` (its commands)."""
