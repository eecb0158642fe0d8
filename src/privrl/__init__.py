"""privrl: privacy-preserving distributed and federated reinforcement learning.

Import submodules explicitly (privrl.privacy, privrl.federation, privrl.algorithms, ...): this
package module stays light so that aggregator-side code never pulls in environment code.
"""

__version__ = "0.1.0"
