"""Networks as flat parameter vectors (`FlatModel`): the MLP and actor-critic of the CartPole
systems (flat), the Grid-World convolutional Q-networks (grid) and the Text-CNN (text)."""
