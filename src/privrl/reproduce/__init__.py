"""Reproduction commands: one module per paper, each printing the paper's numbers beside ours."""
