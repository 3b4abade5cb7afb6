#!/usr/bin/env python3
"""A Claude Code PreToolUse hook (matcher "Bash") that runs the agent's
shell commands through capsule, over one layer kept for review
(docs/agents.md): the command is rewritten, nothing else changes.

    capsule layer diff ~/.local/state/capsule/agent-bash     # review
    capsule layer commit ~/.local/state/capsule/agent-bash   # apply

Reads the hook's JSON on stdin, writes the decision on stdout."""

import json
import os
import shlex
import sys

LAYER = os.environ.get("CAPSULE_AGENT_LAYER",
                       os.path.expanduser("~/.local/state/capsule/agent-bash"))

event = json.load(sys.stdin)
command = (event.get("tool_input") or {}).get("command")
if event.get("tool_name") != "Bash" or not isinstance(command, str):
    sys.exit(0)  # not ours: no decision
wrapped = "capsule run -q --no-review --explain --layer %s -- /bin/sh -c %s" % (
    shlex.quote(LAYER), shlex.quote(command))
json.dump({"hookSpecificOutput": {
    "hookEventName": "PreToolUse",
    "permissionDecision": "allow",
    "permissionDecisionReason": "sandboxed by capsule; changes land in the layer " + LAYER,
    "updatedInput": {**event["tool_input"], "command": wrapped},
}}, sys.stdout)
