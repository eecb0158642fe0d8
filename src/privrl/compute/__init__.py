"""How JAX computes here, below every environment and system (envs/ may import it).

- `devices`: one XLA CPU device per core, inline CPU dispatch, the persistent compilation cache.
- `sharding`: independent trials vmapped and split over those devices, in fixed blocks behind
  optimization barriers (`in_blocks`), so a trial computes the same floats in any program.
- `programs`: several settings of one system run as one program (a batched parameter pytree).
"""
