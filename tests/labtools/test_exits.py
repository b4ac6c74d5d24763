"""The exit statuses of the lab's commands live in ``labtools.exits`` alone: no other labtools module returns or exits
with a number of its own."""

import ast
import signal
from pathlib import Path

from labtools import exits

TOOLS = Path(__file__).resolve().parents[2] / "labtools"


def test_the_statuses():
    assert (exits.OK, exits.FAILED, exits.BAD_INPUT) == (0, 1, 2)
    assert exits.signalled(signal.SIGTERM) == 143 and exits.signalled(signal.SIGINT) == 130
    assert exits.signalled(None) == 143


def test_no_command_exits_with_a_number_of_its_own():
    bare = []
    for path in sorted(TOOLS.glob("*.py")):
        if path.name == "exits.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            calls_exit = isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("exit", "_exit")
            value = node.value if isinstance(node, ast.Return) else node.args[0] if calls_exit and node.args else None
            if isinstance(value, ast.Constant) and type(value.value) is int:
                bare.append(f"{path.name}:{node.lineno}")
            if isinstance(value, ast.BinOp) and isinstance(value.left, ast.Constant) and value.left.value == 128:
                bare.append(f"{path.name}:{node.lineno}")
    assert not bare, f"exit statuses outside labtools.exits: {bare}"
