#!/usr/bin/env python3
"""A checker program for a+b, testlib style: `checker.py input output answer`.

Accepts the output when its first token is the expected integer and
nothing follows it. Exit status 0: accepted; 1: wrong answer; the message
(on stderr) goes to capsule judge's table. Anything else (it crashed, say)
is a failure of the checker: capsule judge reports a judge error.

    capsule judge --lang cpp solutions/ok.cpp --tests tests --checker ./checker.py
"""
import sys

_, input_path, output_path, answer_path = sys.argv
with open(answer_path) as f:
    expected = int(f.read())
with open(output_path, "rb") as f:
    tokens = f.read().split()
if not tokens:
    print("wrong answer: empty output", file=sys.stderr)
    sys.exit(1)
try:
    got = int(tokens[0])
except ValueError:
    print(f"wrong answer: {tokens[0][:40]!r} is not an integer", file=sys.stderr)
    sys.exit(1)
if got != expected:
    print(f"wrong answer: expected {expected}, got {got}", file=sys.stderr)
    sys.exit(1)
if len(tokens) > 1:
    print(f"wrong answer: extra output after the sum: {tokens[1][:40]!r}", file=sys.stderr)
    sys.exit(1)
print(f"ok: {got}", file=sys.stderr)
