#!/usr/bin/env python3
"""english_corpus.py — English-like text for the GPT tests, the same on
every machine: random sentences of 4 to 14 of the first WORDS of a list of
common words (seeded), until CHARS characters.

Usage: english_corpus.py PATH CHARS WORDS
"""
import random
import sys

COMMON = (
    "the of and to in is that it was for on are as with his they at be this from have or by "
    "one had not but what all were when we there can an your which their said if do will each "
    "about how up out them then she many some so these would other into has more her two like "
    "him see time could no make than first been its who now people my made over did down only "
    "way find use may water long little very after words called just where most know"
).split()


def main():
    path, chars, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    words = COMMON[:count]
    r = random.Random(5)
    lines = []
    while sum(map(len, lines)) < chars:
        lines.append(" ".join(r.choice(words) for _ in range(r.randint(4, 14))).capitalize() + ".")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
