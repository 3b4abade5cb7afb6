#!/usr/bin/env python3
"""The interactor of the guessing game (README.md in this directory).

Started by `capsule judge --interactor` as `interactor.py INPUT`, where
INPUT holds `n secret`. It tells the solution n, then answers each guess
with `<` (the secret is smaller), `>` (larger) or `=` (found), allowing at
most as many guesses as n has binary digits (enough for a binary search).

Exit status: 0 when the solution found the secret, 1 (wrong answer, the
reason on stderr) for a malformed or out-of-range guess, too many guesses,
or a solution that stopped talking.
"""
import os
import re
import sys


def verdict(code, message):
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    # Not sys.exit: nothing may be flushed to a pipe the solution closed.
    os._exit(code)


def main():
    with open(sys.argv[1]) as f:
        n, secret = map(int, f.read().split())
    allowed = n.bit_length()
    try:
        print(n, flush=True)
        for k in range(1, allowed + 1):
            line = sys.stdin.readline()
            if not line:
                verdict(1, f"wrong answer: the solution stopped after {k - 1} guesses")
            if not re.fullmatch(r"-?[0-9]{1,20}", line.strip()):
                verdict(1, f"wrong answer: guess {k}: {line.strip()[:40]!r} is not a number")
            x = int(line)
            if not 1 <= x <= n:
                verdict(1, f"wrong answer: guess {k}: {x} is not between 1 and {n}")
            if x == secret:
                print("=", flush=True)
                verdict(0, f"ok: found {secret} in {k} guesses")
            print("<" if secret < x else ">", flush=True)
    except BrokenPipeError:
        verdict(1, "wrong answer: the solution closed its input")
    verdict(1, f"wrong answer: {secret} not found in {allowed} guesses")


main()
