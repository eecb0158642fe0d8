"""The privacy boundary: aggregator-side code never imports environment or rollout code."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import privrl

SRC = Path(privrl.__file__).parent
AGGREGATOR_SIDE = ["privrl.federation", "privrl.federation.aggregator", "privrl.federation.pushsum",
                   "privrl.federation.topology", "privrl.federation.star",
                   "privrl.federation.service", "privrl.federation.vertical",
                   "privrl.federation.gossip"]
AGENT_SIDE = ("privrl.envs", "privrl.algorithms", "privrl.runtime", "gymnax", "gymnasium")


@pytest.mark.parametrize("module", AGGREGATOR_SIDE)
def test_importing_aggregator_side_loads_no_agent_code(module):
    code = (
        f"import sys, {module}\n"
        f"bad = sorted(m for m in sys.modules if m.startswith({AGENT_SIDE!r}))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"{module} pulled in agent-side modules: {out.stdout}"


def test_federation_sources_import_nothing_agent_side():
    for path in (SRC / "federation").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
                if node.level:  # relative imports must stay inside federation/ or privacy
                    names = [f"privrl.{node.module}" if node.level == 2 else
                             f"privrl.federation.{node.module}"]
            else:
                continue
            for name in names:
                assert not name.startswith(AGENT_SIDE), f"{path.name} imports {name}"
